"""Where a pyfuser training step goes when the sequence length changes every step.

    PYTHONPATH=src:benchmarks python benchmarks/varlen_profile.py [--model bert] [--new 8] [--seen 6] [--out DIR]
    python benchmarks/varlen_profile.py --tiny --device cpu --new 2 --seen 2     # a smoke test

Trains one zoo model (``pyfuser.bench.zoo_bench``'s sizes) under
``torch.compile(backend="pyfuser")`` with Dynamo's default dynamic shapes: two warm-up
steps, then ``--new`` steps each at a length not seen before, then ``--seen`` steps at
lengths already met.  Per step it prints the length, the wall time and what was compiled
(Dynamo graphs, pyfuser kernels, Triton binaries); then a cProfile of the new-length
steps and one of the seen-length steps, together (``--out``: also as files).  The
difference between the two medians is what a new length costs; the seen-length median
against a fixed-length run is what the symbolic-shape path costs.
"""
from __future__ import annotations

import argparse
import cProfile
import inspect
import io
import os
import pstats
import statistics
import time

import torch

import pyfuser.dynamo  # noqa: F401  (registers the "pyfuser" backend)
from pyfuser.bench import zoo, zoo_bench


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="bert")
    p.add_argument("--new", type=int, default=8, help="steps at lengths not seen before")
    p.add_argument("--seen", type=int, default=6, help="steps at lengths already met")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--out", default="")
    a = p.parse_args()
    spec = (zoo_bench.TINY if a.tiny else zoo_bench.FULL)[a.model]
    built = zoo.build(a.model, 0, **spec["sizes"])
    seq = spec["sizes"].get("seq") or inspect.signature(zoo.BUILDERS[a.model]).parameters["seq"].default
    lo = max(seq // 2, 1)
    if lo + 2 + a.new > seq:
        raise SystemExit(f"varlen_profile: {2 + a.new} lengths from {lo} pass the model's {seq}; fewer --new")
    fresh = list(range(lo, lo + 2 + a.new))
    lengths = fresh + [fresh[2 + i % a.new] for i in range(a.seen)]
    batches = zoo_bench._batches(built, spec["batch"], len(lengths), 1, lengths)
    torch._dynamo.reset()
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, 64)
    run = zoo_bench._Run("pyfuser", built, built.model.state_dict(), a.device, spec["amp"], None, label=a.model)
    profiles = {"new": cProfile.Profile(), "seen": cProfile.Profile()}
    times = {"new": [], "seen": []}
    print("| step | length | kind | ms | Dynamo graphs | pyfuser kernels | Triton binaries |", flush=True)
    print("|---|---|---|---|---|---|---|")
    for i, (n, b) in enumerate(zip(lengths, batches)):
        kind = "warm-up" if i < 2 else ("new" if i < 2 + a.new else "seen")
        b = run._on_device(b)
        before = zoo_bench._counters()
        if run.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        prof = profiles.get(kind)
        if prof is not None:
            prof.enable()
        run.model_step(b)
        run.optimizer_step()
        if run.cuda:
            torch.cuda.synchronize()
        if prof is not None:
            prof.disable()
        ms = (time.perf_counter() - t0) * 1e3
        if kind in times:
            times[kind].append(ms)
        d = zoo_bench._delta(zoo_bench._counters(), before)
        print(f"| {i} | {n} | {kind} | {ms:.1f} | {d['graphs']} | {d['kernels_compiled']} | {d['binaries']} |",
              flush=True)
    for kind, prof in profiles.items():
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(a.top)
        text = s.getvalue()
        print(f"\n## cProfile, {kind}-length steps ({len(times[kind])})\n{text}", flush=True)
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, f"varlen_profile_{a.model}_{kind}.txt"), "w") as f:
                f.write(text)
    print("| steps | median ms |\n|---|---|")
    for kind, t in times.items():
        print(f"| {kind} lengths | {statistics.median(t):.1f} |" if t else f"| {kind} lengths | - |")


if __name__ == "__main__":
    main()
