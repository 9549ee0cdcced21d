"""``make_plan``: the steps of a fusion for one binding (docs/SEGMENTATION.md, "Stages
at host ops"), and the warning when a segment runs as torch ops.

``schedule`` is the caller's, as for ``split.split``."""
from __future__ import annotations

import os
import sys
import warnings

from ..errors import EagerFallbackWarning
from ..ir.host_rows import slow_path_cause
from ..ir.ops import runs_on_host
from ..ir.values import TensorVal
from .aliases import expanded_source, is_view_of_input
from .cuts import host_levels, narrow_source, nonempty
from .refine import refine
from .split import split
from .steps import Plan, Step


def make_plan(fd, b, schedule) -> Plan:
    """Host ops cut the fusion into stages: the kernels whose values depend on no
    host op, then the first host op, then the kernels that depend on it, ...
    Each stage's targets (fusion outputs and the next host ops' inputs) go to
    ``split``, which cuts further at reductions when no scheduler takes them;
    ``refine`` then merges kernels and narrows what they store for each other."""
    ir = fd.ir
    aliases = {}
    rest = []
    for pos, o in enumerate(ir.outputs):
        if o in ir.inputs:
            aliases[pos] = "input"
        elif is_view_of_input(o, ir):
            aliases[pos] = "view"
        elif (x := expanded_source(o, b)) is not None:
            aliases[pos] = "expand"
            if x not in ir.inputs and x not in rest:
                rest.append(x)
        elif o not in rest:
            rest.append(o)
    live = ir.live_exprs()
    hosts = [e for e in live if runs_on_host(e)]
    cuts = frozenset(v for v in ir.inputs if isinstance(v, TensorVal))
    keep = set(ir.outputs) | set(rest)  # what the steps must store
    if not hosts:
        return _warn_eager(fd, Plan(aliases, refine(
            schedule, b, split(schedule, b, [o for o in rest if nonempty(b, o)], cuts, cuts), cuts, keep)))
    base = cuts
    cuts = cuts | {o for h in hosts for o in h.outputs}
    level = host_levels(live, hosts)
    stages = [[] for _ in range(len(hosts) + 1)]
    host_runs = []
    for h in hosts:
        run = []
        for v in h.inputs:
            if not isinstance(v, TensorVal):  # a scalar option (embedding_fwd's): the host call reads it
                continue
            v, casts = narrow_source(v, cuts)
            run += [c for c in casts if c not in run]
            # scalars (topk's k, scatter's value) are read as given, never stored
            if isinstance(v, TensorVal) and v not in cuts and nonempty(b, v) and v not in stages[level[v] + 1]:
                stages[level[v] + 1].append(v)
        host_runs.append(run + [h])
    for o in rest:
        if o not in cuts and nonempty(b, o) and o not in stages[level[o] + 1]:
            stages[level[o] + 1].append(o)
    steps = split(schedule, b, stages[0], cuts, base)
    for h, run, stage in zip(hosts, host_runs, stages[1:]):
        steps.append(Step([o for e in run for o in e.outputs], None, f"host op {h.op}", host=run))
        steps += split(schedule, b, stage, cuts, base)
    return _warn_eager(fd, Plan(aliases, refine(schedule, b, steps, base, keep)))


_WARNED: set = set()  # the causes (schedulers' rejection codes) already warned about


def _warn_eager(fd, plan: Plan) -> Plan:
    """Warn, once per cause, about each segment that runs as torch ops because no
    scheduler accepted it, and once per op about host steps on the slow path
    (``ir.host_rows``: scans, sorts, complex values, ...); matmul-like host ops run in
    torch by design and are not warned about."""
    for step in plan.steps:
        if step.is_host:
            _warn_slow_host(fd, step)
        if step.scheduler is not None or step.is_host:
            continue
        cause = tuple((r.scheduler, r.code) for r in step.declined)
        if cause in _WARNED:
            continue
        _WARNED.add(cause)
        codes = ", ".join(f"{n}: {c}" for n, c in cause)
        outs = ", ".join(o.name for o in step.outputs)
        warnings.warn(f"pyfuser: fusion{fd.id}: the segment computing {outs} runs as torch ops, no scheduler "
                      f"accepted it ({codes}); fd.explain(inputs) says why", EagerFallbackWarning,
                      stacklevel=_caller_level())
    return plan


def _warn_slow_host(fd, step) -> None:
    for e in step.host:
        cause = slow_path_cause(e)
        if cause is None or ("host", cause) in _WARNED:
            continue
        _WARNED.add(("host", cause))
        warnings.warn(f"pyfuser: fusion{fd.id}: {cause} runs in torch between kernels (no generated kernel "
                      f"computes it; the segment is split around it): docs/SEGMENTATION.md, \"Slow-path host ops\"",
                      EagerFallbackWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside pyfuser (the
    user's ``execute``), for the function calling ``warnings.warn``."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level
