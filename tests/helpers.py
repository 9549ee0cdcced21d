"""Shared test helpers: build-and-run a fusion, make inputs, compare with eager.

Inputs are random and never zero (a kernel that writes nothing, or reads the wrong
element, must not pass by luck); floats mix signs and magnitudes.  Comparisons
check dtype and shape exactly and values at the output dtype's precision.
"""
from __future__ import annotations

import contextlib
import zlib

import torch

from pyfuser import FusionDefinition

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int64, torch.int32)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool,)

# (rtol, atol) per output dtype: fp32 math to about 1e-5 relative; fp16/bf16 to about
# two units in the last place of their own precision.
TOLERANCES = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1.3e-5, 1e-6),
    torch.float16: (2e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


def define(build, *args) -> FusionDefinition:
    """``build(fd, *args)`` inside a current-API FusionDefinition."""
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


def run(build, inputs, *args):
    return define(build, *args).execute(list(inputs))


def make_tensor(shape, dtype, gen: torch.Generator, *, special=False, positive=False, low=0.25, high=4.0):
    """Random values, never 0.  Floats: magnitudes in [low, high), random signs unless
    ``positive``; ``special`` puts NaN, inf and -inf in the first elements.  Ints: in
    [-9, 9] (or [1, 9]); bools: random."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        mag = low + (high - low) * torch.rand(shape, generator=gen, dtype=torch.float64)
        sign = torch.ones(shape, dtype=torch.float64) if positive else \
            torch.where(torch.rand(shape, generator=gen) > 0.5, 1.0, -1.0).to(torch.float64)
        x = (mag * sign).to(dtype)
        if special and x.numel() >= 3:
            flat = x.view(-1)
            flat[0], flat[1], flat[2] = float("nan"), float("inf"), float("-inf")
        return x
    lo = 1 if positive else -9
    x = torch.randint(lo, 10, shape, generator=gen, dtype=torch.int64)
    x = torch.where(x == 0, torch.ones_like(x), x)
    return x.to(dtype)


def assert_matches(got, want, *, what="output", tol=None):
    """Same dtype and shape, values equal at the dtype's precision (NaN == NaN)."""
    assert isinstance(got, torch.Tensor), f"{what}: expected a tensor, got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, torch gives {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)}, torch gives {tuple(want.shape)}"
    if want.dtype.is_floating_point:
        rtol, atol = tol or TOLERANCES[want.dtype]
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(got, want), f"{what}: values differ\n got {got}\nwant {want}"


def assert_all_match(gots, wants, **kw):
    assert len(gots) == len(wants), f"{len(gots)} outputs, expected {len(wants)}"
    for i, (g, w) in enumerate(zip(gots, wants)):
        assert_matches(g, w, what=f"output {i}", **kw)


def gen_for(*parts) -> torch.Generator:
    """A generator seeded from the test's parameters: stable across processes (unlike
    ``hash``), so a failure reproduces."""
    return torch.Generator().manual_seed(zlib.crc32(repr(parts).encode()))


@contextlib.contextmanager
def without_scheduler(name: str):
    """Plan as if scheduler ``name`` did not exist.  Tests of multi-kernel plans keep
    their fusions this way: a layer-norm backward (row and column sums) is one
    ``inner_outer`` kernel, and was the natural two-kernel example before it."""
    from pyfuser.schedulers import Choices

    with Choices(disable=(name,)):
        yield
