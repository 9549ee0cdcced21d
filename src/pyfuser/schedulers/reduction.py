"""Reduction schedulers: inner reduction, inner normalization, outer reduction.

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

Worked example: log-softmax over [8192, 30522] fp16.  J = 30522 pads to 32768 per
row; persistent with one row per program, 32768 / (32 warps * 32 lanes) = 32
elements per thread held as fp16: the row is read once and written once.  On the
GPU the same rows are walked by one program per SM on 16 warps, each holding its
next row's loads in flight while it reduces and stores this one (``prefetch_pays``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..codegen.emit import emit_kernel
from ..codegen.tiles.reduction import ReductionTile
from ..ir.analysis import is_reduction
from ..ir.dtypes import DataType
from ..ir.ops import OPS, OpKind
from .base import (Reject, Segment, apply_overrides, checked_emit, contiguous_multiple, emitted, invalid_params,
                   l2_bytes, next_pow2, powers_of_2, require_valid, sm_count)


@dataclass(frozen=True)
class ReductionParams:
    inner: bool  # j (reduced) on the contiguous tile axis
    persistent: bool  # the whole reduced extent in one block
    block_k: int  # kept elements per program
    block_j: int  # reduced elements per block (per pass chunk when not persistent)
    num_warps: int
    int64: bool
    quad_rng: bool = False  # reduced extent % 4 == 0: one Philox call per 4 elements
    align: int = 1  # elements per 16 bytes when rows start misaligned (peel head/tail; block_k 1)
    # Multi-pass only: max and sum(exp(a - max)) in one pass with a rescaled running sum
    # (one running max per 8 contiguous elements: ``ReductionTile.online_chunk``).  On
    # for wide rows (``_wide_row_params``); a per-element rescale lost to separate
    # passes (docs/TUNING.md#online-softmax).
    online: bool = False
    # Outer multi-pass only: programs along the reduced extent (codegen.tiles.split: partials
    # folded by each column strip's last program); 1 = one program per strip.
    split: int = 1
    # Peeled rows only: the streamed input's rows start 16-byte aligned (a padded row
    # stride), so the body starts at each row's first element (``aligned_rows``).
    aligned_rows: bool = False
    # Outer multi-pass only: the chunk loop's num_stages (``tl.range``): loads of the next
    # chunks are issued before this one is summed.
    stages: int = 1
    # Inner multi-pass only: the output pass walks each row's chunks last to first, so
    # it starts with those the statistics pass read last (``_wide_row_params``).
    out_reversed: bool = False
    # The extent along the tile's contiguous axis (J inner, K outer) is a multiple of
    # this many elements, which the kernel tells the compiler (``contiguous_multiple``)
    # where that extent is a runtime size: a row held in one wider block has a constant
    # length, which says it by itself (``ReductionTile.constant_row``).
    contig_multiple: int = 1
    # Peeled persistent rows only: one program per SM walks rows pid, pid + G, ... and
    # loads its next row (head, tail, body) before it reduces and stores this one, so
    # the SM always has loads in flight (``codegen.tiles.rows`` docstring, ``prefetch_pays``).
    prefetch: bool = False
    # Prefetching fp16 rows only: the last ``rewiden`` passes widen the carried row for
    # themselves rather than reuse the first pass's fp32 copy (``codegen.tiles.rows`` docstring).
    rewiden: int = 0

    def validate(self) -> ReductionParams:
        """Raise ``ChoicesError`` for combinations no kernel takes; returns self.
        Fields meaningful for one form only are ignored by the others (``split`` on an
        inner or persistent tile, ``online`` and ``out_reversed`` on a persistent one),
        as the heuristics' fallbacks rely on."""
        bad = powers_of_2(self, "block_k", "block_j", "num_warps", "align", "contig_multiple")
        bad += [f"{n}={getattr(self, n)} must be >= {lo}" for n, lo in (("split", 1), ("stages", 1), ("rewiden", 0))
                if getattr(self, n) < lo]
        if self.num_warps > 32:
            bad.append(f"num_warps={self.num_warps} exceeds 32 (1024 threads)")
        if self.prefetch and not (self.inner and self.persistent and self.block_k == 1 and self.align > 1
                                  and not self.aligned_rows):
            bad.append("prefetch=True needs a peeled persistent row: inner=True, persistent=True, block_k=1, "
                       "align > 1, aligned_rows=False")
        return require_valid(self, bad)


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


def inner_check(seg: Segment, normalization: bool) -> Reject | None:
    """can_schedule of the two inner schedulers: the innermost dim is reduced, and some
    output is (normalization) or none is (pure reduction) shaped like the reduced tensor."""
    a = analyse(seg)
    if isinstance(a, Reject):
        return a
    ref, dims = a
    if not innermost_reduced(seg, ref, dims):
        return Reject("outer_axes", f"the innermost dim of {ref.name} is kept, not reduced")
    if is_normalization(seg, ref) != normalization:
        if normalization:
            return Reject("pure_reduction", "no output is shaped like the reduced tensor")
        return Reject("normalization", "an output combines reduction results with the reduced tensor")
    return None


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
    p = _one_row_at_a_time(seg, ref, dims)
    J = kept_and_reduced(seg, ref, dims)[1]
    if prefetch_pays(seg, ref, J, p):
        p = replace(p, persistent=True, block_k=1, block_j=next_pow2(J), num_warps=PREFETCH_WARPS, online=False,
                    out_reversed=False, prefetch=True,
                    rewiden=REWIDEN_ORDER[0] if all(v.dtype is DataType.Half for v in seg.loads()) else 0)
    return apply_overrides(p)


def _one_row_at_a_time(seg: Segment, ref, dims) -> ReductionParams:
    """The inner tile without prefetching: each program's rows loaded when it starts."""
    J = kept_and_reduced(seg, ref, dims)[1]
    p = replace(_inner_heuristics(seg, ref, dims), quad_rng=J % 4 == 0)
    align = row_alignment(seg, ref, J, p.persistent)
    peeled = align > 1 and p.block_k == 1  # each row's aligned body found in the kernel: no hint needed
    return apply_overrides(replace(p, align=align, aligned_rows=align > 1 and strided_rows_dominate(seg, ref),
                                   contig_multiple=1 if peeled else contiguous_multiple(J)))


# The spill check's order of ``rewiden`` forms (``prefetch_pays``); bf16 rows take 0
# only (``tiles.rows._WIDEN``).
REWIDEN_ORDER = (1, 2, 0)
# Warps of a prefetching program: two rows of 32768 16-bit elements take 64 of the
# 128 registers each of 512 threads may hold, the rest is the passes' working set.
PREFETCH_WARPS = 16
# The bytes per element of a row that a prefetching tile may load: two rows (this one
# and the next) then fill half of an SM's 256 KB register file at most.
PREFETCH_ROW_BYTES = 1 << 16


def prefetch_pays(seg: Segment, ref, J: int, p: ReductionParams) -> bool:
    """Whether rows are walked by one program per SM with the next row loaded ahead
    (``ReductionParams.prefetch``): normalizations over rows that pad to 32768 lanes
    (one row fills an SM, so nothing else overlaps its phases), peeled (the carried
    loads are each row's head, tail and aligned body), reading nothing but contiguous rows (a weight
    loaded in the loop would wait behind the next row's loads), whose two rows' loads fit
    ``PREFETCH_ROW_BYTES``.  The candidates, in the spill check's order, for fp16 rows:
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
    return lanes * sum(v.dtype.itemsize for v in seg.loads()) <= PREFETCH_ROW_BYTES


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
    16-byte aligned with a padded stride (BERT's logits, written [tokens, 30528] by
    the padded decoder GEMM and read as [tokens, 30522]) rather than contiguous
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
            return apply_overrides(ReductionParams(True, True, bk, bj, 4, int64))
        return apply_overrides(ReductionParams(True, False, 1, 4096, 4, int64))
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
            warps = _padded_warps(warps)
        return ReductionParams(True, True, bk, bj, warps, int64)
    return ReductionParams(True, False, 1, 8192, 16, int64)


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


def _padded_warps(warps: int) -> int:
    """Warps for persistent rows that padding leaves at least ``PADDED_ROW_SHARE``
    masked: half those of unpadded rows, so each thread takes twice the lanes (up to
    half of them masked) and an SM holds twice the programs; halving the warps beat
    twice the rows on the same warps (docs/TUNING.md#padded-rows)."""
    return max(1, warps // 2)


def _padded_row_chunks(seg: Segment, int64: bool) -> ReductionParams:
    """A row whose power-of-2 padding would mask more than ``MAX_LANE_WASTE`` of a
    16- or 32-warp persistent tile: chunks of 1024 on 2 warps, many programs per SM
    (the layer norm measured above; softmax-like rows take the online pass)."""
    return ReductionParams(True, False, 1, 1024, 2, int64, online=_has_online_pair(seg))


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


def _wide_row_params(seg: Segment, ref, J: int, int64: bool, persistent_fits: bool) -> ReductionParams | None:
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
      flight (4 programs of 16 warps per SM) fill most of L2 (``L2_SHARE_OF_ROWS``):
      then the chunks the statistics pass read last are the ones still there.

    None: keep the persistent row."""
    online = _has_online_pair(seg)
    if not is_normalization(seg, ref):
        return ReductionParams(True, False, 1, 2048, 4, int64, online=online)
    n = seg.numel(ref)
    loaded = sum(v.dtype.itemsize for v in seg.loads() if seg.numel(v) == n)
    stored = sum(o.dtype.itemsize for o in seg.outputs if seg.numel(o) == n)
    # A cross-entropy gradient (an iota compared with each row's target): its
    # persistent row of 30522 cannot be peeled for alignment (``row_alignment``) and
    # spilled 58 registers (offline, sm_90); chunks can be peeled.  Not yet timed
    # peeled on the GPU (docs/TUNING.md#wide-rows).
    if not persistent_fits or (online and stored <= 2 * loaded) or _compares_integers_along_rows(seg, ref):
        in_flight = ROWS_IN_FLIGHT_PER_SM * sm_count() * J * loaded
        chunk, warps = _fit_chunks(J, 16384 if stored >= 2 * loaded else 8192, 16)
        return ReductionParams(True, False, 1, chunk, warps, int64, online=online,
                               out_reversed=in_flight > L2_SHARE_OF_ROWS * l2_bytes())
    return None


# Programs of 16 warps an SM holds at once (64 warps): the wide rows in flight per SM.
ROWS_IN_FLIGHT_PER_SM = 4
# The part of L2 the rows in flight may fill before the output pass walks backwards:
# the output lines streaming through and the two partitions' copies take the rest.
# docs/TUNING.md#wide-rows
L2_SHARE_OF_ROWS = 0.75


# 32-bit values each thread of an outer tile may hold: its elements of every tensor
# streamed at full size and of every block accumulator.  Offline sm_90 counts
# (benchmarks/regcheck.py) grow with elements per thread x values per element: 96
# values took 96 registers, 128 took 148 (docs/TUNING.md#outer-tiles).
OUTER_VALUES_PER_THREAD = 96
# An outer tile starts from 2 warps and shrinks its chunk of rows down to 16 before it
# adds warps: few threads, each holding a full budget (docs/TUNING.md#outer-tiles).
OUTER_WARPS = 2
OUTER_MIN_ROWS = 16


def outer_heuristics(seg: Segment, ref, dims) -> ReductionParams:
    K, J = kept_and_reduced(seg, ref, dims)
    int64 = seg.needs_int64()
    if seg.device_type == "cpu":
        bk = min(next_pow2(K), 256)
        bj = min(next_pow2(J), max(1, (1 << 14) // bk))
        return apply_overrides(ReductionParams(False, J <= bj, bk, bj, 4, int64, contig_multiple=contiguous_multiple(K)))
    # Each program starts from a 64-byte strip of kept columns and walks down the
    # reduced rows a chunk at a time, 4 warps; the split (``outer_split``) supplies the
    # programs that narrow strips alone would not (docs/TUNING.md#outer-tiles).
    itemsize = min(v.dtype.itemsize for v in [ref] + list(seg.outputs))
    bk = max(1, min(next_pow2(K), 64 // itemsize))
    bj, warps, split = _outer_tile(seg, ref, dims, J, bk)
    # Wider strips (up to OUTER_STRIP_BYTES of a row) while the grid keeps
    # OUTER_MIN_PROGRAMS and the tile its warps (a wider strip walks fewer rows at a
    # time instead), and the chunk loop pipelined OUTER_STAGES deep
    # (docs/TUNING.md#outer-tiles).
    while (bk * 2) * itemsize <= OUTER_STRIP_BYTES and bk * 2 <= next_pow2(K):
        wider = _outer_tile(seg, ref, dims, J, bk * 2)
        if -(-K // (bk * 2)) * wider[2] < OUTER_MIN_PROGRAMS or wider[1] > warps:
            break
        bk, (bj, warps, split) = bk * 2, wider
    stages = OUTER_STAGES if J > bj and _chunk_bytes(seg, K, bk, bj) <= OUTER_STAGE_BYTES else 1
    return apply_overrides(ReductionParams(False, J <= bj, bk, bj, warps, int64, split=split, stages=stages,
                                           contig_multiple=contiguous_multiple(K)))


def _chunk_bytes(seg: Segment, K: int, bk: int, bj: int) -> int:
    """Bytes an outer tile's chunk loads: a [bj, bk] block of every input that varies
    along the reduced rows (more elements than the kept ones)."""
    return bk * bj * sum(v.dtype.itemsize for v in seg.loads() if seg.numel(v) > K)


def _outer_tile(seg: Segment, ref, dims, J: int, bk: int):
    """(rows per chunk, warps, split) of an outer tile ``bk`` columns wide over ``J``
    reduced rows: the chunk shrinks to the register budget (``OUTER_VALUES_PER_THREAD``);
    only a tile still over it at 32 rows gets more warps."""
    bj = min(next_pow2(J), 512)
    warps = OUTER_WARPS
    per_thread = max(1, OUTER_VALUES_PER_THREAD // outer_values(seg, ref))
    while bk * bj > 32 * warps * per_thread and bj > OUTER_MIN_ROWS:
        bj //= 2
    while bk * bj > 32 * warps * per_thread and warps < 16:
        warps *= 2
    return bj, warps, (outer_split(seg, ref, dims, bk, bj) if J > bj else 1)


# Programs a split outer reduction aims for: 132 SMs x about 32 short-lived programs
# (docs/TUNING.md#outer-tiles).
SPLIT_TARGET_PROGRAMS = 4096
MAX_SPLIT = 32
# The most a kernel storing only its sums splits (no output per element): each
# program then walks at least a 16th of the rows.  Column sums gained at 16 and lost
# at 8; a kernel that also writes per element lost at 16, so it keeps ``MAX_SPLIT``.
# docs/TUNING.md#outer-split
MAX_SPLIT_SUMS_ONLY = 16
OUTER_MIN_PROGRAMS = 768  # about 6 per SM: what a widened strip must still leave
OUTER_STRIP_BYTES = 128  # the widest strip of a row one outer program sums
OUTER_STAGES = 3  # num_stages of an outer tile's chunk loop
# Bytes of one chunk's loads that may be pipelined: the pipeline keeps OUTER_STAGES - 1
# chunks of every load in shared memory, so a tile streaming many tensors runs few
# programs per SM: a tile streaming 8 tensors (BERT's position-embedding gradient)
# holds about 20 times the shared memory pipelined and ran several times slower.  The
# bias gradient's chunk is 4 KB (64 x 32 fp16).  docs/TUNING.md#outer-tiles
OUTER_STAGE_BYTES = 4096


def outer_split(seg: Segment, ref, dims, bk: int, bj: int) -> int:
    """Programs along the reduced extent when the column strips alone are too few to
    fill the GPU (bias gradient of [16384, 4096] fp16: 256 strips of 16 columns;
    layer-norm backward's dw, db at hidden 1024: 64): a power of two that brings the
    grid to ``SPLIT_TARGET_PROGRAMS``, at most ``MAX_SPLIT`` (``MAX_SPLIT_SUMS_ONLY``
    where every output is smaller than the reduced tensor), each program walking at
    least two chunks of rows.  1 when the segment cannot be split (``split_eligible``)."""
    K, J = kept_and_reduced(seg, ref, dims)
    strips = -(-K // bk)
    if strips >= SPLIT_TARGET_PROGRAMS or not seg.analysis.split_eligible(ref, dims):
        return 1
    n = seg.numel(ref)
    most = MAX_SPLIT if any(seg.numel(o) >= n for o in seg.outputs) else MAX_SPLIT_SUMS_ONLY
    split = min(next_pow2(-(-SPLIT_TARGET_PROGRAMS // strips)), most)
    while split > 1 and J < 2 * bj * split:
        split //= 2
    return split


def effective_split(seg: Segment, params: ReductionParams) -> int:
    """The split the kernel is emitted with: ``params.split`` where the tile and the
    segment allow one (an override may ask for any), else 1."""
    if params.split <= 1 or params.inner or params.persistent:
        return 1
    ref, dims = analyse(seg)
    return params.split if seg.analysis.split_eligible(ref, dims) else 1


def outer_values(seg: Segment, ref) -> int:
    """32-bit values per tile element: every tensor loaded or stored at the reduced
    tensor's size (in its compute dtype: 64-bit ones count twice), and the block
    accumulator of every sum, prod, max and min (var_mean reduces each chunk into row
    accumulators instead)."""
    n = seg.numel(ref)
    streamed = [v for v in seg.loads() + list(seg.outputs) if seg.numel(v) == n]
    words = sum(max(1, v.dtype.itemsize // 4) for v in streamed)
    for e in seg.reductions():
        dt = e.outputs[-1].dtype
        if not OPS[e.op].reduction.welford and dt is not DataType.Bool:
            words += max(1, dt.itemsize // 4)
    return max(1, words)


def reduction_fallbacks(seg: Segment, params: ReductionParams) -> list:
    """Configurations to try, in order, when ``params`` compiles to a kernel that spills:
    a persistent row becomes multi-pass chunks; big chunks become smaller ones.  An
    outer tile keeps its columns and warps and halves its chunk of rows, down to 4
    elements per thread."""
    if not params.inner:
        J = kept_and_reduced(seg, *analyse(seg))[1]
        out, bj = [], params.block_j // 2
        while params.block_k * bj >= 4 * 32 * params.num_warps:
            out.append(replace(params, persistent=J <= bj, block_j=bj))
            bj //= 2
        return out
    if params.prefetch:
        plain = replace(_one_row_at_a_time(seg, *analyse(seg)), prefetch=False, rewiden=0)  # (overrides)
        later = REWIDEN_ORDER[REWIDEN_ORDER.index(params.rewiden) + 1:] if params.rewiden in REWIDEN_ORDER else ()
        return [replace(params, rewiden=k) for k in later] + [plain] + reduction_fallbacks(seg, plain)
    out = []
    if params.persistent:
        out.append(replace(params, persistent=False, block_k=1, block_j=min(params.block_j, 8192), num_warps=16))
    bj, warps = (params.block_j if not params.persistent else min(params.block_j, 8192)), 16
    while bj > 1024:
        bj, warps = bj // 2, max(4, warps // 2)
        out.append(replace(params, persistent=False, block_k=1, block_j=bj, num_warps=warps))
    return out


def reduction_runtime_check(seg: Segment, params: ReductionParams, scheduler: str) -> Reject | None:
    """The run-time check of the three reduction schedulers: the tile's walk over the
    segment (every output reached, every reduction result used at its own row, in a
    pass after it is computed; prefetching only on peeled persistent rows), kept for
    ``emit``."""
    return invalid_params(params, scheduler) or checked_emit(seg, scheduler, params,
                                                              lambda s, p, n: _generate(s, p, n, scheduler))


def emit_reduction(seg: Segment, params: ReductionParams, name: str, scheduler: str):
    return emitted(seg, scheduler, params, name, lambda s, p, n: _generate(s, p, n, scheduler))


def reduction_max_registers(seg: Segment, params: ReductionParams) -> None:
    """No register budget but the hardware's: the spill check alone."""
    return None


def _generate(seg: Segment, params: ReductionParams, name: str, scheduler: str):
    ref, dims = analyse(seg)
    tile = ReductionTile(ref, dims, params.inner, params.persistent, params.block_k, params.block_j, params.int64,
                         params.quad_rng, params.align, params.online, effective_split(seg, params),
                         params.aligned_rows, params.stages if not (params.inner or params.persistent) else 1,
                         params.out_reversed and params.inner and not params.persistent, params.contig_multiple,
                         params.prefetch, params.rewiden if seg.device_type == "cuda" else 0)  # (no PTX interpreted)
    return emit_kernel(name, seg.outputs, seg.shapes, seg.inputs_info, tile, [f"scheduler: {scheduler} {params}"])


def reduction_grid(seg: Segment, params: ReductionParams):
    ref, dims = analyse(seg)
    K, _ = kept_and_reduced(seg, ref, dims)
    # No kept index, no program (Triton launches nothing for an empty grid): a one-row
    # tile's kernel may then assume every program has a row (``ReductionTile.prologue``).
    if params.prefetch:  # one program per SM walks the rows
        return (min(K, sm_count()),)
    strips = (K + params.block_k - 1) // params.block_k
    split = effective_split(seg, params)
    return (strips,) if split == 1 else (strips, split)
