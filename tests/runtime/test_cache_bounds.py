"""Caches stay within their bounds (least recently used evicted first): prepared
launches per input size (PYFUSER_PREPARED_SIZES), imported kernel modules
(PYFUSER_KERNEL_MODULES, evicted ones leave sys.modules) and kernel files on disk
(PYFUSER_CACHE_FILES)."""
from __future__ import annotations

import os
import sys

import pytest
import torch

from pyfuser import DataType, FusionDefinition, PyfuserError
from pyfuser.runtime import cache

from .conftest import device


def scaled_fd(k: float) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.mul(x, fd.define_scalar(k)), fd.define_scalar(1.0)))
    return fd


def kernel_files(d):
    return sorted(n for n in os.listdir(d) if n.startswith("pyfuser_kernel_") and n.endswith(".py"))


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    d = tmp_path / "kernels"
    monkeypatch.setenv("PYFUSER_CACHE_DIR", str(d))
    return str(d)


def test_prepared_sizes_stay_at_their_bound(monkeypatch):
    monkeypatch.setenv("PYFUSER_PREPARED_SIZES", "4")
    fd = scaled_fd(3.0)
    sizes = list(range(5, 45))
    for n in sizes:
        x = torch.randn(n, device=device())
        (out,) = fd.execute([x])
        torch.testing.assert_close(out, x * 3 + 1)
        assert len(fd._runtime.programs) <= 4
    assert len(fd._runtime.programs) == 4
    assert len(fd._runtime.plans) == 1
    # least recently used goes first: a size run again stays, the one after it goes
    keep = torch.randn(sizes[-4], device=device())
    fd.execute([keep])
    fd.execute([torch.randn(100, device=device())])
    kept = {key[-1][1][0] for key in fd._runtime.programs}  # the input's (dtype, shape, ...): its size
    assert sizes[-4] in kept and sizes[-3] not in kept and 100 in kept
    (out,) = fd.execute([keep])  # evicted sizes prepare again, correctly
    torch.testing.assert_close(out, keep * 3 + 1)


def test_kernel_modules_stay_at_their_bound(monkeypatch, private_cache):
    monkeypatch.setenv("PYFUSER_KERNEL_MODULES", "3")
    fds = []
    for k in range(8):
        fd = scaled_fd(k + 0.5)
        x = torch.randn(17, device=device())
        (out,) = fd.execute([x])
        torch.testing.assert_close(out, x * (k + 0.5) + 1)
        fds.append((fd, x, k + 0.5))
        names = cache.loaded_modules()
        assert len(names) <= 3
    ours = [n for n in sys.modules if n.startswith("pyfuser_kernel_")]
    assert sorted(ours) == sorted(cache.loaded_modules())
    for fd, x, k in fds:  # fusions holding an evicted module's kernel still run it
        (out,) = fd.execute([x])
        torch.testing.assert_close(out, x * k + 1)


def test_kernel_files_stay_at_their_bound(monkeypatch, private_cache):
    monkeypatch.setenv("PYFUSER_CACHE_FILES", "3")
    for k in range(7):
        x = torch.randn(9, device=device())
        (out,) = scaled_fd(k + 0.25).execute([x])
        torch.testing.assert_close(out, x * (k + 0.25) + 1)
        assert len(kernel_files(private_cache)) <= 3
    assert len(kernel_files(private_cache)) == 3
    assert not [n for n in os.listdir(private_cache) if n.endswith(".tmp")]


def test_a_bad_bound_is_an_error(monkeypatch):
    monkeypatch.setenv("PYFUSER_PREPARED_SIZES", "zero")
    with pytest.raises(PyfuserError, match="PYFUSER_PREPARED_SIZES: expected a positive integer, got 'zero'"):
        scaled_fd(2.0).execute([torch.randn(4, device=device())])
