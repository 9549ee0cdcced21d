"""What the schedulers choose for the bench's cases on each device model, without a GPU.

    PYTHONPATH=src python scripts/device_models.py                 # the seed and suite cases, every preset
    PYTHONPATH=src python scripts/device_models.py --cases layer_norm_backward,bias_grad --models h200,sm89
    PYTHONPATH=src python scripts/device_models.py --ptxas         # and each kernel's registers and spills

Each case is planned at full size as the CUDA runtime would plan it
(``bench.offline.plan_offline``: meta inputs, no kernel runs) inside a
``device_model(name)`` block, and every kernel step's scheduler and params are
printed, one line per model, so that what a rule reads from the model shows (fewer
pipeline stages on sm89's shared memory, a smaller split on the a100's SMs).
``--ptxas`` compiles each chosen kernel for the model's architecture with Triton's
ptxas, walking the spill fallbacks as the runtime would (``bench.offline.check_case``).
"""
from __future__ import annotations

import argparse
import sys

from pyfuser.bench.cases import select
from pyfuser.bench.offline import check_case, meta_inputs, plan_offline
from pyfuser.schedulers.device_model import PRESETS, device_model


def chosen(case) -> list[tuple[int, str, object]]:
    """(step, scheduler, params) of every kernel step of ``case``'s full-size plan."""
    sizes = case.sizes(1.0)
    fd = case.define(sizes)
    rt, b, plan = plan_offline(fd, meta_inputs(case, sizes))
    out = []
    for n, step in enumerate(plan.steps):
        if step.scheduler is None:
            continue
        seg = rt.segment(b, step.outputs) if step.sub is None else rt.sub_segment(b, step.sub)
        out.append((n, step.scheduler.NAME, step.scheduler.heuristics(seg)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="seed,suite", help="bench cases (python -m pyfuser.bench's selection)")
    ap.add_argument("--models", default=",".join(PRESETS), help="presets, comma-separated")
    ap.add_argument("--ptxas", action="store_true", help="compile each chosen kernel for the model's sm_<arch>")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for case in select(args.cases):
        if case.group == "host":
            continue
        print(f"# {case.name}")
        for name in models:
            with device_model(name) as m:
                if args.ptxas:
                    for row in check_case(case, arch=m.arch, log=lambda *a: None):
                        regs = {p: u for p, u in row["tried"]}.get(row["chosen"])
                        print(f"  {name:5} step {row['step']} {row['scheduler']} {row['chosen']!r}: sm_{m.arch} {regs}")
                else:
                    for n, sched, params in chosen(case):
                        print(f"  {name:5} step {n} {sched} {params!r}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
