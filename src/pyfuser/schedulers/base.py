"""What every scheduler shares: the segment it is asked about, rejections, overrides.

A scheduler module provides ``can_schedule(seg) -> Reject | None`` (a pure look at
the fusion and its concrete shapes), ``heuristics(seg) -> Params`` (speed only),
``emit(seg, params, name) -> KernelSource`` (correct for any valid params),
``grid(seg, params)``, and optionally ``fallbacks(seg, params) -> [Params]``: what to
try next when the compiled kernel spills registers (the runtime checks on the GPU).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass

import torch

from ..codegen.emit import live_exprs_for
from ..ir.ops import OPS
from ..ir.values import TensorVal

INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class Reject:
    code: str  # stable identifier, e.g. "has_reduction"
    message: str

    def __str__(self):
        return f"{self.code}: {self.message}"


@dataclass
class Segment:
    """A set of fusion outputs to compute in one kernel, with the execute's shapes."""

    outputs: list  # TensorVals
    shapes: dict  # Val -> concrete shape
    inputs_info: dict  # fusion input TensorVal -> {"contiguous": bool}
    device_type: str  # "cuda" or "cpu" (the interpreter)

    def exprs(self):
        return live_exprs_for(self.outputs)

    def reductions(self):
        return [e for e in self.exprs() if OPS[e.op].kind in ("reduction", "var_mean")]

    def loads(self) -> list:
        """The tensor inputs the kernel reads (``inputs_info`` may hold more)."""
        read = {v for e in self.exprs() for v in e.inputs}
        return [v for v in self.inputs_info if v in read]

    def numel(self, v) -> int:
        n = 1
        for s in self.shapes[v]:
            n *= s
        return n

    def needs_int64(self) -> bool:
        vals = {v for e in self.exprs() for v in list(e.inputs) + list(e.outputs) if isinstance(v, TensorVal)}
        vals |= set(self.outputs)
        return any(self.numel(v) > INT32_LIMIT // 2 for v in vals)


# Parameter overrides, for tests that must exercise every variant on small shapes
# (e.g. the multi-pass normalization, or two tilings that must give identical bits).
_OVERRIDES: dict = {}


@contextlib.contextmanager
def override(**fields):
    """``with override(persistent=False, block_j=16): ...`` forces params fields."""
    old = dict(_OVERRIDES)
    _OVERRIDES.update(fields)
    try:
        yield
    finally:
        _OVERRIDES.clear()
        _OVERRIDES.update(old)


def apply_overrides(params):
    fields = {f.name for f in dataclasses.fields(params)}
    chosen = {k: v for k, v in _OVERRIDES.items() if k in fields}
    return dataclasses.replace(params, **chosen) if chosen else params


def contiguous_multiple(n: int) -> int:
    """The largest power of 2 below 16 that divides ``n``, the extent along a tile's
    contiguous axis, when 16 does not (else 1).

    Triton specializes an integer argument on divisibility by 16 only.  Rows of 1000
    fp16 elements start 16-byte aligned, but in ``k * J + j`` and ``j < J`` the
    compiler cannot see it and loads 2 bytes at a time; ``J = J // 8 * 8`` in the
    kernel (``codegen.tiles.say_multiple``) shows it 16-byte vectors, as fast as a
    kernel with the width a constant (docs/TUNING.md#contiguous-multiple).  The plan is made for the
    exact shape (``executor.fingerprint``) and the kernel's source carries the
    multiple, so no launch sees another extent."""
    return 1 if n % 16 == 0 else n & -n  # the lowest set bit: 1, 2, 4 or 8


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


# The device the heuristics plan for: the current GPU's, the H200's without one (a plan
# made offline by benchmarks/regcheck.py).
H200_SMS = 132
H200_L2_BYTES = 60 * 2**20  # as CUDA reports it (62914560)


def sm_count() -> int:
    """SMs of the current GPU."""
    return _props(torch.cuda.current_device())[0] if torch.cuda.is_available() else H200_SMS


def l2_bytes() -> int:
    """L2 cache bytes of the current GPU."""
    return _props(torch.cuda.current_device())[1] if torch.cuda.is_available() else H200_L2_BYTES


@functools.lru_cache(maxsize=None)
def _props(index: int) -> tuple:
    p = torch.cuda.get_device_properties(index)
    return p.multi_processor_count, p.L2_cache_size
