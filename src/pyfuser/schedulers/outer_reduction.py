"""Outer reduction scheduler: the innermost dim is kept (e.g. the bias gradient,
sum over dim 0 of [N, H]).  The tile puts kept elements on the contiguous axis and
loops over the reduced ones; see ``reduction.py``."""
from __future__ import annotations

from .base import Reject, Segment
from .reduction import (ReductionParams, analyse, emit_reduction, innermost_reduced, outer_heuristics,
                        reduction_grid, reduction_fallbacks as fallbacks, reduction_max_registers as max_registers,
                        reduction_runtime_check)

NAME = "outer_reduction"


def can_schedule(seg: Segment) -> Reject | None:
    a = analyse(seg)
    if isinstance(a, Reject):
        return a
    ref, dims = a
    if innermost_reduced(seg, ref, dims):
        return Reject("inner_axes", f"the innermost dim of {ref.name} is reduced")
    return None


def heuristics(seg: Segment) -> ReductionParams:
    return outer_heuristics(seg, *analyse(seg))


def can_schedule_runtime(seg: Segment, params: ReductionParams) -> Reject | None:
    return reduction_runtime_check(seg, params, NAME)


def emit(seg: Segment, params: ReductionParams, name: str):
    return emit_reduction(seg, params, name, NAME)


grid = reduction_grid
