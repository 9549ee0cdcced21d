"""Offline register check: every benchmark case's kernels compiled for the H200 (sm_90)
on a machine without a GPU.

    .venv/bin/python benchmarks/regcheck.py                    # every case, full size
    .venv/bin/python benchmarks/regcheck.py --cases rope,norm_backward --all-candidates

Each case is planned at its full size with the CUDA heuristics: the inputs are meta
tensors (shapes, dtypes and strides, no memory; address 0 counts as 16-byte aligned,
as fresh allocations are) and the binding says ``cuda``, so the planner and the
schedulers take the GPU branch.  No kernel runs.  Each kernel is compiled with
Triton's ptxas (``spills.offline_usage``: the same argument specialisation as a
launch) and the runtime's spill walk (``spills.first_fit`` over the scheduler's
fallbacks) runs on these counts, so the table shows the parameters the GPU run ends
up with, and the registers and spills of each candidate it tried on the way.

Steps of a plan that takes the general path (host ops, kernels reading other
kernels' results) are marked ``general``: the runtime runs their heuristics' choice
without a spill check, so the walk is shown there as what the check would pick.
Registers are the compiler's, per thread.  ``spills`` are ptxas's spill stores / 4;
``local`` is local memory / 4, what the driver reports as ``CompiledKernel.n_spills``
(it also counts arrays the code declares, such as the sin/cos argument-reduction
table: see ``spills.ptxas_usage``).
"""
from __future__ import annotations

import argparse
import ast
import sys
import time

import torch
from torch.overrides import TorchFunctionMode

from pyfuser.bench.cases import select
from pyfuser.ir.concretize import bind
from pyfuser.ir.values import ScalarVal, TensorVal
from pyfuser.runtime.args import launch_kw
from pyfuser.runtime.executor import arg_value
from pyfuser.runtime.plan import ExecutorCache
from pyfuser.runtime.spills import H200, candidates, first_fit, offline_usage, rejection
from pyfuser.segment.subfusion import bind_sub
from pyfuser.schedulers import Choices


class _MetaItem(TorchFunctionMode):
    """``Tensor.item()`` of a meta tensor (a random seed drawn by make_inputs) gives 0."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.item and args and args[0].device.type == "meta":
            return 0
        return func(*args, **(kwargs or {}))


def meta_inputs(case, sizes):
    with _MetaItem():
        return case.make_inputs(sizes, "meta", torch.Generator())


class _Env(dict):
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
    rt._current_sig = rt.signature(b, fd.ir.live_exprs())
    return rt, b, rt.make_plan(b)


def check_case(case, arch=H200, all_candidates=False, log=print):
    """Rows, one per kernel of the case's plan (full size), each with the candidates tried."""
    sizes = case.sizes(1.0)
    fd = case.define(sizes)
    rt, b, plan = plan_offline(fd, meta_inputs(case, sizes))
    env = _Env(b)
    rows = []
    for n, step in enumerate(plan.steps):
        if step.scheduler is None:
            continue
        if step.sub is None:
            seg, sb, senv = rt.segment(b, step.outputs), b, env
        else:
            seg = rt.sub_segment(b, step.sub)
            sb = bind_sub(step.sub, b, env)
            senv = _Env(sb)
        sched = step.scheduler
        tried = []

        def usage(p):
            src, fn = rt.build(seg, sched, p)
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


def short(p) -> str:
    """Params in a table cell: the fields that vary, without the dataclass name."""
    d = dict(p.__dict__)
    keep = ("block", "num_warps") if "block" in d else ("persistent", "block_k", "block_j", "num_warps")
    parts = [f"{k}={d[k]}" for k in keep if k in d]
    parts += [f"{k}={v}" for k, v in d.items()
              if k in ("align", "online", "split", "stages", "outer", "block_outer", "out_reversed", "prefetch", "rewiden")
              and not (v is False or v == () or (type(v) is int and v == 1 and k != "rewiden"))  # True == 1: shown
              and (k != "rewiden" or d.get("prefetch"))]
    parts += [f"{k}={v}" for k, v in d.items() if k in ("nprog", "group")]
    return " ".join(parts)


def table(rows) -> str:
    lines = ["| case | kernel | scheduler | path | params | regs | spills | local | other candidates (regs/spills) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        u = dict(r["tried"])[r["chosen"]]
        others = "; ".join(f"{short(p)}: {v.regs}/{v.spills}" for p, v in r["tried"] if p != r["chosen"])
        lines.append(f"| {r['case']} | {r['step']} {','.join(r['outputs'])} | {r['scheduler']} | {r['path']} | "
                     f"{short(r['chosen'])} | {u.regs} | {u.spills} | {u.local} | {others} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="", help="comma-separated case-name substrings, groups or tags (default: all)")
    p.add_argument("--arch", type=int, default=H200, help="compute capability to compile for (default 90)")
    p.add_argument("--all-candidates", action="store_true", help="also compile the fallbacks after the chosen one")
    p.add_argument("--override", action="append", default=[], metavar="FIELD=VALUE",
                   help="force a scheduler parameter, as schedulers.Choices does (repeatable), e.g. num_warps=16")
    p.add_argument("--quiet", action="store_true", help="only the table")
    args = p.parse_args(argv)
    fields = {k: ast.literal_eval(v) for k, v in (o.split("=", 1) for o in args.override)}
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    rows = []
    with Choices(**fields):
        for case in select(args.cases):
            if case.group != "host":
                rows += check_case(case, args.arch, args.all_candidates, log)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
