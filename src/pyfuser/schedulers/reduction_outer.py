"""The outer reduction's tile sizes: column strips of ``block_k`` kept elements walked
down the reduced rows (``reduction_params.OuterChunked``), sized to a register budget
per thread, split along the rows where the strips alone are too few programs.

Worked example: the bias gradient, sum over dim 0 of [16384, 4096] fp16 (the bench's
``bias_grad_sum_dim0_fp16``): strips of 64 columns (128 bytes of a row) on 2 warps take
chunks of 32 rows, a loop pipelined 3 deep; 64 strips are too few programs, so each is
split 16 ways, the strip's last program folding the partials (``codegen.tiles.split``).
"""
from __future__ import annotations

from ..ir.dtypes import DataType
from ..ir.ops import OPS
from .base import Segment, apply_overrides, contiguous_multiple, next_pow2
from .device_model import DeviceModel, prev_pow2
from .reduction_params import OuterChunked, OuterPersistent

# 32-bit values each thread of an outer tile may hold: its elements of every tensor
# streamed at full size and of every block accumulator.  Offline sm_90 counts
# (benchmarks/regcheck.py) grow with elements per thread x values per element: 96
# values took 96 registers, 128 took 148 (docs/TUNING.md#outer-tiles).
OUTER_VALUES_PER_THREAD = 96
# An outer tile starts from 2 warps and shrinks its chunk of rows down to 16 before it
# adds warps: few threads, each holding a full budget (docs/TUNING.md#outer-tiles).
OUTER_WARPS = 2
OUTER_MIN_ROWS = 16


def outer_heuristics(seg: Segment, ref, dims, K: int, J: int) -> OuterPersistent | OuterChunked:
    """The outer tile for ``K`` kept and ``J`` reduced elements of ``ref``."""
    int64 = seg.needs_int64()
    if seg.device_type == "cpu":
        bk = min(next_pow2(K), 256)
        bj = min(next_pow2(J), max(1, (1 << 14) // bk))
        return apply_overrides(_outer(J <= bj, bk, bj, 4, int64, contiguous_multiple(K)))
    # Each program starts from a 64-byte strip of kept columns and walks down the
    # reduced rows a chunk at a time, 4 warps; the split (``outer_split``) supplies the
    # programs that narrow strips alone would not (docs/TUNING.md#outer-tiles).
    itemsize = min(v.dtype.itemsize for v in [ref] + list(seg.outputs))
    bk = max(1, min(next_pow2(K), 64 // itemsize))
    bj, warps, split = _outer_tile(seg, ref, dims, K, J, bk)
    # Wider strips (up to OUTER_STRIP_BYTES of a row) while the grid keeps
    # ``outer_min_programs`` and the tile its warps (a wider strip walks fewer rows at a
    # time instead), and the chunk loop pipelined OUTER_STAGES deep
    # (docs/TUNING.md#outer-tiles).
    least = outer_min_programs(seg.model)
    while (bk * 2) * itemsize <= OUTER_STRIP_BYTES and bk * 2 <= next_pow2(K):
        wider = _outer_tile(seg, ref, dims, K, J, bk * 2)
        if -(-K // (bk * 2)) * wider[2] < least or wider[1] > warps:
            break
        bk, (bj, warps, split) = bk * 2, wider
    stages = OUTER_STAGES if J > bj and _chunk_bytes(seg, K, bk, bj) <= outer_stage_bytes(seg.model) else 1
    return apply_overrides(_outer(J <= bj, bk, bj, warps, int64, contiguous_multiple(K), split, stages))


def _outer(persistent: bool, bk: int, bj: int, warps: int, int64: bool, contig: int, split: int = 1, stages: int = 1):
    """The outer form: the strip over every reduced row at once, or in chunks (the
    split and the pipelined chunk loop only then: the heuristics choose them only then)."""
    if persistent:
        return OuterPersistent(bk, bj, warps, int64, contig)
    return OuterChunked(bk, bj, warps, int64, contig, split, stages)


def _chunk_bytes(seg: Segment, K: int, bk: int, bj: int) -> int:
    """Bytes an outer tile's chunk loads: a [bj, bk] block of every input that varies
    along the reduced rows (more elements than the kept ones)."""
    return bk * bj * sum(v.dtype.itemsize for v in seg.loads() if seg.numel(v) > K)


def _outer_tile(seg: Segment, ref, dims, K: int, J: int, bk: int):
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
    return bj, warps, (outer_split(seg, ref, dims, K, J, bk, bj) if J > bj else 1)


# Short-lived programs per SM a split outer reduction aims for (docs/TUNING.md#outer-tiles).
SPLIT_PROGRAMS_PER_SM = 32


def split_target_programs(model: DeviceModel) -> int:
    """Programs a split outer reduction aims for: ``SPLIT_PROGRAMS_PER_SM`` per SM,
    rounded down to a power of 2 (4096 on 132 SMs, 2048 on 108).  The split is a power
    of 2 and so are most strip counts: an unrounded target would round each grid up,
    to twice the programs (8192 on 132 SMs)."""
    return prev_pow2(SPLIT_PROGRAMS_PER_SM * model.sms)


MAX_SPLIT = 32
# The most a kernel storing only its sums splits (no output per element): each
# program then walks at least a 16th of the rows.  Column sums gained at 16 and lost
# at 8; a kernel that also writes per element lost at 16, so it keeps ``MAX_SPLIT``.
# docs/TUNING.md#outer-split
MAX_SPLIT_SUMS_ONLY = 16


def outer_min_programs(model: DeviceModel) -> int:
    """Programs a widened strip must still leave: 3/16 of the split's target (768 on
    132 SMs, about 6 per SM), a tuned share of the programs that fill the GPU."""
    return split_target_programs(model) * 3 // 16


OUTER_STRIP_BYTES = 128  # the widest strip of a row one outer program sums
OUTER_STAGES = 3  # num_stages of an outer tile's chunk loop


def outer_stage_bytes(model: DeviceModel) -> int:
    """Bytes of one chunk's loads that may be pipelined: a 32nd of an SM's shared
    memory, rounded down to a power of 2 (4 KiB of 228, 2 KiB of 100), so that the
    OUTER_STAGES - 1 chunks of every load the pipeline keeps in shared memory still
    leave room for 16 programs per SM.  A tile streaming many tensors pipelined runs
    few programs per SM: one streaming 8 tensors (an embedding gradient summed over a
    batch) held about 20 times the shared memory and ran several times slower.  The
    bias gradient's chunk is 4 KB (64 x 32 fp16).  docs/TUNING.md#outer-tiles"""
    return prev_pow2(model.shared_bytes_per_sm // 32)


def outer_split(seg: Segment, ref, dims, K: int, J: int, bk: int, bj: int) -> int:
    """Programs along the reduced extent when the column strips alone are too few to
    fill the GPU (bias gradient of [16384, 4096] fp16: 256 strips of 16 columns;
    layer-norm backward's dw, db at hidden 1024: 64): a power of two that brings the
    grid to ``split_target_programs``, at most ``MAX_SPLIT`` (``MAX_SPLIT_SUMS_ONLY``
    where every output is smaller than the reduced tensor), each program walking at
    least two chunks of rows.  1 when the segment cannot be split (``split_eligible``)."""
    strips = -(-K // bk)
    target = split_target_programs(seg.model)
    if strips >= target or not seg.analysis.split_eligible(ref, dims):
        return 1
    n = seg.numel(ref)
    most = MAX_SPLIT if any(seg.numel(o) >= n for o in seg.outputs) else MAX_SPLIT_SUMS_ONLY
    split = min(next_pow2(-(-target // strips)), most)
    while split > 1 and J < 2 * bj * split:
        split //= 2
    return split


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
