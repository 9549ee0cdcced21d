"""``split``: the steps that compute a group of outputs, cut where no scheduler takes
them (docs/SEGMENTATION.md, "Split").

``schedule(b, outputs, cuts, base)`` is the caller's: it returns (a kernel step, the
rejections) when some scheduler takes ``outputs`` computed from ``cuts`` (``base``:
the fusion's tensor inputs; ``cuts`` None or ``base``: the whole fusion), else
(None, the rejections)."""
from __future__ import annotations

from .cuts import first_reductions
from .steps import make_step


def split(schedule, b, outputs, cuts=None, base=None):
    """Steps that compute ``outputs`` from ``cuts``: one kernel if some scheduler
    takes them all; else kernels per output shape; what still fails is cut at its
    first reductions (stored by their own kernels, loaded by the rest).  A single
    output no scheduler takes and no cut helps becomes a host (reference) step."""
    if not outputs:
        return []
    step, reasons = schedule(b, outputs, cuts, base)
    if step is not None:
        return [step]
    steps, failing = [], list(outputs)
    groups: dict = {}
    for o in outputs:
        groups.setdefault(b.shapes[o], []).append(o)
    if len(groups) > 1:
        failing = []
        for g in groups.values():
            s, _ = schedule(b, g, cuts, base)
            if s is not None:
                steps.append(s)
            else:
                failing += g
        if not failing:
            return steps
    if cuts is not None:
        first = first_reductions(failing, cuts)
        rest = [o for o in failing if o not in first]
        if first and (rest or len(first) < len(failing)):
            return steps + split(schedule, b, first, cuts, base) + split(schedule, b, rest, cuts | set(first), base)
    if len(failing) == 1:
        if steps:
            return steps + split(schedule, b, failing, cuts, base)
        return [make_step(failing, None, reasons)]
    return steps + [s for o in failing for s in split(schedule, b, [o], cuts, base)]
