"""Bench cases under scheduler variants, each timed on the GPU.

    PYTHONPATH=src python benchmarks/sweep.py softmax_30522_bf16 \
        --variants "persistent=False,block_j=8192,num_warps=16; num_warps=8"
    PYTHONPATH=src python benchmarks/sweep.py layer_norm_768_fp16 --variants "stages=2" --no-spill-check

Each case runs as planned, then under each variant: ``schedulers.Choices`` fields as
``name=value`` pairs, variants separated by ``;``.  A kernel form worth timing is a
scheduling parameter first (a ``Choices`` field), so every variant is one the code
generator can emit and the tests cover.  ``--no-spill-check`` keeps a variant's params where its kernel spills.

The launches of one execute are replayed under ``triton.testing.do_bench`` (median, L2
flushed): kernels only, no host work.  Per case and variant the table gives ms, GB/s
of the bytes the case moves, and each kernel's registers / spills.  Times of two
source trees are compared with ``ab_timing.py``, not across runs of this tool.
"""
from __future__ import annotations

import argparse
import ast
import sys

import torch
import triton

from pyfuser.bench.cases import select
from pyfuser.bench.harness import execute_recorded, kernel_stats, moved_bytes
from pyfuser.schedulers import Choices


def parse_variants(text: str) -> list[dict]:
    """``"a=1,b=2; c=3"`` -> ``[{"a": 1, "b": 2}, {"c": 3}]`` (values as Python literals)."""
    return [{k.strip(): ast.literal_eval(v.strip()) for k, v in (f.split("=", 1) for f in part.split(","))}
            for part in text.split(";") if part.strip()]


def time_case(case, choices: Choices):
    """(ms, bytes moved, per-kernel 'regs/spills') of the case's launches under ``choices``."""
    sizes = case.sizes(1.0)
    fd = case.define(sizes)
    inputs = list(case.make_inputs(sizes, "cuda", None))
    with choices:
        fd.execute(inputs)
        out, rec, _ = execute_recorded(fd, inputs)

    def replay():
        for fn, grid, args, kw in rec:
            fn[grid](*args, **kw)

    ms = triton.testing.do_bench(replay, return_mode="median")
    stats = ",".join(f"{s['regs']}/{s['spills']}" for s in kernel_stats(rec))
    return ms, moved_bytes(inputs, out), stats


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", help="comma-separated bench case names, substrings or groups")
    p.add_argument("--variants", default="", help='"field=value,field=value; ..." (schedulers.Choices)')
    p.add_argument("--no-spill-check", action="store_true", help="time a variant even where it spills")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a GPU")
    runs = [("planned", Choices())] + [(str(v), Choices(spill_check=not args.no_spill_check, **v))
                                       for v in parse_variants(args.variants)]
    print("| case | variant | ms | GB/s | regs/spills |\n|---|---|---|---|---|")
    for case in select(args.cases):
        if case.group == "host":
            continue
        for label, choices in runs:
            ms, nbytes, stats = time_case(case, choices)
            print(f"| {case.name} | {label} | {ms:.4f} | {nbytes / ms / 1e6:.0f} | {stats} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
