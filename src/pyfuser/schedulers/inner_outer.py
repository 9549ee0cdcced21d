"""Inner-outer scheduler: row reductions and column sums of the same tensor in one
kernel (normalization backwards: dx needs per-row sums, dw and db per-column sums).

Accepted: every reduction reads a tensor shaped like the first one's input (the
reference, [K rows, J]); the row group reduces the trailing dims, the same for all,
and the column group reduces the same leading dims, each a float32-accumulated sum;
nothing full-size or row-shaped is computed from a column sum; the row fits the
persistent tile.

Two walks, by what the column sums keep:

* all of the row dims summed (a layer norm's dw over every token): ``NPROG``
  programs walk row blocks and fold their column partials in two levels;
* only the leading ones (a shared attention bias's gradient, the batch sum of
  [batch, heads, q, k] score gradients, is [1, heads, q, k]): the kept ones number
  the ``groups``, rows with the same trailing coordinates, and each program sums its
  block of groups over the leading rows in registers, then stores them: no folds.
  On the GPU only where the groups fill the machine twice over (``MIN_WAVES``).

Before this scheduler such a fusion ran as an inner normalization and an outer
reduction, the second reading the full-size inputs again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..codegen.emit import emit_kernel
from ..codegen.tiles.inner_outer import InnerOuterTile
from ..codegen.lower import compute_dtype
from ..ir.dtypes import DataType
from ..ir.ops import OPS, REDUCTION_KINDS
from .base import (Reject, Segment, apply_overrides, checked_emit, contiguous_multiple, emitted, invalid_params,
                   next_pow2, powers_of_2, require_valid, too_many_warps)
from .device_model import DeviceModel
from .reduction import kept_and_reduced

NAME = "inner_outer"

# Widest row held on the GPU: the row block and one float32 accumulator per column sum
# stay in registers across the row loop.
MAX_ROW = 8192


@dataclass(frozen=True)
class InnerOuterParams:
    block_k: int  # rows per block
    block_j: int  # the whole row, padded to a power of two
    num_warps: int
    nprog: int  # programs; each walks row blocks pid, pid + nprog, ...
    group: int  # programs per level-1 fold
    fold_rows: int  # partial rows loaded at once by a fold
    int64: bool
    quad_rng: bool = False  # J % 4 == 0: random numbers one Philox call per 4 elements
    stages: int = 1  # the row loop's num_stages (tl.range): 2 loads the next block early
    contig_multiple: int = 1  # the row length is a multiple of this (``base.contiguous_multiple``)
    grouped: bool = False  # the column sums keep trailing row dims: a program per block of groups, no folds

    def validate(self) -> InnerOuterParams:
        """Raise ``ChoicesError`` for combinations no kernel takes; returns self."""
        bad = powers_of_2(self, "block_k", "block_j", "num_warps", "contig_multiple") + too_many_warps(self)
        bad += [f"{n}={getattr(self, n)} must be >= {lo}" for n, lo in (("nprog", 1), ("group", 0), ("fold_rows", 0),
                                                                        ("stages", 1)) if getattr(self, n) < lo]
        return require_valid(self, bad)


def analyse(seg: Segment):
    """(reference, row dims, column-sum exprs, column-summed dims) or a Reject;
    computed once per segment."""
    return seg.cached("inner_outer.analyse", lambda: _analyse(seg))


def _analyse(seg: Segment):
    reds = seg.reductions()
    if not reds:
        return Reject("no_reduction", "the segment has no reduction")
    ref = reds[0].inputs[0]
    shape = seg.shapes[ref]
    n = len(shape)
    live = [d for d, s in enumerate(shape) if s != 1]
    if not live:
        return Reject("no_rows", f"{ref.name} has no dim of extent > 1")
    inner = [e for e in reds if live[-1] in e.attrs["dims"]]
    outer = [e for e in reds if e not in inner]
    if not inner or not outer:
        return Reject("one_direction", "the segment reduces only rows or only columns")
    row_dims = tuple(sorted(inner[0].attrs["dims"]))
    if row_dims != tuple(range(n - len(row_dims), n)) or len(row_dims) == n:
        return Reject("row_dims", f"rows of {ref.name} reduce dims {list(row_dims)}, not trailing ones")
    col_dims = tuple(sorted(outer[0].attrs["dims"]))
    if col_dims != tuple(range(len(col_dims))) or len(col_dims) + len(row_dims) > n:
        return Reject("column_dims", f"columns of {ref.name} sum dims {list(col_dims)}, not leading row dims")
    for e in reds:
        if seg.shapes[e.inputs[0]] != shape:
            return Reject("mixed_shapes", f"{e.op} reduces {e.inputs[0].name}, not shaped like {ref.name}")
        dims = tuple(sorted(e.attrs["dims"]))
        if dims != (row_dims if e in inner else col_dims):
            return Reject("mixed_reductions", f"{e.op} of {e.inputs[0].name} over {list(dims)}: neither the rows "
                                              f"{list(row_dims)} nor the columns {list(col_dims)}")
    for e in outer:
        if e.op != "sum" or compute_dtype(e.outputs[0].dtype) is not DataType.Float:
            return Reject("column_op", f"column {e.op} to {e.outputs[0].dtype}: only float32-accumulated sums")
    return ref, row_dims, outer, col_dims


def is_grouped(seg: Segment) -> bool:
    """Whether the column sums keep some of the row dims (the groups' walk)."""
    ref, dims, outer, col_dims = analyse(seg)
    return len(col_dims) + len(dims) < len(seg.shapes[ref])


def groups(seg: Segment) -> int:
    """Column-sum rows of the groups' walk: the elements of the kept row dims."""
    ref, dims, outer, col_dims = analyse(seg)
    return math.prod(s for d, s in enumerate(seg.shapes[ref]) if d not in dims and d not in col_dims)


def can_schedule(seg: Segment) -> Reject | None:
    a = analyse(seg)
    if isinstance(a, Reject):
        return a
    ref, dims, outer, _ = a
    K, J = kept_and_reduced(seg, ref, dims)
    if K == 0 or J == 0:
        return Reject("empty", f"{ref.name} has no rows or no columns")
    if seg.device_type == "cuda" and next_pow2(J) > MAX_ROW:
        return Reject("wide_rows", f"rows of {J} elements do not fit the persistent tile (at most {MAX_ROW})")
    if seg.device_type == "cuda" and is_grouped(seg) and groups(seg) < MIN_WAVES * ROWS_PER_BLOCK * seg.model.sms:
        return Reject("few_groups", f"{groups(seg)} column-sum rows fill fewer than {MIN_WAVES} waves of "
                                    f"{seg.model.sms} programs")
    col_vals = {o for e in outer for o in e.outputs}
    for e in seg.exprs():
        if e in outer:
            continue
        if any(v in col_vals for v in e.inputs):
            if OPS[e.op].kind in REDUCTION_KINDS or \
                    any(seg.shapes.get(o) == seg.shapes[ref] for o in e.outputs):
                return Reject("column_feeds_rows", f"{e.op} reads a column sum inside the rows")
            col_vals.update(e.outputs)
    return None


# Rows per block on the GPU (one where two do not fit the register budget: ``fallbacks``).
ROWS_PER_BLOCK = 2
# The groups' walk has a program per block of groups and nothing to fold: it needs
# enough of them to keep every SM busy.  Fewer run as two kernels, an inner
# normalization and an outer reduction.
MIN_WAVES = 2


def heuristics(seg: Segment) -> InnerOuterParams:
    """Two rows per block, 8 elements per thread (16 from 2048 up), 4 programs per SM
    of 4 warps, the row loop pipelined 3 deep; one row per block where two need more
    registers than one wave of programs allows (``fallbacks``).  Two rows per
    block keep twice the bytes in flight per program; the column sums accumulate
    elementwise in [2, BLOCK_J] blocks, summed over the rows once after the loop (summed
    every iteration, the rows of a block spread over warps by a 1-byte mask's layout
    made the dropout case 5x slower).  "No folds" leaves the column partials unfolded:
    the two-level fold is the serial tail of the kernel; pipelining the folds' loops
    costs more shared memory than it saves.  8 warps per row block were slower
    everywhere.  docs/TUNING.md#inner-outer"""
    ref, dims, outer, _ = analyse(seg)
    K, J = kept_and_reduced(seg, ref, dims)
    bj = next_pow2(J)
    int64 = seg.needs_int64()
    if is_grouped(seg):
        return _grouped_heuristics(seg, groups(seg), J, int64)
    if seg.device_type == "cpu":
        bk = max(1, min(next_pow2(K), (1 << 12) // bj))
        blocks = -(-K // bk)
        nprog = max(1, min(blocks, 4))
        return _sized(apply_overrides(InnerOuterParams(bk, bj, 4, nprog, 2, 2, int64, J % 4 == 0,
                                                       contig_multiple=contiguous_multiple(J))))
    per_thread = 8 if bj <= 1024 else 16
    warps = max(1, min(16, bj // (32 * per_thread)))
    bk = min(ROWS_PER_BLOCK, next_pow2(K))
    nprog = max(1, min(-(-K // bk), seg.model.sms * programs_per_sm(seg.model, warps)))
    return _sized(apply_overrides(InnerOuterParams(bk, bj, warps, nprog, 0, 0, int64, J % 4 == 0,
                                                   stages=pipelined_stages(seg, 3, bk, bj),
                                                   contig_multiple=contiguous_multiple(J))))


def _grouped_heuristics(seg: Segment, F: int, J: int, int64: bool) -> InnerOuterParams:
    """The groups' walk: two groups per block on the GPU, 8 elements per thread (16 from
    2048 up), the walk over the summed rows pipelined 2 deep; a program per block (the
    count follows a chosen ``block_k``)."""
    bj = next_pow2(J)
    if seg.device_type == "cpu":
        bk, warps, stages = max(1, min(next_pow2(F), (1 << 12) // bj, 4)), 4, 1
    else:
        per_thread = 8 if bj <= 1024 else 16
        warps = max(1, min(16, bj // (32 * per_thread)))
        bk = min(ROWS_PER_BLOCK, next_pow2(F))
        stages = pipelined_stages(seg, 2, bk, bj)
    p = apply_overrides(InnerOuterParams(bk, bj, warps, 0, 0, 0, int64, J % 4 == 0, stages=stages,
                                         contig_multiple=contiguous_multiple(J), grouped=True))
    return p if p.nprog else replace(p, nprog=-(-F // max(1, p.block_k)))  # a program per block of groups


def programs_per_sm(model: DeviceModel, warps: int) -> int:
    """Programs each SM should hold at once: a quarter of its warps' worth (16 of 64),
    at most 4 (fewer programs leave fewer column partials to fold)."""
    return max(1, min(4, model.max_warps_per_sm // 4 // warps))


def pipelined_stages(seg: Segment, stages: int, block_k: int, block_j: int) -> int:
    """``stages`` for the row loop, or fewer where the ``stages - 1`` blocks the
    pipeline keeps in shared memory (every full-size load, ``block_k`` x ``block_j``)
    would not fit one program's shared memory: such a kernel could not launch."""
    ref = analyse(seg)[0]
    n = seg.numel(ref)
    block = block_k * block_j * sum(v.dtype.itemsize for v in seg.loads() if seg.numel(v) == n)
    while stages > 1 and (stages - 1) * block > seg.model.shared_bytes_per_block:
        stages -= 1
    return stages


def max_registers(seg: Segment, params: InnerOuterParams) -> int | None:
    """Registers per thread that let every program be resident at once (the grid is
    one wave: a second would run ``nprog`` rows' worth of work again on part of the
    GPU).  None on the CPU."""
    if seg.device_type != "cuda" or params.grouped:  # the groups' walk runs in as many waves as it needs
        return None
    per_sm = -(-params.nprog // seg.model.sms)
    return seg.model.registers_per_sm // (per_sm * 32 * params.num_warps)


def _sized(p: InnerOuterParams) -> InnerOuterParams:
    """Fill in the fold: groups of about sqrt(nprog) programs (each level folds about
    as many rows), loaded 4096 elements at a time.  The groups' walk has no fold."""
    if p.grouped:
        return p
    group = p.group or max(1, math.isqrt(p.nprog - 1) + 1)
    rows = p.fold_rows or max(1, min(next_pow2(max(group, -(-p.nprog // group))), 4096 // p.block_j))
    return replace(p, group=group, fold_rows=rows)


def can_schedule_runtime(seg: Segment, params: InnerOuterParams) -> Reject | None:
    """Whole rows in one block, and every output a row result, a column result or
    full-size: the kernel's walk, kept for ``emit``."""
    rej = invalid_params(params, NAME)
    if rej is not None:
        return rej
    ref, dims, outer, _ = analyse(seg)
    J = kept_and_reduced(seg, ref, dims)[1]
    if params.block_j < J:  # e.g. a choice meant for the multi-pass tiles
        return Reject("rows_fit_block", f"{NAME} holds whole rows: block_j {params.block_j} < row of {J}", NAME)
    if params.grouped != is_grouped(seg):
        return Reject("walk", f"{NAME} params for the {'groups' if params.grouped else 'folded'} walk; the column "
                              f"sums need the {'groups' if is_grouped(seg) else 'folded'} one", NAME)
    if params.grouped and params.nprog * params.block_k < groups(seg):
        return Reject("groups_covered", f"{params.nprog} programs of {params.block_k} groups do not cover "
                                        f"{groups(seg)}", NAME)
    return checked_emit(seg, NAME, params, build_tile, _generate)


def settle(seg: Segment, params: InnerOuterParams, met: set) -> InnerOuterParams:
    """The contract's ``settle``: these kernels take every size at run time."""
    return params


def emit(seg: Segment, params: InnerOuterParams, name: str):
    return emitted(seg, NAME, params, name, build_tile, _generate)


def build_tile(seg: Segment, params: InnerOuterParams):
    """The tile ``params`` describe over the segment's reference."""
    ref, dims, outer, col_dims = analyse(seg)
    return InnerOuterTile(ref, dims, params.block_k, params.block_j, params.int64, params.quad_rng, outer,
                          params.nprog, params.group, params.fold_rows, params.stages, params.contig_multiple,
                          col_dims if params.grouped else None)


def _generate(seg: Segment, params: InnerOuterParams, tile, name: str):
    return emit_kernel(name, seg.outputs, seg.shapes, seg.inputs_info, tile, [f"scheduler: {NAME} {params}"],
                       seg.values)


def grid(seg: Segment, params: InnerOuterParams):
    return (params.nprog,)


def fallbacks(seg: Segment, params: InnerOuterParams) -> list:
    """When the kernel spills or needs more registers than one wave allows: one row per
    block, then half the programs (twice the registers each), down to one per SM.
    The groups' walk: one group per block, twice the programs."""
    out, p = [], params
    if p.grouped:
        return [replace(p, block_k=1, nprog=p.nprog * p.block_k)] if p.block_k > 1 else []
    if p.block_k > 1:
        p = replace(p, block_k=1)
        out.append(p)
    sms = seg.model.sms
    while p.nprog // 2 >= sms:
        p = replace(p, nprog=p.nprog // 2, group=0, fold_rows=0)
        out.append(_sized(p))
    return out


__all__ = ["NAME", "InnerOuterParams", "can_schedule", "can_schedule_runtime", "heuristics", "emit", "grid",
           "fallbacks", "max_registers"]
