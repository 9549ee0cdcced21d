"""Pointwise scheduler: every output element is a function of input elements.

The reference tensor is the largest output; the kernel walks its flat index in
blocks (``x = pid * BLOCK + arange(BLOCK)``).  Contiguous inputs of the same shape
are read at ``x`` itself; broadcast, permuted, sliced or strided ones through their
coordinates.  Smaller outputs met on the way (masks, biases) are written where the
walk meets them.

Worked example: bias + GELU on [16384, 4096] fp16 with a [4096] bias: the reference
is the [16384, 4096] output; ``x`` addresses input and output directly, the bias at
``x % 4096``.  BLOCK 1024 with 4 warps keeps 8 fp16 elements per thread: one 16-byte
load each.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..codegen.emit import emit_kernel
from ..codegen.tiles import FlatTile
from .base import Reject, Segment, apply_overrides, next_pow2

NAME = "pointwise"


@dataclass(frozen=True)
class PointwiseParams:
    block: int  # elements per program (a power of 2)
    num_warps: int  # warps per program (GPU)
    int64: bool  # index arithmetic in int64 (tensors past 2**30 elements)


def can_schedule(seg: Segment) -> Reject | None:
    if seg.reductions():
        return Reject("has_reduction", f"{len(seg.reductions())} reduction(s) in the segment")
    return None


def reference(seg: Segment):
    return max(seg.outputs, key=seg.numel)


def heuristics(seg: Segment) -> PointwiseParams:
    n = seg.numel(reference(seg))
    if seg.device_type == "cpu":  # the interpreter runs programs one by one: few, large ones
        # Two block sizes only (masked lanes cost little there), so a new size does not
        # compile a new kernel for every power of 2.
        block = 1024 if n <= 1024 else 1 << 14
        return apply_overrides(PointwiseParams(block, 4, seg.needs_int64()))
    # Large tensors: 4096 elements and 8 warps per program (16 per thread) hides the
    # latency of math-heavy bodies (bias + tanh-GELU on H200: 0.089 ms vs 0.094 ms
    # at 1024 x 4 warps); small ones: enough programs to cover the SMs.
    if n >= 1 << 22:
        return apply_overrides(PointwiseParams(4096, 8, seg.needs_int64()))
    block = 1024 if n >= 1 << 20 else max(128, min(1024, next_pow2(n)))
    return apply_overrides(PointwiseParams(block, 4, seg.needs_int64()))


# Registers a pointwise kernel may use at 16 or more elements per thread.  Past it the
# body is heavy enough (tensors or math) that 8 elements per thread on 4 warps keep
# more bytes in flight per SM with fewer registers.  Measured on H200 (2026-11-30,
# 4096 x 8 warps -> 1024 x 4): Adam step 100 -> 55 registers, 126.5 -> 116.2 us;
# GELU-tanh backward 64 -> 38, 116.2 -> 108.4 us; RoPE 128 -> 38, 66.4 -> 57.6 us;
# bias + GELU (40 registers) is best at 16 per thread: 88.3 us vs 94.7 us.
MAX_REGISTERS_WIDE = 56


def max_registers(seg: Segment, params: PointwiseParams) -> int | None:
    """The spill check's register budget (``runtime.spills.rejection``)."""
    return MAX_REGISTERS_WIDE if params.block // (32 * params.num_warps) >= 16 else None


def fallbacks(seg: Segment, params: PointwiseParams) -> list:
    """What the runtime tries, in order, when the kernel spills registers or exceeds
    ``max_registers``: half the elements per thread (so about half the live values) on
    4 warps, halving again down to one 16-byte access per thread of the widest tensor
    (4 fp32 elements)."""
    widest = max(v.dtype.itemsize for v in list(seg.outputs) + seg.loads())
    least = max(1, 16 // widest)
    out = []
    per_thread = params.block // (32 * params.num_warps) // 2
    while per_thread >= least:
        out.append(replace(params, block=per_thread * 32 * 4, num_warps=4))
        per_thread //= 2
    return out


def emit(seg: Segment, params: PointwiseParams, name: str):
    tile = FlatTile(reference(seg), params.block, params.int64)
    return emit_kernel(name, seg.outputs, seg.shapes, seg.inputs_info, tile, [f"scheduler: {NAME} {params}"])


def grid(seg: Segment, params: PointwiseParams):
    n = seg.numel(reference(seg))
    return ((n + params.block - 1) // params.block,)
