"""Inner reduction scheduler: reduce the innermost dims; outputs are reduction results.
(The tile and sizing rules are shared with normalization: see ``reduction.py``.)"""
from __future__ import annotations

from .base import Reject, Segment
from .reduction import (ReductionParams, analyse, emit_reduction, inner_check, inner_heuristics, reduction_grid,
                        reduction_fallbacks as fallbacks, reduction_max_registers as max_registers,
                        reduction_runtime_check)

NAME = "inner_reduction"


def can_schedule(seg: Segment) -> Reject | None:
    return inner_check(seg, normalization=False)


def heuristics(seg: Segment) -> ReductionParams:
    return inner_heuristics(seg, *analyse(seg))


def can_schedule_runtime(seg: Segment, params: ReductionParams) -> Reject | None:
    return reduction_runtime_check(seg, params, NAME)


def emit(seg: Segment, params: ReductionParams, name: str):
    return emit_reduction(seg, params, name, NAME)


grid = reduction_grid
