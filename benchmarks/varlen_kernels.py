"""Where a zoo model's step at one sequence length differs between the symbolic graph
(compiled once for every length, as a variable-length run uses it) and a graph
compiled for that length alone (GPU).

    PYTHONPATH=src python benchmarks/varlen_kernels.py bert --layers 4 --length 74

The model is built at the zoo bench's full width with ``--layers`` layers.  First it
is compiled through the backend and trained at two other lengths (Dynamo's automatic
dynamic shapes make the second compile symbolic), then at ``--length`` until its
steps replay; then Dynamo is reset and the same model is compiled at ``--length``
alone.  For each: the median step (CUDA events, CUDA graphs as the bench runs them),
the kernel time per class of one profiled step, and the heaviest non-matmul and
matmul kernels, so a gap between the two steps shows up as kernels or as time
between them.
"""
from __future__ import annotations

import argparse
import statistics

import torch


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a zoo model with a sequence length: bert, gpt2, llama, t5")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--length", type=int, default=74)
    p.add_argument("--others", default="70,72", help="the two lengths trained first (the second compiles symbolic)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a GPU (kernel times come from the CUDA profiler)")
    import pyfuser.dynamo  # noqa: F401 - registers the backend
    from pyfuser.bench import zoo_bench
    from pyfuser.bench.step_profile import profile_step

    model, batch, amp = zoo_bench.full_width(args.model, args.layers)
    cut = lambda n: {k: v[:, :n].contiguous() if v.dim() == 2 else v for k, v in batch.items()}  # noqa: E731
    results = {}
    for label, first in (("symbolic", [int(x) for x in args.others.split(",")]), ("fixed", [])):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="pyfuser")
        for n in first:
            zoo_bench.training_step(model, compiled, cut(n), amp)()
        step = zoo_bench.training_step(model, compiled, cut(args.length), amp)
        for _ in range(4):  # straight lines and CUDA graphs are built at the first meetings
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        results[label] = (statistics.median(times), profile_step({"step": step}, top=args.top), graphs)
    lines = [f"{args.model}, {args.layers} layers, length {args.length} (after {args.others} for the symbolic graph)"]
    for label, (ms, prof, graphs) in results.items():
        k = prof["kernel_ms"]
        lines.append(f"== {label} ({graphs} Dynamo graphs compiled so far): median step {ms:.2f} ms; kernels {sum(k.values()):.2f} ms (matmul {k['matmul']:.2f}, "
                     f"copy {k['copy']:.2f}, other {k['other']:.2f}), {prof['gpu_kernels']} kernels")
        for kind in ("top_other", "top_matmul"):
            for r in prof[kind]:
                lines.append(f"  {r['calls']:4d} {r['ms']:8.3f}  {r['name'][:100]}")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
