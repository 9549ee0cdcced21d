"""Pointwise scheduler: every output element is a function of input elements.

The reference tensor is the largest output; the kernel walks its flat index in
blocks (``x = pid * BLOCK + arange(BLOCK)``).  Contiguous inputs of the same shape
are read at ``x`` itself; broadcast, permuted, sliced or strided ones through their
coordinates.  Smaller outputs met on the way (masks, biases) are written where the
walk meets them.

Worked example: bias + GELU on [16384, 4096] fp16 with a [4096] bias: the reference
is the [16384, 4096] output; ``x`` addresses input and output directly, the bias at
``x % 4096``.  BLOCK 2048 with 4 warps keeps 16 fp16 elements per thread: two 16-byte
loads each.  Its tanh is not computed: ``0.5 h (1 + tanh(u))`` is emitted as ``0.5 h *
2 / (1 + e^-2u)`` (``lower.Lowering.shifted_tanh``).

Broadcast tile: where a heavy op (sin, cos, tanh, erf, ...: ``OpDef.heavy``) reads
values broadcast along some dims, a flat walk evaluates it at every output element.
RoPE on [tokens, heads, 128] takes cos and sin of angles [tokens, 128] shared by the
heads: 2 transcendental evaluations per element made it compute-bound well below
copy bandwidth (docs/TUNING.md#broadcast-tile).  A probe walk (``codegen.variation``)
tells along which dims each heavy op's result varies; when the dims it does not vary along (not the last, which
stays contiguous) hold at least ``MIN_SHARED`` elements, the kernel walks a 2-D
``tiles.flat.BroadcastTile`` with those dims on ``k`` (``outer``), and the heavy op is
computed on a [1, BLOCK_J] block shared by the tile's ``block_outer`` rows.  A heavy op
that varies along the outer dims only ([BLOCK_K, 1], once per row) counts as well.

Row tile: the same 2-D tile when an input is read once per row (a row's statistic,
a label: a log-softmax backward from the saved statistics, its result padded for
the GEMMs after it).  A flat walk divides its index by the row length to read
such a value, at every element; the tile puts the rows on ``k``, so the value is a
[BLOCK_K, 1] load and the columns need no division.  Every thread holding a row's
elements computes that row's values, so rows of a vocabulary (tens of thousands of words)
take one row a program (docs/TUNING.md#long-rows).

Transpose tile: the same 2-D tile when an input is read through a permute whose
unit-stride dim is not the output's last (attention's K^T made contiguous: a flat walk
reads it 2 bytes per 128-byte line).  That dim goes on k, 64 of it, so each column
of the tile is one contiguous read, and each row one contiguous write; Triton
converts between the two layouts through shared memory.  The input's unit-stride
dim is part of the plan's signature (``plan.unit_stride_dim``).  When the dims after
that one do not span a multiple of 16 elements (197 tokens), ``j`` walks those
dims alone and each program takes one index of the dims before (``grid_dims``): a j
block running across row ends divides its index by the row length, which hides from
Triton that the store is contiguous along j, and Triton then stores the tile along k,
2 bytes to a line (docs/TUNING.md#transpose-grid).

Two walks, two questions.  The heuristics' probe walk (``codegen.variation``, cached
on the segment) asks along which dims values vary, to choose the tile; it decides
nothing about acceptance, and where it fails the flat tile is chosen.  The run-time
check asks whether the chosen tile computes every output, and a flat or broadcast
tile's constructor and ``codegen.emit.check_outputs`` refuse nothing, so that
answer is the kernel's own walk (``base.checked_emit``): an output the walk does
not reach from the reference, or reaches only below a slice, and what the lowering
cannot write.  The source it generates is kept, and ``emit`` returns it.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace
from typing import ClassVar

from ..codegen.emit import emit_kernel
from ..codegen.tiles.flat import BroadcastTile, FlatTile
from ..codegen.variation import Variation, variation
from ..ir.ops import OPS, OpKind
from .base import (Reject, Segment, apply_overrides, checked_emit, contiguous_multiple, emitted, invalid_params,
                   next_pow2, powers_of_2, require_valid, too_many_warps)

NAME = "pointwise"


@dataclass(frozen=True)
class PointwiseParams:
    """The base of the two forms (never built itself), as the reduction params'
    (``reduction_params``): each form carries its own fields and reads what it fixes
    (``FIXED``: a flat tile's ``outer`` is ``()``); ``outer`` picks the form."""

    FIXED: ClassVar[dict] = {}

    def __getattr__(self, name):
        fixed = type(self).FIXED
        if name in fixed:
            return fixed[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def validate(self) -> PointwiseParams:
        """Raise ``ChoicesError`` for combinations no kernel takes; returns self."""
        return require_valid(self, powers_of_2(self, "block", "num_warps") + too_many_warps(self) + self._problems())

    def _problems(self) -> list:
        return []

    def choose(self, chosen: dict) -> PointwiseParams:
        """``Choices.apply``: the chosen fields, in the form ``outer`` names (``()``: flat)."""
        v = {**type(self).FIXED, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}
        mine = {k: x for k, x in chosen.items() if k in _FIELDS}
        if not mine:
            return self
        v.update(mine)
        form = BroadcastParams if v["outer"] else FlatParams
        return form(**{f.name: v[f.name] for f in dataclasses.fields(form)})


@dataclass(frozen=True)
class FlatParams(PointwiseParams):
    """The flat walk: ``x = pid * BLOCK + arange(BLOCK)`` over the reference."""

    block: int  # elements per program (a power of 2)
    num_warps: int  # warps per program (GPU)
    int64: bool  # index arithmetic in int64 (tensors past 2**30 elements)

    FIXED: ClassVar[dict] = dict(outer=(), block_outer=1, contig_multiple=1, grid_dims=())


@dataclass(frozen=True)
class BroadcastParams(PointwiseParams):
    """The 2-D tile (``tiles.flat.BroadcastTile``): the reference's ``outer`` dims on k."""

    block: int  # elements per program (a power of 2)
    num_warps: int  # warps per program (GPU)
    int64: bool  # index arithmetic in int64 (tensors past 2**30 elements)
    outer: tuple  # reference dims on the tile's k axis
    block_outer: int = 1  # of ``block``, elements along k (a power of 2)
    contig_multiple: int = 1  # J is a multiple of it (``base.contiguous_multiple``)
    grid_dims: tuple = ()  # reference dims of which each program takes one index (not on k or j)

    def _problems(self) -> list:
        bad = powers_of_2(self, "block_outer", "contig_multiple")
        if set(self.grid_dims) & set(self.outer) or len(set(self.grid_dims)) != len(self.grid_dims) \
                or any(not isinstance(d, int) or d < 0 for d in self.grid_dims):
            bad.append(f"grid_dims={self.grid_dims!r} must be distinct dims >= 0, none of outer={self.outer!r}")
        if self.block_outer > self.block:
            bad.append(f"block_outer={self.block_outer} exceeds block={self.block}")
        if not self.outer:
            bad.append("outer=() is a flat tile: a broadcast tile needs dims on k")
        if len(set(self.outer)) != len(self.outer) or any(not isinstance(d, int) or d < 0 for d in self.outer):
            bad.append(f"outer={self.outer!r} must be distinct dims >= 0")
        return bad


FORMS = (FlatParams, BroadcastParams)
_FIELDS = frozenset(f.name for form in FORMS for f in dataclasses.fields(form))


def _params(block: int, num_warps: int, int64: bool, outer=(), block_outer: int = 1, contig_multiple: int = 1,
            grid_dims=()):
    """The form ``outer`` names."""
    if outer:
        return BroadcastParams(block, num_warps, int64, tuple(outer), block_outer, contig_multiple, tuple(grid_dims))
    return FlatParams(block, num_warps, int64)


def can_schedule(seg: Segment) -> Reject | None:
    if seg.reductions():
        return Reject("has_reduction", f"{len(seg.reductions())} reduction(s) in the segment")
    return None


def reference(seg: Segment):
    return max(seg.outputs, key=seg.numel)


# A broadcast tile pays when its heavy ops are shared by at least this many elements.
MIN_SHARED = 4
# Rows on the broadcast tile's k axis: each thread then computes a shared value once
# for up to this many of its elements (Triton puts the warps along the contiguous j
# axis first, so rows mostly stay within a thread).
BLOCK_OUTER = 8
# Elements per program of a broadcast tile on the GPU: 8 rows of 256 on 4 warps, 16
# elements per thread; wider rows cost registers, fewer rows were slower.
# docs/TUNING.md#broadcast-tile
BROADCAST_BLOCK = 2048
# A row tile (values read once per row) over rows at least BROADCAST_BLOCK long takes
# one row of LONG_ROW_BLOCK per program: every thread holding elements of a row
# computes that row's values and their index math, so 8 rows a tile cost each thread 8
# times that work, and rows this long leave no lanes idle.  docs/TUNING.md#long-rows
LONG_ROW_BLOCK = 1024
# The contiguous last dim must be at least this long, or rows of j are short runs.
MIN_ROW = 16


# Transpose tile: an input read through a permute whose unit-stride dim is not the
# output's last: 64 elements of that dim on k (128 contiguous bytes of fp16 per column
# read) against 64 of the output's rows on j (128 contiguous bytes per row written);
# Triton moves the tile between the two layouts through shared memory.
TRANSPOSE_OUTER = 64
TRANSPOSE_BLOCK = 4096


def heuristics(seg: Segment) -> PointwiseParams:
    n = seg.numel(reference(seg))
    int64 = seg.needs_int64()
    outer, bk, gpu_block, grid_dims = tile_choice(seg)
    # an override of ``outer`` (tests, variants) picks the tile; the sizes follow from it,
    # and the grid dims are the override's own (the chosen tile's belong to its outer)
    forced = apply_overrides(_params(0, 0, int64, outer, bk, grid_dims=grid_dims))
    if forced.outer != outer:
        outer, bk, gpu_block = forced.outer, BLOCK_OUTER, BROADCAST_BLOCK
        forced = apply_overrides(_params(0, 0, int64, outer, bk))
    grid_dims = forced.grid_dims
    if outer:
        K, J, _ = tile_extents(seg.shapes[reference(seg)], outer, grid_dims)
        bk = min(bk, next_pow2(K))
        block = (1 << 14 if seg.device_type == "cpu" else gpu_block)
        block = max(bk * 16, min(block, bk * next_pow2(J)))
        if -(-K // bk) <= seg.model.max_grid_y:  # k blocks are the grid's second axis
            return apply_overrides(_params(block, 4, int64, outer, bk, contiguous_multiple(J) if K else 1, grid_dims))
    if seg.device_type == "cpu":  # the interpreter runs programs one by one: few, large ones
        # Two block sizes only (masked lanes cost little there), so a new size does not
        # compile a new kernel for every power of 2.
        block = 1024 if n <= 1024 else 1 << 14
        return apply_overrides(FlatParams(block, 4, int64))
    # Large tensors: 16 elements per thread hides the latency of math-heavy bodies,
    # on 4 warps: 2048 per program (it beat 8 per thread and 4096 on 8 warps).  Small
    # ones: enough programs to cover the SMs.  docs/TUNING.md#pointwise-blocks
    if n >= 1 << 22:
        return apply_overrides(FlatParams(2048, 4, int64))
    block = 1024 if n >= 1 << 20 else max(128, min(1024, next_pow2(n)))
    return apply_overrides(FlatParams(block, 4, int64))


def tile_choice(seg: Segment) -> tuple:
    """``(outer, block_outer, GPU block, grid_dims)`` of a broadcast tile, or
    ``((), 1, 0, ())`` for a flat one: heavy ops shared along some dims first
    (``broadcast_dims``), else a transposed input (``transpose_dims``), else an input
    read once per row (``row_dims``; rows of BROADCAST_BLOCK or more take one row a
    program)."""
    shape = seg.shapes[reference(seg)]
    exprs = seg.exprs()
    if not shape or shape[-1] < MIN_ROW or any(OPS[e.op].kind is OpKind.RANDOM for e in exprs):
        return (), 1, 0, ()  # short rows; random ops keep the flat walk (one Philox call per 4)
    probe = None
    if any(OPS[e.op].heavy for e in exprs):
        probe = probe_walk(seg)
        outer = broadcast_dims(seg, exprs, probe.expr_axes) if probe is not None else ()
        if outer:
            return outer, BLOCK_OUTER, BROADCAST_BLOCK, ()
    if any(seg.inputs_info[v].get("unit_dim") is not None for v in seg.loads()):
        probe = probe or probe_walk(seg)
        outer = transpose_dims(seg, probe.load_axes) if probe is not None else ()
        if outer:
            return outer, TRANSPOSE_OUTER, TRANSPOSE_BLOCK, transpose_grid_dims(shape, outer[0])
    if len(shape) >= 2 and any(len(seg.shapes[v]) >= 2 for v in seg.loads()):
        probe = probe or probe_walk(seg)
        outer = row_dims(seg, probe.load_axes) if probe is not None else ()
        if outer:
            if shape[-1] >= BROADCAST_BLOCK and math.prod(shape[:-1]) <= seg.model.max_grid_y:
                return outer, 1, LONG_ROW_BLOCK, ()
            return outer, BLOCK_OUTER, BROADCAST_BLOCK, ()
    return (), 1, 0, ()


def tile_extents(shape, outer, grid_dims) -> tuple[int, int, int]:
    """(K, J, G) of a broadcast tile over ``shape``: the elements along k (the
    ``outer`` dims), along j (the others) and the grid dims' indices."""
    on_j = [s for d, s in enumerate(shape) if d not in outer and d not in grid_dims]
    return math.prod(shape[d] for d in outer), math.prod(on_j), math.prod(shape[d] for d in grid_dims)


def transpose_grid_dims(shape, r: int) -> tuple:
    """A transpose tile's ``grid_dims``: the dims before ``r`` (the dim on k) when the
    dims after it span a number of elements that is not a multiple of 16, else ()."""
    after = math.prod(shape[r + 1:])
    return tuple(range(r)) if after % 16 and r > 0 else ()


def broadcast_dims(seg: Segment, exprs, varies: dict) -> tuple:
    """The reference dims to put on a broadcast tile's k axis, or (): of the splits
    that leave a heavy op of ``exprs`` varying (``varies``: expr -> reference dims)
    along one axis only, the one that does so for the most heavy ops.  The last dim
    always stays on j (contiguous)."""
    shape = seg.shapes[reference(seg)]
    live = {d for d, s in enumerate(shape) if s > 1}
    last = len(shape) - 1
    heavy = [varies.get(e, frozenset()) & live for e in exprs if OPS[e.op].heavy]
    candidates = set()
    for v in heavy:
        cand = (live - v) if last in v else v  # shared along k, or computed once per row
        cand = tuple(sorted(cand - {last}))
        if cand and math.prod(shape[d] for d in (live - set(cand) if last not in v else cand)) >= MIN_SHARED:
            candidates.add(cand)

    def shared(cand):
        c = set(cand)
        return sum(1 for v in heavy if v and (v <= c or not (v & c)))

    best = max(sorted(candidates), key=shared, default=())
    return best if best and shared(best) else ()


def row_dims(seg: Segment, load_axes: dict) -> tuple:
    """The reference dims but the last when an input is read once per row (it varies
    along some of them, not along the last: a row's statistic, a label), else ()."""
    shape = seg.shapes[reference(seg)]
    last = len(shape) - 1
    live = frozenset(d for d, s in enumerate(shape) if s > 1)
    for v in seg.loads():
        axes = load_axes.get(v)
        varies = frozenset().union(*axes) if axes else frozenset()
        if varies and last not in varies and varies <= live:
            return tuple(sorted(live - {last}))
    return ()


def transpose_dims(seg: Segment, load_axes: dict) -> tuple:
    """``(r,)`` when a full-size input's unit-stride dim is read at reference dim ``r``
    alone, not the last (a transposed read), and ``r`` holds at least MIN_ROW
    elements; else ()."""
    shape = seg.shapes[reference(seg)]
    n, last = math.prod(shape), len(shape) - 1
    for v in seg.loads():
        unit = seg.inputs_info[v].get("unit_dim")
        axes = load_axes.get(v)
        if unit is None or axes is None or seg.numel(v) != n:
            continue
        dims = axes[unit]
        if len(dims) == 1:
            (r,) = dims
            if r != last and shape[r] >= MIN_ROW:
                return (r,)
    return ()


def probe_walk(seg: Segment) -> Variation | None:
    """Along which reference dims each value and each input coordinate vary
    (``codegen.variation``), or None where its walk fails (the flat tile then).
    Computed once per segment."""
    return seg.cached("pointwise.variation",
                      lambda: variation(seg.outputs, seg.shapes, seg.inputs_info, seg.values, reference(seg)))


# Registers a pointwise kernel may use at 16 or more elements per thread.  Past it the
# body is heavy enough (tensors or math) that 8 elements per thread on 4 warps keep
# more bytes in flight per SM with fewer registers.  docs/TUNING.md#pointwise-blocks
MAX_REGISTERS_WIDE = 56


def max_registers(seg: Segment, params: PointwiseParams) -> int | None:
    """The spill check's register budget (``runtime.spills.rejection``).  A broadcast
    tile's threads hold several rows that share values: the spill check alone."""
    if params.outer:
        return None
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
        block = per_thread * 32 * 4
        if block >= params.block_outer * 16:
            out.append(replace(params, block=block, num_warps=4))
        per_thread //= 2
    return out


def tile_sizes(params: PointwiseParams) -> tuple[int, int]:
    """(BLOCK_K, BLOCK_J) of a broadcast tile.  A j block at least 2 wide whenever the
    block allows: Triton's interpreter cannot store a [BLOCK_K, 1] block broadcast from
    a value of one column (a read-only view), so ``block_outer`` yields there."""
    bk = min(params.block_outer, max(1, params.block // 2))
    return bk, params.block // bk


def can_schedule_runtime(seg: Segment, params: PointwiseParams) -> Reject | None:
    """Whether the tile reaches every output from the reference (a smaller output
    below a slice may not be) and the lowering writes every value: the kernel's walk,
    the tile's contract check (module docstring), kept for ``emit``."""
    return invalid_params(params, NAME) or checked_emit(seg, NAME, params, build_tile, _generate)


def settle(seg: Segment, params: PointwiseParams, met: set) -> PointwiseParams:
    """The contract's ``settle``: these kernels take every size at run time."""
    return params


def emit(seg: Segment, params: PointwiseParams, name: str):
    return emitted(seg, NAME, params, name, build_tile, _generate)


def build_tile(seg: Segment, params: PointwiseParams):
    """The tile ``params`` describe over the segment's reference."""
    ref = reference(seg)
    if params.outer:
        bk, bj = tile_sizes(params)
        return BroadcastTile(ref, params.outer, bk, bj, params.int64, params.contig_multiple, params.grid_dims)
    return FlatTile(ref, params.block, params.int64)


def _generate(seg: Segment, params: PointwiseParams, tile, name: str):
    return emit_kernel(name, seg.outputs, seg.shapes, seg.inputs_info, tile, [f"scheduler: {NAME} {params}"],
                       seg.values)


def grid(seg: Segment, params: PointwiseParams):
    ref = reference(seg)
    if params.outer:
        K, J, G = tile_extents(seg.shapes[ref], params.outer, params.grid_dims)
        bk, bj = tile_sizes(params)
        return (G * -(-J // bj), -(-K // bk))
    n = seg.numel(ref)
    return ((n + params.block - 1) // params.block,)
