"""Executes from many threads: one cached fusion shared by all, and a fusion per thread,
each result compared with eager; Triton's libdevice is left as it was found."""
from __future__ import annotations

import threading

import pytest
import torch

from pyfuser import DataType, FusionDefinition

from .conftest import device

THREADS = 8
LIBDEVICE_NAMES = ("tanh", "atan2", "pow", "fmod", "expm1", "log1p")


def math_fd() -> FusionDefinition:
    """libdevice calls (tanh, atan2, pow, fmod) next to plain arithmetic."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        t = fd.ops.add(fd.ops.mul(fd.ops.tanh(x), fd.define_scalar(2.0)), fd.define_scalar(1.0))
        fd.add_output(fd.ops.add(t, fd.ops.atan2(x, y)))
        fd.add_output(fd.ops.add(fd.ops.pow(fd.ops.abs(x), y), fd.ops.fmod(x, y)))
    return fd


def math_eager(x, y):
    return [torch.tanh(x) * 2 + 1 + torch.atan2(x, y), torch.pow(x.abs(), y) + torch.fmod(x, y)]


def scaled_fd(k: int) -> FusionDefinition:
    """A fusion of its own per thread: ``x * k + 1`` then a row sum."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t = fd.ops.add(fd.ops.mul(x, fd.define_scalar(float(k))), fd.define_scalar(1.0))
        fd.add_output(t)
        fd.add_output(fd.ops.sum(t, dims=[1]))
    return fd


def run_threads(work, n=THREADS):
    """Run ``work(i)`` in ``n`` threads started together; the errors they raised."""
    start = threading.Barrier(n)
    errors = []

    def body(i):
        start.wait()
        try:
            work(i)
        except Exception as err:  # noqa: BLE001 - collected, reported by the test
            errors.append(f"thread {i}: {type(err).__name__}: {err}")

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def libdevice_now():
    from triton.language.extra import libdevice

    return {name: getattr(libdevice, name) for name in LIBDEVICE_NAMES}


def one_cached_fusion(executes: int, size: int):
    fd = math_fd()
    g = torch.Generator().manual_seed(1)
    warm = [torch.randn(size, generator=g).to(device()), torch.rand(size, generator=g).to(device()) + 0.5]
    fd.execute(warm)  # cached: every thread then takes the cached path

    def work(i):
        gen = torch.Generator().manual_seed(100 + i)
        for _ in range(executes):
            x = torch.randn(size, generator=gen).to(device())
            y = (torch.rand(size, generator=gen) + 0.5).to(device())
            for got, want in zip(fd.execute([x, y]), math_eager(x, y)):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    return run_threads(work)


def own_fusions(executes: int, rows: int, cols: int):
    def work(i):
        fd = scaled_fd(i + 2)
        gen = torch.Generator().manual_seed(200 + i)
        for _ in range(executes):
            x = torch.randn(rows, cols, generator=gen).to(device())
            t, s = fd.execute([x])
            torch.testing.assert_close(t, x * (i + 2) + 1)
            torch.testing.assert_close(s, (x * (i + 2) + 1).sum(1), rtol=1e-5, atol=1e-4)

    return run_threads(work)


def test_one_cached_fusion_from_threads():
    before = libdevice_now()
    assert one_cached_fusion(executes=6, size=40) == []
    assert libdevice_now() == before  # never rebound, so never left as the CPU stand-ins


def test_each_thread_its_own_fusion():
    before = libdevice_now()
    assert own_fusions(executes=3, rows=3, cols=20) == []
    assert libdevice_now() == before


def test_threads_at_changing_sizes_share_one_fusion():
    """First executes (planning, building, preparing) race with cached ones."""
    fd = scaled_fd(3)

    def work(i):
        gen = torch.Generator().manual_seed(300 + i)
        for k in range(4):
            x = torch.randn(2 + (i + k) % 3, 8 + 4 * ((i * k) % 4), generator=gen).to(device())
            t, s = fd.execute([x])
            torch.testing.assert_close(t, x * 3 + 1)
            torch.testing.assert_close(s, (x * 3 + 1).sum(1), rtol=1e-5, atol=1e-4)

    assert run_threads(work) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_threads_on_gpu():
    """The same checks with compiled kernels, more executes, larger sizes."""
    assert one_cached_fusion(executes=200, size=1 << 16) == []
    assert own_fusions(executes=50, rows=64, cols=1000) == []
