"""Schedulers, in priority order.  Each module: NAME, can_schedule, heuristics, emit, grid."""
from . import inner_normalization, inner_outer, inner_reduction, outer_reduction, pointwise
from .base import Reject, Segment, override

SCHEDULERS = (pointwise, inner_normalization, inner_reduction, outer_reduction, inner_outer)

__all__ = ["SCHEDULERS", "Reject", "Segment", "override"]
