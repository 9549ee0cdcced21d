"""Bench cases timed in rounds, in one process: through ``fd.execute`` (as the bench
times pyfuser) and by replaying the launches one execute made (kernels only).

    PYTHONPATH=src python benchmarks/ab_timing.py --cases bert_softmax --rounds 3

Run it once per source tree, taking turns (old, new, old, new), to compare two
versions of the code generator on the same GPU: the spread between rounds of one
process says how far apart two numbers must be to mean anything.
"""
from __future__ import annotations

import argparse
import statistics

import torch
import triton

from pyfuser.bench.cases import select
from pyfuser.bench.harness import execute_recorded, moved_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, help="comma-separated case-name substrings")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--label", default="", help="a name for this source tree in the table")
    args = ap.parse_args()
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    copy = 2 * x.numel() * 4 / triton.testing.do_bench(lambda: y.copy_(x), return_mode="median") / 1e6
    del x, y
    runs = []
    for case in select(args.cases):
        sizes = case.sizes(1.0)
        fd = case.define(sizes)
        inputs = list(case.make_inputs(sizes, "cuda", None))
        fd.execute(inputs)
        out, rec, _ = execute_recorded(fd, inputs)

        def replay(rec=rec):
            for fn, grid, a, kw in rec:
                fn[grid](*a, **kw)

        runs.append((case.name, moved_bytes(inputs, out), lambda fd=fd, inputs=inputs: fd.execute(inputs), replay))
    times = {(name, how): [] for name, *_ in runs for how in ("execute", "kernels")}
    for _ in range(args.rounds):
        for name, _, ex, rp in runs:
            times[(name, "execute")].append(triton.testing.do_bench(ex, return_mode="median"))
            times[(name, "kernels")].append(triton.testing.do_bench(rp, return_mode="median"))
    print(f"copy {copy:.0f} GB/s")
    print("| tree | case | timed | us, each round | median % of copy |\n|---|---|---|---|---|")
    for name, nbytes, *_ in runs:
        for how in ("execute", "kernels"):
            ts = times[(name, how)]
            pct = 100 * nbytes / statistics.median(ts) / 1e6 / copy
            print(f"| {args.label} | {name} | {how} | {' '.join(f'{t * 1e3:.1f}' for t in ts)} | {pct:.1f}% |")


if __name__ == "__main__":
    main()
