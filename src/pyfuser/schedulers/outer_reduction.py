"""Outer reduction scheduler: the innermost dim is kept (e.g. the bias gradient,
sum over dim 0 of [N, H]).  The tile puts kept elements on the contiguous axis and
loops over the reduced ones; see ``reduction.py``."""
from __future__ import annotations

from .base import Reject, Segment
from .reduction import (OUTER_VALUES_PER_THREAD, ReductionParams, analyse, emit_reduction, innermost_reduced,
                        outer_heuristics, outer_values, reduction_grid, reduction_fallbacks as fallbacks)

NAME = "outer_reduction"


def can_schedule(seg: Segment) -> Reject | None:
    a = analyse(seg)
    if isinstance(a, Reject):
        return a
    ref, dims = a
    if innermost_reduced(seg, ref, dims):
        return Reject("inner_axes", f"the innermost dim of {ref.name} is reduced")
    # Several reductions side by side share one tile, sized to hold every stream: past
    # 8 values per element the strips and row chunks shrink until a kernel is mostly
    # address math.  BERT's backward held 50-60 bias gradients in one kernel: 32 x 32
    # tiles on 16 warps, 1.5 ms for what one reduction per kernel reads in about 0.3 ms.
    # Splitting the group is the planner's job; a single reduction is always taken.
    values = outer_values(seg, ref)
    if len(seg.reductions()) > 1 and values > MAX_SIDE_BY_SIDE_VALUES:
        return Reject("too_many_streams", f"{len(seg.reductions())} reductions side by side stream {values} values "
                      f"per element (at most {MAX_SIDE_BY_SIDE_VALUES})")
    return None


# 32-bit values per element a tile of several reductions may stream (an eighth of the
# outer tile's per-thread budget: at least 8 elements per thread).
MAX_SIDE_BY_SIDE_VALUES = OUTER_VALUES_PER_THREAD // 8


def heuristics(seg: Segment) -> ReductionParams:
    return outer_heuristics(seg, *analyse(seg))


def emit(seg: Segment, params: ReductionParams, name: str):
    return emit_reduction(seg, params, name, NAME)


grid = reduction_grid
