"""Planning bench cases as a GPU would, on a machine without one: meta inputs (shapes,
dtypes and strides, no memory; address 0 counts as 16-byte aligned, as fresh
allocations are), a binding that says ``cuda`` so the planner and the schedulers take
the GPU branch, and each kernel compiled with Triton's ptxas (``spills.offline_usage``)
to walk the runtime's spill fallbacks on those counts.  No kernel runs.

``benchmarks/regcheck.py`` (registers and spills per case) and
``benchmarks/kernel_identity.py`` (the golden kernel files) are built on it.
"""
from __future__ import annotations

import time

import torch
from torch.overrides import TorchFunctionMode

from ..ir.concretize import bind
from ..ir.values import ScalarVal, TensorVal
from ..runtime.args import launch_kw
from ..runtime.args import arg_value
from ..runtime.plan import ExecutorCache
from ..runtime.spills import H200, candidates, first_fit, offline_usage, rejection
from ..segment.subfusion import bind_sub


class _MetaItem(TorchFunctionMode):
    """``Tensor.item()`` of a meta tensor (a random seed drawn by make_inputs) gives 0."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.item and args and args[0].device.type == "meta":
            return 0
        return func(*args, **(kwargs or {}))


def meta_inputs(case, sizes):
    with _MetaItem():
        return case.make_inputs(sizes, "meta", torch.Generator())


class MetaEnv(dict):
    """Values for building kernel arguments offline: the binding's, else a meta tensor
    of an intermediate's shape, else a typed placeholder for a host-computed scalar."""

    def __init__(self, b):
        super().__init__(b.values)
        self.b = b

    def __missing__(self, v):
        if isinstance(v, TensorVal):
            return torch.empty(self.b.shapes[v], dtype=v.dtype.torch, device="meta")
        assert isinstance(v, ScalarVal), v
        return {torch.bool: True}.get(v.dtype.torch, 0.5 if v.dtype.torch.is_floating_point else 3)


def offline_args(src, sched, seg, params, b, env):
    """What ``args.warmup_args`` builds, from meta tensors: args, and a CUDA launch's
    keywords (``args.launch_kw``) for ``offline_usage``."""
    outs = {o: torch.empty(b.shapes[o], dtype=o.dtype.torch, device="meta") for o in src.outputs}
    rng = {id(a.source[1]): (0, 0) for a in src.args if a.kind == "rng"}
    args = [_meta_scratch(a, b) if a.source[0] == "scratch" else arg_value(a, b, env, outs, rng) for a in src.args]
    return args, launch_kw(src, params, cuda=True)


def _meta_scratch(a, b):
    """A split reduction's scratch buffer, as a meta tensor (only its type matters here)."""
    return torch.empty(1, dtype=getattr(torch, a.source[5]), device="meta")


def plan_offline(fd, inputs):
    """(cache, binding, plan) of ``fd`` for ``inputs`` as the CUDA runtime would make them."""
    rt = ExecutorCache(fd)
    b = bind(fd.ir, inputs)
    b.device = torch.device("cuda", 0)
    b.input_pos = {v: i for i, v in enumerate(fd.ir.inputs)}
    return rt, b, rt.make_plan(b, rt.signature(b, fd.ir.live_exprs()))


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
        if step.sub is None:
            seg, sb, senv = rt.segment(b, step.outputs), b, env
        else:
            seg = rt.sub_segment(b, step.sub)
            sb = bind_sub(step.sub, b, env)
            senv = MetaEnv(sb)
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
