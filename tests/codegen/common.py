"""Helpers for the code-generator tests: run a definition through the generated
kernels, count launches, and compare every output with the reference executor."""
from __future__ import annotations

import contextlib
import importlib.util
import os

import pytest
import torch

import pyfuser
from pyfuser import DataType, FusionDefinition
from pyfuser.ir.dtypes import from_torch

from ..helpers import assert_matches, gen_for, make_tensor

__all__ = ["DataType", "FusionDefinition", "assert_matches", "gen_for", "make_tensor", "from_torch",
           "tol_for", "BF16_CHAIN", "launches", "check", "kernels_of", "sources_of", "define_input", "fusion",
           "regcheck", "need_ptxas", "around", "assert_fp32_helper_within_two_ulps"]

# fp32: 1e-5 relative as the design asks, with an absolute floor for results near 0;
# fp16/bf16 outputs: about two units in the last place of their own precision (the
# interpreter's fp32 -> bf16 store may round differently from torch's by one ulp).
TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float64: (1e-7, 1e-9),
}


# For chains of ops computed *in* bf16: Triton's interpreter converts fp32 -> bf16 by
# truncation (torch rounds to nearest even), so each intermediate may be one bf16 ulp
# off, and a later subtraction turns that into an absolute error of about one ulp of
# the intermediate's magnitude (intermediates here stay below 16: ulp 2**-4, and the
# truncation and the final rounding can both land on the same side: 2 ulp).
BF16_CHAIN = (1.6e-2, 2 ** -3)


def tol_for(dtype, scale: float = 1.0):
    rtol, atol = TOL[dtype]
    return rtol, atol * scale


@contextlib.contextmanager
def launches():
    """``with launches() as n: ...``; afterwards ``n[0]`` is the number of kernel launches."""
    box = [None]
    before = pyfuser.cache_info()["launches"]
    yield box
    box[0] = pyfuser.cache_info()["launches"] - before


def fusion(build):
    """A FusionDefinition built by ``build(fd)``."""
    with FusionDefinition() as fd:
        build(fd)
    return fd


def define_input(fd, x: torch.Tensor, contiguous=True, **kw):
    """A symbolic input shaped like ``x``; ``contiguous=False`` declares every dim
    non-contiguous (strided inputs)."""
    shape = [1 if s == 1 else -1 for s in x.shape]
    contig = [None if s == 1 else bool(contiguous) for s in x.shape]
    return fd.define_tensor(shape=shape, contiguity=contig, dtype=from_torch(x.dtype), **kw)


def kernels_of(fd):
    """(scheduler name, params) of every kernel ``fd`` has built."""
    rt = fd._runtime
    return [(key.scheduler, key.params) for key in (rt.kernels if rt is not None else {})]


def sources_of(fd) -> list[str]:
    """The source text of every kernel ``fd`` has built."""
    rt = fd._runtime
    return [src.source for src, _ in (rt.kernels.values() if rt is not None else ())]


def check(fd, inputs, *, tol=None, atol_scale=1.0, n_launches=None, scheduler=None, what="", **params):
    """Execute ``fd`` on ``inputs`` (generated kernels), compare each output with the
    reference executor at its dtype's precision; returns the outputs."""
    want = fd.reference(list(inputs))
    with launches() as n:
        got = fd.execute(list(inputs))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        t = None
        if w.dtype.is_floating_point:
            t = tol.get(w.dtype) if isinstance(tol, dict) else tol
            t = t or tol_for(w.dtype, atol_scale)
        assert_matches(g, w, what=f"{what} output {i}", tol=t)
    if n_launches is not None:
        assert n[0] == n_launches, f"{what}: {n[0]} kernel launches, expected {n_launches}"
    built = kernels_of(fd)
    if scheduler is not None:
        assert built and all(name == scheduler for name, _ in built), f"{what}: kernels {built}, expected {scheduler}"
    for field, value in params.items():  # e.g. persistent=False: the variant really ran
        assert built and all(getattr(p, field) == value for _, p in built), f"{what}: kernels {built}, expected {field}={value}"
    return got


def regcheck():
    """``benchmarks/regcheck.py`` as a module: plans bench cases with the CUDA
    heuristics on meta tensors, for offline checks of what a GPU run would choose."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("regcheck", os.path.join(root, "benchmarks", "regcheck.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def need_ptxas():
    """Skip unless Triton's NVIDIA backend brings its ptxas (offline sm_90 compiles)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        get_ptxas(90).path
    except Exception as err:  # a Triton build without the NVIDIA backend's tools
        pytest.skip(f"no ptxas: {err}")


def around(v: float, n: int) -> list[torch.Tensor]:
    """The ``n`` fp32 values either side of ``v``, and ``v``."""
    out, up, down = [torch.tensor(v)], torch.tensor(v), torch.tensor(v)
    for _ in range(n):
        up, down = torch.nextafter(up, torch.tensor(1e9)), torch.nextafter(down, torch.tensor(-1e9))
        out += [up, down]
    return out


def ulps(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """|got - want| in units of the last place of ``want`` rounded to fp32."""
    want32 = want.float().abs()
    ulp = (torch.nextafter(want32, torch.tensor(float("inf"))) - want32).double()
    return (got.double() - want).abs() / ulp


def assert_fp32_helper_within_two_ulps(op: str, x: torch.Tensor, helper: str, replaced: str):
    """``fd.ops.<op>`` of the fp32 values ``x`` (and their negations, and the special
    values) runs in one kernel that calls ``helper`` and not ``replaced``, matches the
    reference executor, is at most 2 ulp from torch's float64 result where finite,
    keeps NaN and -0, and gives +-1 at +-inf (tanh's and erf's limits)."""
    specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30, -1e-30, 1e-40, -1e-40])
    x = torch.cat([x, -x, specials])
    x = torch.cat([x, torch.zeros(-x.numel() % 7)]).reshape(-1, 7)
    fd = fusion(lambda fd: fd.add_output(getattr(fd.ops, op)(define_input(fd, x))))
    (got,) = check(fd, [x], n_launches=1)
    src = "\n".join(sources_of(fd))
    assert f"{helper}(" in src and f"{replaced}(" not in src
    flat, g = x.reshape(-1), got.reshape(-1)
    finite = torch.isfinite(flat)
    err = ulps(g[finite], getattr(torch, op)(flat[finite].double()))
    assert err.max() <= 2.0, f"max {err.max():.2f} ulp at x={flat[finite][err.argmax()].item()!r}"
    assert torch.equal(torch.isnan(g), torch.isnan(flat))
    assert (g[flat == float("inf")] == 1).all() and (g[flat == float("-inf")] == -1).all()
    zeros = flat == 0
    assert torch.equal(torch.signbit(g[zeros]), torch.signbit(flat[zeros]))
