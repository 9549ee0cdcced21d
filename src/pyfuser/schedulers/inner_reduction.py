"""Inner reduction scheduler: reduce the innermost dims; outputs are reduction results.
(The tile and sizing rules are shared with normalization: see ``reduction.py``.)"""
from __future__ import annotations

from .base import Reject, Segment
from .reduction import (ReductionParams, analyse, emit_reduction, inner_heuristics, innermost_reduced,
                        is_normalization, reduction_grid, reduction_fallbacks as fallbacks)

NAME = "inner_reduction"


def can_schedule(seg: Segment) -> Reject | None:
    a = analyse(seg)
    if isinstance(a, Reject):
        return a
    ref, dims = a
    if not innermost_reduced(seg, ref, dims):
        return Reject("outer_axes", f"the innermost dim of {ref.name} is kept, not reduced")
    if is_normalization(seg, ref):
        return Reject("normalization", "an output combines reduction results with the reduced tensor")
    return None


def heuristics(seg: Segment) -> ReductionParams:
    return inner_heuristics(seg, *analyse(seg))


def emit(seg: Segment, params: ReductionParams, name: str):
    return emit_reduction(seg, params, name, NAME)


grid = reduction_grid
