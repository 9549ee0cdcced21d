"""Inner normalization scheduler: softmax-like fusions, reduction results broadcast
back over the reduced (innermost) dims in the same kernel.  Persistent or multi-pass:
see ``reduction.py`` for the tile and the sizing rules."""
from __future__ import annotations

from .base import Reject, Segment
from .reduction import (ReductionParams, analyse, emit_reduction, inner_check, inner_heuristics, reduction_grid,
                        reduction_fallbacks as fallbacks, reduction_max_registers as max_registers,
                        reduction_runtime_check)

NAME = "inner_normalization"


def can_schedule(seg: Segment) -> Reject | None:
    return inner_check(seg, normalization=True)


def heuristics(seg: Segment) -> ReductionParams:
    return inner_heuristics(seg, *analyse(seg))


def can_schedule_runtime(seg: Segment, params: ReductionParams) -> Reject | None:
    return reduction_runtime_check(seg, params, NAME)


def emit(seg: Segment, params: ReductionParams, name: str):
    return emit_reduction(seg, params, name, NAME)


grid = reduction_grid
