"""Planning bench cases as a GPU would, on a machine without one (``runtime.ahead``'s
offline binding: meta inputs, a binding that says ``cuda``), each kernel compiled with
Triton's ptxas (``spills.offline_usage``) to walk the runtime's spill fallbacks on
those counts.  No kernel runs.

``benchmarks/regcheck.py`` (registers and spills per case) and
``benchmarks/kernel_identity.py`` (the golden kernel files) are built on it.
"""
from __future__ import annotations

import time

import torch
from torch.overrides import TorchFunctionMode

from ..runtime.ahead import MetaEnv, bind_offline, offline_args, step_binding
from ..runtime.spills import H200, candidates, first_fit, offline_usage, rejection


class _MetaItem(TorchFunctionMode):
    """``Tensor.item()`` of a meta tensor (a random seed drawn by make_inputs) gives 0."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.item and args and args[0].device.type == "meta":
            return 0
        return func(*args, **(kwargs or {}))


def meta_inputs(case, sizes):
    with _MetaItem():
        return case.make_inputs(sizes, "meta", torch.Generator())


def plan_offline(fd, inputs):
    """(cache, binding, plan) of ``fd`` for meta ``inputs`` as the CUDA runtime would make them."""
    rt, b, sig = bind_offline(fd, inputs, "cuda:0")
    return rt, b, rt.make_plan(b, sig)


def check_case(case, arch=H200, all_candidates=False, log=print):
    """Rows, one per kernel of the case's plan (full size), each with the candidates tried."""
    sizes = case.sizes(1.0)
    fd = case.define(sizes)
    rt, b, plan = plan_offline(fd, meta_inputs(case, sizes))
    env = MetaEnv(b)
    rows = []
    for n, step in enumerate(plan.steps):
        if step.scheduler is None:
            continue
        seg, sb, senv = step_binding(rt, b, env, step)
        sched = step.scheduler
        tried = []

        def usage(p):
            src, fn = rt.build(seg, sched, p, plan.signature)
            args, kw = offline_args(src, sched, seg, p, sb, senv)
            t0 = time.perf_counter()
            u = offline_usage(fn, args, kw, arch)
            tried.append((p, u))
            log(f"  {case.name} step {n} {sched.NAME} {p}: {u} ({time.perf_counter() - t0:.1f} s)")
            return rejection(sched, seg, p, u.regs, u.spills)

        cands = candidates(sched, seg, sched.heuristics(seg))
        chosen = first_fit(cands, usage)
        if not any(p == chosen for p, _ in tried):
            usage(chosen)  # the runtime does not check the last candidate; the table does
        if all_candidates:
            for p in cands:
                if not any(q == p for q, _ in tried):
                    usage(p)
        rows.append({"case": case.name, "step": n, "scheduler": sched.NAME, "path": "general" if plan.general
                     else "fast", "outputs": [o.name for o in step.outputs], "chosen": chosen, "tried": tried})
    return rows
