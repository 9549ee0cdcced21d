"""The data of a plan: ``Step`` (one segment: a kernel, a host step or a reference
step) and ``Plan`` (the steps, and the outputs that alias inputs or expand another
value), and what a step reads."""
from __future__ import annotations

from dataclasses import dataclass, field

from .subfusion import SubFusion, inputs_of, needed_exprs


@dataclass
class Step:
    """One segment of a plan: a scheduler module and the outputs it computes."""

    outputs: list
    scheduler: object  # a schedulers.SCHEDULERS entry, or None for a host (reference) step
    reason: str = ""
    kernels: dict = field(default_factory=dict)  # params -> (KernelSource, launchable)
    declined: list = field(default_factory=list)  # the Rejects of the schedulers tried before this one, in order
    sub: SubFusion | None = None  # a kernel on intermediates: the segment as its own fusion (None: the whole IR)
    host: list | None = None  # a host segment: the original exprs it runs in torch (None: a kernel)

    @property
    def is_host(self) -> bool:
        return self.host is not None


@dataclass
class Plan:
    # output position -> "input" | "view" (of an input) | "expand": a broadcast that
    # repeats elements, returned as a stride-0 expand of its source (``expanded_source``),
    # which a kernel computes at its own size, as nvFuser allocates expanded outputs
    aliases: dict
    steps: list
    # The input signature the plan was made for (``runtime.plan.Signature``): part of
    # every kernel key of its steps.  Set by the runtime once planning is done.
    signature: object = None

    @property
    def general(self) -> bool:
        """Whether a step reads intermediates or runs torch (a plan of several steps that
        pass values through memory), as kernel_identity and the register check label it."""
        return any(s.scheduler is None or s.sub is not None for s in self.steps)


def make_step(outputs, sched, reasons) -> Step:
    """A step of ``sched`` (None: a reference step) with the rejections before it."""
    return Step(list(outputs), sched, "; ".join(f"{r.scheduler}: {r}" for r in reasons), declined=list(reasons))


def step_reads(step) -> set:
    """The values a step loads: fusion inputs, scalars, what earlier steps stored."""
    if step.is_host:
        return inputs_of(step.host)
    if step.sub is not None:
        return {step.sub.orig[c] for c in step.sub.ir.inputs}
    return inputs_of(needed_exprs(step.outputs, ()))
