"""The three reduction schedulers, one definition: a ``ReductionScheduler`` row each.

They share the tile (``codegen.tiles.reduction.ReductionTile``), the analysis, the
run-time check, the spill fallbacks, emission and the grid (``reduction.py``), and
differ in one rule, what they accept, which also picks the heuristics:

* ``inner_normalization``: the innermost dim is reduced and some output is shaped like
  the reduced tensor (softmax over [4096, 1000]: its output combines each row's max
  and sum with the row again).  Persistent or multi-pass rows (``inner_heuristics``);
* ``inner_reduction``: the innermost dim is reduced and every output is a reduction
  result (row sums, row max).  The same row heuristics;
* ``outer_reduction``: the innermost dim is kept (the bias gradient, sum over dim 0 of
  [N, H]), so the tile puts kept elements on the contiguous axis and loops over the
  reduced ones (``outer_heuristics``: ``reduction_outer``'s column strips).

Each row's ``NAME`` is what dumps, ``explain``, rejections, ``Choices(disable=...)`` and
the kernels' header comments call it; ``SCHEDULERS`` (the package's registry) lists
the rows in their priority order.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import Reject, Segment
from .reduction import (ReductionParams, analyse, constant_row_length, emit_reduction, inner_heuristics,
                        innermost_reduced, is_normalization, outer_heuristics, reduction_fallbacks, reduction_grid,
                        reduction_max_registers, reduction_runtime_check, runtime_row)


# Row lengths a segment's kernels compile as constants before they take them at run time.
CONSTANT_ROW_LENGTHS = 1


def settle_row_length(seg: Segment, params, met: set):
    """The contract's ``settle``: ``params``, or ``runtime_row(params)`` once the
    segment's kernels met ``CONSTANT_ROW_LENGTHS`` other constant row lengths
    (``met``, the lengths met so far, which this updates).  Each constant is a binary
    of its own (a second or so of compiling on the GPU), so the segment then takes a
    kernel with the length at run time, one binary for every length.  A fusion run at
    one row length keeps its constant rows (a padded row is faster with them); one
    run at ever new sequence lengths compiles one constant-row kernel and one
    runtime-row kernel per block width (docs/TUNING.md#reduction-tiles)."""
    length = constant_row_length(seg, params)
    if length is None:
        return params
    if length in met or len(met) < CONSTANT_ROW_LENGTHS:
        met.add(length)
        return params
    return runtime_row(params)



@dataclass(frozen=True)
class ReductionScheduler:
    """A reduction scheduler (the ``base.Scheduler`` contract) by what it accepts."""

    NAME: str  # the scheduler's name (the contract's)
    # The innermost dim reduced (the row tile, ``inner_heuristics``) or kept (the
    # column tile, ``outer_heuristics``).
    inner: bool
    # For an inner tile: whether some output must (True) or may not (False) be shaped
    # like the reduced tensor; None: either.
    normalization: bool | None = None

    def can_schedule(self, seg: Segment) -> Reject | None:
        a = analyse(seg)
        if isinstance(a, Reject):
            return a
        ref, dims = a
        if innermost_reduced(seg, ref, dims) != self.inner:
            if self.inner:
                return Reject("outer_axes", f"the innermost dim of {ref.name} is kept, not reduced")
            return Reject("inner_axes", f"the innermost dim of {ref.name} is reduced")
        if self.normalization is not None and is_normalization(seg, ref) != self.normalization:
            if self.normalization:
                return Reject("pure_reduction", "no output is shaped like the reduced tensor")
            return Reject("normalization", "an output combines reduction results with the reduced tensor")
        return None

    def heuristics(self, seg: Segment) -> ReductionParams:
        return (inner_heuristics if self.inner else outer_heuristics)(seg, *analyse(seg))

    def can_schedule_runtime(self, seg: Segment, params: ReductionParams) -> Reject | None:
        return reduction_runtime_check(seg, params, self.NAME)

    def settle(self, seg: Segment, params: ReductionParams, met: set) -> ReductionParams:
        return settle_row_length(seg, params, met)

    def emit(self, seg: Segment, params: ReductionParams, name: str):
        return emit_reduction(seg, params, name, self.NAME)

    def grid(self, seg: Segment, params: ReductionParams):
        return reduction_grid(seg, params)

    def fallbacks(self, seg: Segment, params: ReductionParams) -> list:
        return reduction_fallbacks(seg, params)

    def max_registers(self, seg: Segment, params: ReductionParams) -> None:
        return reduction_max_registers(seg, params)


INNER_NORMALIZATION = ReductionScheduler("inner_normalization", inner=True, normalization=True)
INNER_REDUCTION = ReductionScheduler("inner_reduction", inner=True, normalization=False)
OUTER_REDUCTION = ReductionScheduler("outer_reduction", inner=False)

REDUCTION_SCHEDULERS = (INNER_NORMALIZATION, INNER_REDUCTION, OUTER_REDUCTION)
