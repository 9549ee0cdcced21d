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

from pyfuser.bench.cases import select
from pyfuser.bench.offline import H200, MetaEnv, check_case, meta_inputs, offline_args, plan_offline  # noqa: F401
from pyfuser.schedulers import Choices


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
