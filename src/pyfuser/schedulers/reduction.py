"""Reduction schedulers: inner reduction, inner normalization, outer reduction, each a
row of ``reduction_schedulers.ReductionScheduler`` built on this module.

All three run on ``codegen.tiles.reduction.ReductionTile`` (k = kept elements, j = reduced
ones) and differ in what they accept and how they size the tile:

* inner reduction: the innermost dim is reduced and every output is a reduction
  result (row sums, row max);
* inner normalization: the innermost dim is reduced and some output combines the
  reduction results with the reduced tensor again (softmax, log-softmax, layer norm,
  the report's fusions).  Persistent when the row fits a register budget (the row is
  loaded once, kept on chip); otherwise multi-pass over row chunks;
* outer reduction: the innermost dim is kept (bias gradients: sum over dim 0), so
  the tile is laid out with kept elements along the contiguous axis.

This module holds what they share: the analysis, the row heuristics (persistent,
chunked, peeled, prefetched rows), the spill fallbacks, the run-time check, emission
and the grid.  The column strips' sizes live in ``reduction_outer``; the params, one
frozen dataclass per form of the tile, in ``reduction_params``.

Worked example: log-softmax over [8192, 30522] fp16.  J = 30522 pads to 32768 per
row; persistent with one row per program, 32768 / (32 warps * 32 lanes) = 32
elements per thread held as fp16: the row is read once and written once.  On the
GPU the same rows are walked by one program per SM on 16 warps, each holding its
next row's loads in flight while it reduces and stores this one (``prefetch_pays``).
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..codegen.emit import emit_kernel
from ..codegen.tiles.reduction import ReductionTile, is_trailing, peels
from ..ir.analysis import is_reduction
from ..ir.dtypes import DataType
from ..ir.ops import OPS, OpKind
from . import reduction_outer
from .base import (Reject, Segment, apply_overrides, checked_emit, contiguous_multiple, current_choices, emitted,
                   invalid_params, next_pow2)
from .device_model import DeviceModel
from .reduction_outer import OUTER_VALUES_PER_THREAD, outer_values  # noqa: F401  (the outer rules' budget)
from .reduction_params import InnerChunked, InnerPersistent, PrefetchRows, ReductionParams


def analyse(seg: Segment):
    """(reference tensor, reduced dims) or a Reject; computed once per segment."""
    return seg.cached("reduction.analyse", lambda: _analyse(seg))


def _analyse(seg: Segment):
    reds = seg.reductions()
    if not reds:
        return Reject("no_reduction", "the segment has no reduction")
    first = reds[0]
    ref = first.inputs[0]
    dims = tuple(sorted(first.attrs["dims"]))
    for e in reds[1:]:
        if seg.shapes[e.inputs[0]] != seg.shapes[ref] or tuple(sorted(e.attrs["dims"])) != dims:
            return Reject("mixed_reductions", f"{first.op} of {ref.name} over {list(dims)} and {e.op} of "
                          f"{e.inputs[0].name} over {list(e.attrs['dims'])} need different tiles")
    if not seg.shapes[ref]:
        dims = ()
    return ref, dims


def innermost_reduced(seg, ref, dims) -> bool:
    live = [d for d, s in enumerate(seg.shapes[ref]) if s != 1]
    return not live or live[-1] in dims


def is_normalization(seg, ref) -> bool:
    return any(seg.shapes[o] == seg.shapes[ref] and not is_reduction(o) for o in seg.outputs)


def kept_and_reduced(seg, ref, dims):
    """(K, J): the numbers of kept and of reduced elements of ``ref``."""
    shape = seg.shapes[ref]
    K = J = 1
    for d, s in enumerate(shape):
        if d in dims:
            J *= s
        else:
            K *= s  # not numel // J: a reduction over an empty extent still has K rows to write
    return K, J


def inner_heuristics(seg: Segment, ref, dims) -> ReductionParams:
    """The inner tile: rows prefetched where that pays (``prefetch_pays``) unless the
    choices say ``prefetch=False``, else ``_one_row_at_a_time``."""
    p = _one_row_at_a_time(seg, ref, dims)
    J = kept_and_reduced(seg, ref, dims)[1]
    if current_choices().fields.get("prefetch") is not False and prefetch_pays(seg, ref, J, p):
        p = PrefetchRows(next_pow2(J), prefetch_warps(seg.model), p.int64, p.align,
                         REWIDEN_ORDER[0] if all(v.dtype is DataType.Half for v in seg.loads()) else 0)
    return apply_overrides(p)


def _one_row_at_a_time(seg: Segment, ref, dims) -> InnerPersistent | InnerChunked:
    """The inner tile without prefetching: each program's rows loaded when it starts."""
    J = kept_and_reduced(seg, ref, dims)[1]
    p = replace(_inner_heuristics(seg, ref, dims), quad_rng=J % 4 == 0)
    if not p.persistent:
        p = replace(p, flush=flush_chunks(J, p.block_j))
    align = row_alignment(seg, ref, J, p.persistent)
    peeled = align > 1 and p.block_k == 1  # each row's aligned body found in the kernel: no hint needed
    return _chosen_rows(replace(p, align=align, aligned_rows=align > 1 and strided_rows_dominate(seg, ref),
                                contig_multiple=1 if peeled else contiguous_multiple(J)))


# A row's float sum folds its block accumulator into the row's value every FLUSH_CHUNKS
# chunks once the row has more than twice as many: each lane then adds some 32 values
# in a row rather than one per chunk, whose rounding errors grow with the chain's
# length.  Rows of up to 64 chunks, all the benchmarks' rows, keep the one fold after
# the loop (docs/TUNING.md#flushed-sums).
FLUSH_CHUNKS = 32


def flush_chunks(J: int, block_j: int) -> int:
    """``InnerChunked.flush`` for rows of ``J`` elements in chunks of ``block_j``."""
    return FLUSH_CHUNKS if -(-J // block_j) > 2 * FLUSH_CHUNKS else 0


def _chosen_rows(p: InnerPersistent | InnerChunked) -> InnerPersistent | InnerChunked:
    """``p`` with the choices in force but ``prefetch``, which ``inner_heuristics`` applies."""
    return p.choose({k: v for k, v in current_choices().fields.items() if k != "prefetch"})


# The spill check's order of ``rewiden`` forms (``prefetch_pays``); bf16 rows take 0
# only (``tiles.rows._WIDEN``).
REWIDEN_ORDER = (1, 2, 0)
# Registers per thread of a prefetching program: two rows of 32768 16-bit elements
# take 64 of them on 16 warps, the rest is the passes' working set.
PREFETCH_REGISTERS = 128


def prefetch_warps(model: DeviceModel) -> int:
    """Warps of a prefetching program (one per SM): as many as the register file holds
    at ``PREFETCH_REGISTERS`` a thread (16 of 64K registers)."""
    return model.registers_per_sm // (32 * PREFETCH_REGISTERS)


def prefetch_row_bytes(model: DeviceModel) -> int:
    """The bytes per element of a row that a prefetching tile may load: two rows (this
    one and the next) then fill half of an SM's register file at most (64 KiB of 256)."""
    return model.register_file_bytes // 4


def prefetch_pays(seg: Segment, ref, J: int, p: ReductionParams) -> bool:
    """Whether rows are walked by one program per SM with the next row loaded ahead
    (``PrefetchRows``): normalizations over rows that pad to 32768 lanes
    (one row fills an SM, so nothing else overlaps its phases), peeled (the carried
    loads are each row's head, tail and aligned body), reading nothing but contiguous rows (a weight
    loaded in the loop would wait behind the next row's loads), whose two rows' loads fit
    ``prefetch_row_bytes``.  The candidates, in the spill check's order, for fp16 rows:
    the output pass widening the carried row for itself (``rewiden`` 1), then the sum
    pass too (2), then every pass reusing the first one's fp32 row (0; bf16 rows only
    that, ``tiles.rows._WIDEN``), then the tile without prefetching
    (``reduction_fallbacks``).  Each form beat the chunked row it replaces wherever it
    did not spill, on the tuned shapes and on others (docs/TUNING.md#prefetch-rows)."""
    if seg.device_type != "cuda" or not is_normalization(seg, ref) or p.align == 1 or p.aligned_rows:
        return False
    lanes = next_pow2(J)
    if lanes != 1 << 15 or _too_padded(J, lanes) or _compares_integers_along_rows(seg, ref):
        return False
    n = seg.numel(ref)
    # A weight read per row would wait behind the next row's loads; a strided input's
    # row is not one aligned body to carry.
    if any(seg.numel(v) != n or not seg.inputs_info[v]["contiguous"] for v in seg.loads()):
        return False
    return lanes * sum(v.dtype.itemsize for v in seg.loads()) <= prefetch_row_bytes(seg.model)


_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


def row_alignment(seg: Segment, ref, J: int, persistent: bool = True) -> int:
    """Elements per 16 bytes of the narrowest tensor streamed along the rows, when rows
    of J elements do not start on 16-byte boundaries and peeling pays (``_peel_pays``:
    not where the unpeeled row loads 8 bytes at a time); else 1.

    Also 1 for a persistent row whose elements are compared as integers (a class iota
    against a per-row target, as in a cross-entropy gradient): Triton 3.6 spends
    minutes in its LLVM stage on such a peeled row of 30522 (found with
    ``benchmarks/regcheck.py``), while the unpeeled tile and a peeled tile of
    8192-element chunks compile in about a second."""
    vals = [v for v in seg.outputs + [i for i in seg.inputs_info] if seg.shapes.get(v) is not None
            and seg.numel(v) == seg.numel(ref)]
    if not vals or (persistent and _compares_integers_along_rows(seg, ref)):
        return 1
    itemsize = min(v.dtype.itemsize for v in vals)
    align = 16 // itemsize
    return align if J % align and J >= 4 * align and _peel_pays(J, itemsize) else 1


# Rows of 16-bit pairs (J even, not a multiple of 4) longer than this are peeled.
PAIRED_ROW_PEEL = 4096


def _peel_pays(J: int, itemsize: int) -> bool:
    """Whether a misaligned row's head/tail peel beats loading it unpeeled, as wide as
    its length allows (``contiguous_multiple``).  A peeled row pays per row (the head
    and tail reduced apart from the body, their indices); unpeeled, it pays per
    element for each load narrower than 16 bytes.  Loads of 8 bytes or more: never
    peeled.  16-bit pairs (4-byte loads): peeled beyond ``PAIRED_ROW_PEEL``.  Single
    elements: always peeled (docs/TUNING.md#row-peeling)."""
    width = contiguous_multiple(J) * itemsize
    if width >= 8:
        return False
    if width == 4 and itemsize == 2:
        return J > PAIRED_ROW_PEEL
    return True


def strided_rows_dominate(seg: Segment, ref) -> bool:
    """Whether the tensors streamed along the rows are mostly inputs whose rows start
    16-byte aligned with a padded stride (logits written [tokens, 30528] by a padded
    GEMM and read as [tokens, 30522]) rather than contiguous
    tensors (whose rows start where the previous one ends): peeling then keeps each
    row's start.  Ties go to the strided inputs: their loads wait, stores do not."""
    n = seg.numel(ref)
    strided = contiguous = 0
    for v in seg.loads():
        if seg.numel(v) == n:
            info = seg.inputs_info[v]
            if info.get("rows_aligned"):
                strided += v.dtype.itemsize
            elif info["contiguous"]:
                contiguous += v.dtype.itemsize
    contiguous += sum(o.dtype.itemsize for o in seg.outputs if seg.numel(o) == n)
    return strided > 0 and strided >= contiguous


def _compares_integers_along_rows(seg: Segment, ref) -> bool:
    n = seg.numel(ref)
    return any(e.op in _COMPARISONS and seg.numel(e.outputs[0]) == n
               and any(getattr(v, "dtype", None) is not None and v.dtype.is_int and seg.shapes.get(v) is not None
                       for v in e.inputs)
               for e in seg.exprs())


def _inner_heuristics(seg: Segment, ref, dims) -> ReductionParams:
    K, J = kept_and_reduced(seg, ref, dims)
    bj = next_pow2(J)
    int64 = seg.needs_int64()
    if seg.device_type == "cpu":
        if bj <= 1 << 16:
            bk = max(1, min(next_pow2(K), (1 << 14) // bj))
            return _chosen_rows(InnerPersistent(bk, bj, 4, int64))
        return _chosen_rows(InnerChunked(1, 4096, 4, int64))
    if J > WIDE_ROW:
        wide = _wide_row_params(seg, ref, J, int64, persistent_fits=bj <= 1 << 15)
        if wide is not None:
            return wide
    # Rows up to 32768 elements stay on chip (persistent).  Elements per thread grow
    # with the row: 8 for short rows (several rows per program keep enough bytes in
    # flight), 16 for medium, 32 for the widest (32 warps, one row per SM at a time).
    # Short rows that draw random numbers take 16 per thread (four Philox calls each).
    # docs/TUNING.md#persistent-rows
    if bj <= 1 << 15:
        bk = max(1, min(next_pow2(K), 64, 1024 // bj))
        per_thread = 8 if bj <= 256 else (16 if bj <= 1 << 13 else 32)
        if bj <= 256 and any(OPS[e.op].kind is OpKind.RANDOM for e in seg.exprs()):
            per_thread, bk = 16, max(1, min(next_pow2(K), 64, 2048 // bj))
        warps = max(1, min(32, bk * bj // (32 * per_thread)))
        if warps >= 16 and _too_padded(J, bj):
            return _padded_row_chunks(seg, int64)
        if 1 - J / bj >= PADDED_ROW_SHARE:
            warps = _padded_warps(warps, bk * bj)
        return InnerPersistent(bk, bj, warps, int64)
    return InnerChunked(1, 8192, 16, int64)


# The share of a row's lanes that padding to a power of 2 (a persistent row) or to
# whole chunks (a chunked one) may leave masked.  Masked lanes hold registers and
# issue instructions but move no bytes, so past this share the rows in flight on an
# SM carry too few bytes.  Below it the padding stays (the wide rows of
# ``_wide_row_params`` measured best as they are).  docs/TUNING.md#lane-waste
MAX_LANE_WASTE = 0.25


def _too_padded(J: int, lanes: int) -> bool:
    """Whether ``lanes`` (J padded) leave more than ``MAX_LANE_WASTE`` of them masked."""
    return 1 - J / lanes > MAX_LANE_WASTE


# The share of a persistent row's lanes masked by padding from which each thread takes
# twice the lanes (``_padded_warps``).
PADDED_ROW_SHARE = 0.2


# Lanes per thread up to which a padded tile of short rows runs on one warp.
ONE_WARP_LANES = 32


def _padded_warps(warps: int, lanes: int) -> int:
    """Warps for persistent rows that padding leaves at least ``PADDED_ROW_SHARE``
    masked: half those of unpadded rows, so each thread takes twice the lanes (up to
    half of them masked) and an SM holds twice the programs; halving the warps beat
    twice the rows on the same warps.  One warp where the tile's ``lanes`` fit
    ``ONE_WARP_LANES`` a thread: its rows reduce in the warp's registers, without
    the round trip through shared memory and the barrier that each of a short row's
    reductions costs across warps (docs/TUNING.md#padded-rows)."""
    return 1 if lanes <= 32 * ONE_WARP_LANES else max(1, warps // 2)


def _padded_row_chunks(seg: Segment, int64: bool) -> InnerChunked:
    """A row whose power-of-2 padding would mask more than ``MAX_LANE_WASTE`` of a
    16- or 32-warp persistent tile: chunks of 1024 on 2 warps, many programs per SM
    (the layer norm measured above; softmax-like rows take the online pass)."""
    return InnerChunked(1, 1024, 2, int64, online=_has_online_pair(seg))


def _has_online_pair(seg: Segment) -> bool:
    """A max and a sum of exp(x - max) that one multi-pass sweep can take together."""
    return bool(seg.analysis.online_pairs)


def _fit_chunks(J: int, chunk: int, warps: int) -> tuple[int, int]:
    """Halve a wide row's chunk (and its warps, keeping the elements per thread) while
    padding the row to whole chunks masks more than ``MAX_LANE_WASTE`` of the lanes."""
    while chunk > 2048 and _too_padded(J, -(-J // chunk) * chunk):
        chunk, warps = chunk // 2, max(1, warps // 2)
    return chunk, warps


# Rows wider than this are walked in chunks (``_wide_row_params``) rather than held.
WIDE_ROW = 8192


def _wide_row_params(seg: Segment, ref, J: int, int64: bool, persistent_fits: bool) -> InnerChunked | None:
    """Multi-pass chunks for a row too wide to hold with more than one program per SM.

    A persistent row of up to 32768 elements takes 32 warps, one program per SM: it
    loads, reduces, then stores, with nothing to overlap the phases.  Chunked programs
    are small enough for several per SM, and the online pass (max and rescaled sum of
    exponentials together, ``ReductionTile.online_chunk``) reads the row once for both
    statistics.  The rules (docs/TUNING.md#wide-rows):

    * statistics only (log(sum(exp(x - max)))): always online chunks of 2048 on 4 warps;
    * normalizations: online chunks of 8192 on 16 warps when the output pass stores at
      most twice the bytes per element it loads (it re-reads the row from L2 while the
      writes leave it there), chunks of 16384 where it stores twice what it loads;
    * the output pass walks the row backwards (``out_reversed``) when the rows in
      flight (``rows_in_flight_per_sm``: 4 programs of 16 warps per SM) fill most of L2 (``L2_SHARE_OF_ROWS``):
      then the chunks the statistics pass read last are the ones still there.

    None: keep the persistent row."""
    online = _has_online_pair(seg)
    if not is_normalization(seg, ref):
        return InnerChunked(1, 2048, 4, int64, online=online)
    n = seg.numel(ref)
    loaded = sum(v.dtype.itemsize for v in seg.loads() if seg.numel(v) == n)
    stored = sum(o.dtype.itemsize for o in seg.outputs if seg.numel(o) == n)
    # A cross-entropy gradient (an iota compared with each row's target): its
    # persistent row of 30522 cannot be peeled for alignment (``row_alignment``) and
    # spilled 58 registers (offline, sm_90); chunks can be peeled.  Not yet timed
    # peeled on the GPU (docs/TUNING.md#wide-rows).
    if not persistent_fits or (online and stored <= 2 * loaded) or _compares_integers_along_rows(seg, ref):
        m = seg.model
        in_flight = rows_in_flight_per_sm(m) * m.sms * J * loaded
        chunk, warps = _fit_chunks(J, 16384 if stored >= 2 * loaded else 8192, WIDE_ROW_WARPS)
        return InnerChunked(1, chunk, warps, int64, online=online,
                            out_reversed=in_flight > L2_SHARE_OF_ROWS * m.l2_bytes)
    return None


# Warps of a normalization's wide-row chunks.
WIDE_ROW_WARPS = 16


def rows_in_flight_per_sm(model: DeviceModel) -> int:
    """Wide rows in flight per SM: the programs of ``WIDE_ROW_WARPS`` warps it holds at
    once (4 of 64 warps; 3 where an SM holds 48)."""
    return max(1, model.max_warps_per_sm // WIDE_ROW_WARPS)

# The part of L2 the rows in flight may fill before the output pass walks backwards:
# the output lines streaming through and the two partitions' copies take the rest.
# docs/TUNING.md#wide-rows
L2_SHARE_OF_ROWS = 0.75


def outer_heuristics(seg: Segment, ref, dims) -> ReductionParams:
    return reduction_outer.outer_heuristics(seg, ref, dims, *kept_and_reduced(seg, ref, dims))


def effective_split(seg: Segment, params: ReductionParams) -> int:
    """The split the kernel is emitted with: ``params.split`` (``OuterChunked`` only)
    where the segment allows one (a choice may ask for any), else 1."""
    if params.split <= 1:
        return 1
    ref, dims = analyse(seg)
    return params.split if seg.analysis.split_eligible(ref, dims) else 1


def reduction_fallbacks(seg: Segment, params: ReductionParams) -> list:
    """Configurations to try, in order, when ``params`` compiles to a kernel that spills:
    a persistent row becomes multi-pass chunks; big chunks become smaller ones.  An
    outer tile keeps its columns and warps and halves its chunk of rows, down to 4
    elements per thread."""
    if not params.inner:
        J = kept_and_reduced(seg, *analyse(seg))[1]
        out, bj = [], params.block_j // 2
        while params.block_k * bj >= 4 * 32 * params.num_warps:
            out.append(params.recast(persistent=J <= bj, block_j=bj))
            bj //= 2
        return out
    if params.prefetch:
        plain = _one_row_at_a_time(seg, *analyse(seg))  # (choices but prefetch)
        later = REWIDEN_ORDER[REWIDEN_ORDER.index(params.rewiden) + 1:] if params.rewiden in REWIDEN_ORDER else ()
        return [replace(params, rewiden=k) for k in later] + [plain] + reduction_fallbacks(seg, plain)
    out = []
    if params.persistent:
        out.append(params.recast(persistent=False, block_k=1, block_j=min(params.block_j, 8192), num_warps=16))
    bj, warps = (params.block_j if not params.persistent else min(params.block_j, 8192)), 16
    while bj > 1024:
        bj, warps = bj // 2, max(4, warps // 2)
        out.append(params.recast(persistent=False, block_k=1, block_j=bj, num_warps=warps))
    return out


def reduction_runtime_check(seg: Segment, params: ReductionParams, scheduler: str) -> Reject | None:
    """The run-time check of the three reduction schedulers: the tile's walk over the
    segment (every output reached, every reduction result used at its own row, in a
    pass after it is computed; prefetching only on peeled persistent rows), kept for
    ``emit``."""
    return invalid_params(params, scheduler) or checked_emit(seg, scheduler, params, build_tile,
                                                              lambda s, p, t, n: _generate(s, p, t, n, scheduler))


def emit_reduction(seg: Segment, params: ReductionParams, name: str, scheduler: str):
    return emitted(seg, scheduler, params, name, build_tile, lambda s, p, t, n: _generate(s, p, t, n, scheduler))


def reduction_max_registers(seg: Segment, params: ReductionParams) -> None:
    """No register budget but the hardware's: the spill check alone."""
    return None


def build_tile(seg: Segment, params: ReductionParams) -> ReductionTile:
    """The tile ``params`` describe over the segment's reduction; its constructor raises
    ``Unsupported`` for a geometry no kernel takes (a split of a persistent or inner
    tile, prefetching without a peeled persistent row)."""
    ref, dims = analyse(seg)
    # Every form reads every attribute (``reduction_params``: what a form does not
    # carry, it fixes), so the one constructor serves them all.
    p = params
    return ReductionTile(ref, dims, p.inner, p.persistent, p.block_k, p.block_j, p.int64, quad_rng=p.quad_rng,
                         align=p.align, online=p.online, split=effective_split(seg, p), aligned_rows=p.aligned_rows,
                         stages=p.stages, out_reversed=p.out_reversed, contig_multiple=p.contig_multiple,
                         prefetch=p.prefetch, rewiden=p.rewiden if seg.device_type == "cuda" else 0,  # (no PTX interpreted)
                         flush=p.flush, constant_row=constant_row_length(seg, p) is not None)


def _generate(seg: Segment, params: ReductionParams, tile: ReductionTile, name: str, scheduler: str):
    return emit_kernel(name, seg.outputs, seg.shapes, seg.inputs_info, tile, [f"scheduler: {scheduler} {params}"],
                       seg.values)


def constant_row_length(seg: Segment, params) -> int | None:
    """The row length ``J`` a kernel of ``params`` takes as a compile-time constant
    (Triton compiles one binary per value), or None for a runtime length.  Constant for
    a persistent inner row narrower than its block, neither peeled nor prefetched: the
    compiler then knows which lanes past ``J`` are masked for every row and drops their
    loads, math and stores instead of predicating them off at run time (fewer
    registers, a faster padded row).  The price is a binary per distinct row length,
    where a runtime length serves them all, so a kernel met at ever new row lengths
    takes them at run time (``runtime_row``, set by the schedulers' ``settle``).  The
    inner-outer tile keeps a runtime length: a constant one gained nothing there.
    docs/TUNING.md#reduction-tiles"""
    if not isinstance(params, ReductionParams) or params.runtime_row or params.prefetch \
            or not (params.inner and params.persistent):
        return None
    ref, dims = analyse(seg)
    shape = seg.shapes[ref]
    if peels(params.align, True, params.block_k, is_trailing(dims, len(shape))):
        return None
    J = math.prod(shape[d] for d in dims)
    return J if J < params.block_j else None


def runtime_row(params: ReductionParams) -> ReductionParams:
    """``params`` of a constant row (``constant_row_length``) with the row length at run
    time instead, for every length the block holds: what the heuristics derive from
    one length goes (its multiples, four-element random draws; the alignment, which an
    unpeeled row does not use), so that one kernel serves them all."""
    return replace(params, runtime_row=True, contig_multiple=1, quad_rng=False, align=1)


def reduction_grid(seg: Segment, params: ReductionParams):
    ref, dims = analyse(seg)
    K, _ = kept_and_reduced(seg, ref, dims)
    # No kept index, no program (Triton launches nothing for an empty grid): a one-row
    # tile's kernel may then assume every program has a row (``ReductionTile.prologue``).
    if params.prefetch:  # one program per SM walks the rows
        return (min(K, seg.model.sms),)
    strips = (K + params.block_k - 1) // params.block_k
    split = effective_split(seg, params)
    return (strips,) if split == 1 else (strips, split)
