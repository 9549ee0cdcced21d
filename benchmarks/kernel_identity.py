"""Offline kernel identity: every bench case's kernels, as the GPU would get them,
written out and compared between two source trees, without a GPU.

    PYTHONPATH=src .venv/bin/python benchmarks/kernel_identity.py --out /tmp/kid_new
    PYTHONPATH=OLD/src .venv/bin/python benchmarks/kernel_identity.py --out /tmp/kid_old
    .venv/bin/python benchmarks/kernel_identity.py --compare /tmp/kid_old /tmp/kid_new

Each case is planned at full size with the CUDA heuristics (meta inputs,
``pyfuser.bench.offline``, as ``regcheck.py`` plans); for every kernel step the
scheduler, its parameters and the generated source of each candidate (the heuristics' choice, then the fallbacks the
spill check may move to) are written to ``OUT/<case>.txt``.  Kernel names carry a
process-wide fusion number, so they are normalised.  ``--compare`` lists every case
whose file differs, with a unified diff of the first lines that differ; identical
files mean identical kernels and launch parameters.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

from pyfuser.bench.cases import select
from pyfuser.bench.offline import meta_inputs, plan_offline
from pyfuser.runtime.spills import candidates

_NAME = re.compile(r"pyfuser_f\d+_k\d+")


def case_text(case) -> str:
    """The case's plan: per kernel step, scheduler, params and each candidate's source."""
    sizes = case.sizes(1.0)
    fd = case.define(sizes)
    rt, b, plan = plan_offline(fd, meta_inputs(case, sizes))
    out = [f"# {case.name}: {len(plan.steps)} steps, general={bool(plan.general)}"]
    for n, step in enumerate(plan.steps):
        if step.scheduler is None:
            out.append(f"## step {n}: host")
            continue
        seg = rt.segment(b, step.outputs) if step.sub is None else rt.sub_segment(b, step.sub)
        sched = step.scheduler
        for i, p in enumerate(candidates(sched, seg, sched.heuristics(seg))):
            src = sched.emit(seg, p, f"pyfuser_f0_k{n}")
            out.append(f"## step {n} candidate {i}: {sched.NAME} {p!r} constexprs={src.constexprs}")
            out.append(_NAME.sub("KERNEL", src.source))
    return "\n".join(out) + "\n"


def write(out_dir: str, spec: str) -> int:
    os.makedirs(out_dir, exist_ok=True)
    for case in select(spec):
        if case.group == "host":
            continue
        with open(os.path.join(out_dir, f"{case.name}.txt"), "w") as f:
            f.write(case_text(case))
        print(case.name, file=sys.stderr, flush=True)
    return 0


def compare(old: str, new: str, context: int = 40) -> int:
    names = sorted(set(os.listdir(old)) | set(os.listdir(new)))
    differ = 0
    for name in names:
        a, b = (os.path.join(d, name) for d in (old, new))
        if not (os.path.exists(a) and os.path.exists(b)):
            print(f"{name}: only in {'new' if os.path.exists(b) else 'old'}")
            differ += 1
            continue
        la, lb = open(a).read().splitlines(), open(b).read().splitlines()
        if la == lb:
            continue
        differ += 1
        diff = list(difflib.unified_diff(la, lb, "old/" + name, "new/" + name, lineterm="", n=2))
        print(f"{name}: differs ({len(diff)} diff lines)")
        print("\n".join(diff[:context]))
    print(f"{len(names) - differ} of {len(names)} cases identical")
    return 1 if differ else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="folder to write each case's kernels to")
    p.add_argument("--cases", default="", help="comma-separated case-name substrings, groups or tags")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two --out folders")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        p.error("--out or --compare is required")
    return write(args.out, args.cases)


if __name__ == "__main__":
    sys.exit(main())
