"""Schedulers, in priority order: the first whose checks accept a segment generates
its kernel.

Every entry, a module (``pointwise``, ``inner_outer``) or a ``ReductionScheduler`` row
(``reduction_schedulers``: the three reduction schedulers, one definition), implements
the ``base.Scheduler`` contract (checked here at import):

* ``can_schedule(seg)``, the compile-time check, and ``can_schedule_runtime(seg,
  params)``, the run-time check, each return ``None`` or a ``Reject`` (scheduler,
  code, message): a stable ``code`` for tests and tools, a message for people;
* ``heuristics(seg) -> Params`` decides speed only; ``settle(seg, params, met)``
  trades a compile-time constant for a run-time one once a segment met too many;
* ``emit(seg, params, name)`` generates the kernel.  Accepting obliges success: every
  condition the kernel generator relies on is part of the run-time check, which
  walks the segment over the tile once and keeps the result for ``emit``; an
  ``emit`` that still fails is pyfuser's bug (a ``CompileError`` with a repro);
* ``grid``, ``fallbacks`` (spill fallbacks, each run-time checked before it is
  compiled) and ``max_registers`` (the spill check's budget).

Worked example: softmax over [4096, 1000] fp32.  pointwise declines at compile time
(``has_reduction``), inner_normalization accepts (the innermost dim is reduced and
the output is shaped like the input), its heuristics size the row tile, and its
run-time check walks the segment over that tile.
``fd.explain(inputs)`` shows the decision and every rejection on the way
(docs/DEBUGGING.md).
"""
from . import base, inner_outer, pointwise, reduction_params
from .base import Choices, Reject, Rejection, Scheduler, Segment, current_choices
from .reduction_schedulers import INNER_NORMALIZATION, INNER_REDUCTION, OUTER_REDUCTION, ReductionScheduler

SCHEDULERS = (pointwise, INNER_NORMALIZATION, INNER_REDUCTION, OUTER_REDUCTION, inner_outer)

for _sched in SCHEDULERS:
    if not isinstance(_sched, Scheduler):
        _missing = [m for m in ("NAME", "can_schedule", "can_schedule_runtime", "heuristics", "settle", "emit", "grid",
                                "fallbacks", "max_registers") if not hasattr(_sched, m)]
        raise TypeError(f"scheduler {getattr(_sched, 'NAME', _sched)!r} lacks {', '.join(_missing)} "
                        "(schedulers.base.Scheduler)")

base.register(SCHEDULERS, (*pointwise.FORMS, *reduction_params.FORMS, inner_outer.InnerOuterParams),
              reduction_params.SWITCHES)

__all__ = ["INNER_NORMALIZATION", "INNER_REDUCTION", "OUTER_REDUCTION", "SCHEDULERS", "Choices", "Reject",
           "ReductionScheduler", "Rejection", "Scheduler", "Segment", "current_choices"]
