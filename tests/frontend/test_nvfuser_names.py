"""nvFuser's public names beyond FusionDefinition: ``TensorView``, ``version``,
``LRUCache``/``LruFusionCache``, ``PythonProfiler``, ``DataType.UInt64``, the repro script,
and the small API forms its scripts use (``t.dtype()``, ``sum(dim=)``, negative
``broadcast_dims``, the errors of an undefined or empty fusion)."""
from __future__ import annotations

import sys

import pytest
import torch

import pyfuser
from pyfuser import (DataType, Fusion, FusionDefinition, LRUCache, LruFusionCache, PythonProfiler, TensorView,
                     version)
from pyfuser.errors import EmptyFusionError
from pyfuser.nvfuser_direct_version import Version
from pyfuser.runtime.profiler import NoProfileError

from ..helpers import assert_all_match, gen_for, make_tensor


def _div(fd, flip=False):
    a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.div(b, a) if flip else fd.ops.div(a, b))


def test_public_names_are_exported():
    for name in ("TensorView", "LRUCache", "LruFusionCache", "PythonProfiler", "version"):
        assert name in pyfuser.__all__
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        assert isinstance(t, TensorView) and t.dtype() is DataType.BFloat16 and t.dtype is DataType.BFloat16
        fd.add_output(t)


def test_version_compares_as_release_numbers():
    assert version() == pyfuser.__version__ and isinstance(version(), str)
    assert version() > "0.0.0" and version() > Version("0.0.0") and version() < Version("999.0")
    assert Version("0.10.0") > Version("0.9.1") and Version("1.0") == Version("1.0.0+git1234")
    with pytest.raises(ValueError, match="release numbers"):
        Version("one.two")
    with pytest.raises(TypeError, match="cannot compare version"):
        version() < 3


def test_fusions_compare_by_what_they_compute():
    fds = []
    for flip in (False, False, True):
        with FusionDefinition() as fd:
            _div(fd, flip)
        fds.append(fd)
    assert fds[0].fusion == fds[1].fusion and hash(fds[0].fusion) == hash(fds[1].fusion)
    assert fds[0].fusion != fds[2].fusion
    assert Fusion() != Fusion()  # undefined ones are only themselves


def test_lru_fusion_cache_shares_one_executor_and_reports_nvfusers_stats():
    gen = gen_for("lru")
    x, y = make_tensor((2, 4), torch.float32, gen), make_tensor((2, 4), torch.float32, gen)

    @LruFusionCache(max_fusions=10)
    def create(flip):
        with FusionDefinition() as fd:
            _div(fd, flip)
        return fd

    assert create.stats() == "Max Fusions Allowed: 10\nThe fusion cache is empty.\n"
    first = create(False)
    for _ in range(3):
        fd = create(False)
        assert fd is not first and fd.fec is first.fec
        assert_all_match(fd.execute([x, y]), [x / y], tol=(0.0, 0.0))
        assert_all_match(create(True).execute([x, y]), [y / x], tol=(0.0, 0.0))
    assert first._runtime is not None  # the copies ran on the first definition's executor
    assert create.num_fusions() == 2
    assert create.stats() == ("Max Fusions Allowed: 10\nTotal Fusions in Cache: 2\nTotal Unique Fusions Compiled: 2\n"
                              "Cache Hits by LRU ordering:\n\t0 -> 2 hits\n\t1 -> 3 hits\nCache Lookups: 7\n"
                              "Cache Hits: 5\nHit Rate: 71.4286%\n")


def test_lru_cache_evicts_the_least_recently_used():
    cache = LRUCache(max_fusions=1)
    with FusionDefinition() as a:
        _div(a)
    with FusionDefinition() as b:
        _div(b, flip=True)
    first = cache.cache_compile(a.fusion)
    assert cache.cache_compile(a.fusion) is first and cache.num_fusions() == 1
    cache.cache_compile(b.fusion)
    assert cache.num_fusions() == 1 and cache.cache_compile(a.fusion) is not first
    with pytest.raises(ValueError, match="max_fusions must be an int > 0, got 0"):
        LRUCache(0)


def test_python_profiler_profiles_the_executes_in_its_block():
    x = make_tensor((2, 5), torch.float32, gen_for("prof"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.add(t, t), dim=-1))
    fd.execute([x])  # outside the block: not profiled
    with PythonProfiler() as prof:
        with pytest.raises(NoProfileError, match="no fusion was executed"):
            prof.profile
        (out,) = fd.execute([x])
    assert_all_match([out], [(x + x).sum(-1)], tol=(1e-6, 1e-6))
    p = prof.profile
    assert p.fusion_id == fd.id and p.segments == len(p.kernel_profiles) >= 1
    assert all(k.name and k.scheduler and k.time_ms >= 0 for k in p.kernel_profiles)
    fd.execute([x])
    assert len(prof.profiles) == 1  # the block has ended


def test_uint64_tensors_pass_through():
    seed = torch.tensor([7, 2**63 + 5], dtype=torch.uint64)
    with FusionDefinition() as fd:
        s = fd.define_tensor(shape=[2], dtype=DataType.UInt64)
        fd.add_output(s)
    assert DataType.UInt64.torch is torch.uint64 and DataType.UInt64.is_int
    (out,) = fd.execute([seed])
    assert out.dtype == torch.uint64 and torch.equal(out.view(torch.int64), seed.view(torch.int64))


def test_sum_dim_keyword_and_negative_broadcast_dims():
    x = make_tensor((3, 4), torch.float32, gen_for("dim-kw"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        s = fd.ops.sum(t, dim=-1)
        fd.add_output(fd.ops.broadcast_in_dim(s, shape=[3, 4], broadcast_dims=[-2]))
    assert_all_match(fd.execute([x]), [x.sum(-1, keepdim=True).expand(3, 4)], tol=(1e-6, 1e-6))
    with pytest.raises(TypeError, match="give dim= or dims=, not both"):
        with FusionDefinition() as fd:
            fd.ops.sum(fd.define_tensor(shape=[2], dtype=DataType.Float), [0], dim=0)


def test_executing_an_undefined_or_empty_fusion():
    with pytest.raises(NotImplementedError, match="Fusion does not exist! Use `with FusionDefinition"):
        FusionDefinition().execute([torch.ones(2)])
    with FusionDefinition() as fd:
        pass
    with pytest.raises(EmptyFusionError, match="Fusion is empty!"):
        fd.execute([])


def test_repro_script_for_runs_with_pyfuser():
    x = make_tensor((2, 3), torch.float32, gen_for("repro-for"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(t, 2.5))
    with pytest.raises(AssertionError, match="save_repro_inputs=True"):
        fd.last_repro_script()
    fd.execute([x.t()], save_repro_inputs=True)
    script = fd.last_repro_script()
    assert "from nvfuser_direct import FusionDefinition, DataType\ndef nvfuser_fusion(" in script
    assert ".as_strided((3, 2), (1, 3))" in script and "fd.execute(inputs)" in script
    assert "inputs = [" not in fd.repro_script_for()
    namespace: dict = {}
    had = "nvfuser_direct" in sys.modules
    try:
        exec(compile(script, "<repro>", "exec"), namespace)  # nvfuser_direct absent: pyfuser runs it
    finally:
        if not had:
            sys.modules.pop("nvfuser_direct", None)
    assert isinstance(namespace["fd"], FusionDefinition)
