"""The plan's kernels after ``split``: merged where one kernel can replace two, then
intermediates stored narrow (docs/SEGMENTATION.md, "Merge" and "Narrow").

``schedule`` is the caller's, as for ``split.split``."""
from __future__ import annotations

from .flow import Flow, tensors
from .steps import Step, step_reads

# Failed merge attempts (each emits a kernel that is then thrown away) after which a
# plan stops merging.
MERGE_LOSSES = 6


def refine(schedule, b, steps, base, keep):
    """The plan's steps after ``split``: merged, then narrowed (``base``: the fusion's
    tensor inputs; ``keep``: the values the plan returns)."""
    if sum(s.scheduler is not None for s in steps) < 2:
        return steps
    return narrow(schedule, b, merge(schedule, b, steps, base, keep), base, keep)


def merge(schedule, b, steps, base, keep):
    """Greedy merging: ``split`` decides group by group, so a plan can hold kernels
    that one kernel could replace (a side output, shape groups one scheduler takes
    together, reductions over the same axes on both sides of a cut).  Pairs of
    kernel steps are tried best first (``Flow.candidates``); a merge is kept when
    a scheduler takes the union and the steps still have a topological order.  The
    merged step stores only what the fusion or another step reads.  An attempt
    that reaches a scheduler's ``emit`` generates a kernel, so a plan gives up
    after MERGE_LOSSES refusals."""
    tried, losses = set(), 0
    while True:
        flow = Flow(steps, keep)
        for i, j in flow.candidates(b):
            outputs, reads = flow.union(i, j)
            key = (frozenset(outputs), frozenset(reads))
            if not outputs:  # nothing of either is read (a later eager step recomputes both)
                continue
            if key in tried or flow.order(i, j, Step(outputs, None), reads) is None:
                continue
            tried.add(key)
            step, _ = schedule(b, outputs, base | tensors(reads), base)
            merged = step and flow.order(i, j, step, step_reads(step))
            if merged:
                steps = merged
                break
            losses += 1
            if losses == MERGE_LOSSES:
                return steps
        else:
            return steps


def narrow(schedule, b, steps, base, keep):
    """A value a kernel stores only for other kernels that is an upcast of a 16-bit
    value is stored at 16 bits, and its readers recompute the cast (``narrow_source``
    does the same for host ops' inputs).  The cast is exact, so every result keeps
    its bits.  The change is kept only when schedulers take the rebuilt steps."""
    done = set()
    while True:
        flow = Flow(steps, keep)
        found = next(((p, x, u) for p, x, u in flow.upcasts(base) if x not in done), None)
        if found is None:
            return steps
        done.add(found[1])
        steps = _store_narrow(schedule, b, flow, *found, base) or steps


def _store_narrow(schedule, b, flow, p, x, u, base):
    new = list(flow.steps)
    for k, r in enumerate(flow.reads):
        if x in r:
            new[k], _ = schedule(b, new[k].outputs, base | tensors(r - {x}) | {u}, base)
            if new[k] is None:
                return None
    outputs = [o for o in new[p].outputs if o is not x]
    if u not in flow.reads[p] and u not in base and u not in outputs:
        outputs.append(u)  # else the readers load u from where the producer does
    if outputs:
        new[p], _ = schedule(b, outputs, base | tensors(flow.reads[p]), base)
        if new[p] is None:
            return None
    return [s for k, s in enumerate(new) if outputs or k != p]
