"""Which pyfuser kernel is which region of a zoo model, and how near the copy
bandwidth each runs (GPU).

    PYTHONPATH=src python benchmarks/zoo_kernels.py llama --layers 3 [--out DIR]

The model is built at the zoo bench's full width (``pyfuser.bench.zoo_bench.FULL``)
with ``--layers`` layers (layer 0 often differs from the rest; three show both kinds).
``pyfuser.dynamo.explain`` lists every region of the forward and backward graphs
with its fusion ids, segments (scheduler and outputs) and last source line; then one
training step (CUDA graphs off, so the launches are recorded) gives, per pyfuser
kernel, its calls, time per call, MB its tensor arguments address per call and the
GB/s that makes.  A kernel far below the device's copy bandwidth is the one to look
at; its name ``pyfuser_f<id>_k<n>`` leads to the fusion id in the region list.
``--compare`` then trains the same model under torch.compile's default backend and
lists its non-matmul kernels too, with both implementations' non-matmul totals: where
pyfuser's time is not lower, the two lists side by side say which work it is.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a zoo model: bert, gpt2, llama, t5, vit")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--top", type=int, default=40, help="kernels listed, heaviest first")
    p.add_argument("--compare", action="store_true", help="also list torch.compile's non-matmul kernels")
    p.add_argument("--out", default=None, help="also write the text here (DIR/zoo_kernels_MODEL.txt)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a GPU (kernel times come from the CUDA profiler)")
    os.environ["PYFUSER_CUDA_GRAPHS"] = "0"  # launches are recorded outside graph replays
    import pyfuser.dynamo as pd
    from pyfuser.bench import zoo_bench
    from pyfuser.bench.step_profile import kernel_traffic, profile_step, pyfuser_kernel_rows

    model, batch, amp = zoo_bench.full_width(args.model, args.layers)
    lines = []
    with torch.autocast("cuda", dtype=amp):
        e = pd.explain(model, **batch)
    for g in e.graphs:
        lines.append(f"== {g.name}")
        for r in g.regions:
            segs = "; ".join(f"{s.scheduler}: {', '.join(s.outputs)[:60]}" for s in r.segments)
            lines.append(f"  fusion {', '.join(map(str, r.fusion_ids))} [{segs}] {(r.sources[-1] if r.sources else '')[-70:]}")
    step = _warm(zoo_bench.training_step(model, torch.compile(model, backend="pyfuser"), batch, amp))
    traffic = kernel_traffic(step)
    prof = profile_step({"step": step}, top=max(args.top, 60))
    rows = sorted(pyfuser_kernel_rows(prof["top_other"], traffic), key=lambda r: -r["ms"])[:args.top]
    lines.append(f"pyfuser non-matmul kernel ms (fwd+bwd, copies included): {_non_matmul(prof):.3f}")
    lines.append(f"{'kernel':22s} {'calls':>5s} {'ms/call':>8s} {'MB/call':>9s} {'GB/s':>7s}")
    for r in rows:
        lines.append(f"{r['name']:22s} {r['calls']:5d} {r['ms'] / r['calls']:8.3f} {r['mb'] / r['calls']:9.1f} "
                     f"{r['gbps'] or 0:7.0f}")
    lines.append("ATen's non-matmul kernels in the same step (work outside pyfuser's regions):")
    lines += [_kernel_line(r) for r in prof["top_other"][:args.top] if r["name"] not in traffic]
    if args.compare:
        torch._dynamo.reset()
        lines += _inductor_rows(model, batch, amp, args.top)
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"zoo_kernels_{args.model}.txt"), "w") as f:
            f.write(text + "\n")
    return 0


def _warm(step):
    """``step`` after three runs (compiles, warm-up calls), the GPU idle."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    return step


def _non_matmul(prof) -> float:
    return prof["kernel_ms"]["other"] + prof["kernel_ms"]["copy"]


def _kernel_line(row) -> str:
    return f"{row['calls']:5d} {row['ms'] / row['calls']:8.3f}  {row['name'][:110]}"


def _inductor_rows(model, batch, amp, top) -> list:
    """torch.compile's non-matmul kernels of one training step of ``model``, heaviest
    first, with its non-matmul total."""
    from pyfuser.bench import zoo_bench
    from pyfuser.bench.step_profile import profile_step

    prof = profile_step({"step": _warm(zoo_bench.training_step(model, torch.compile(model), batch, amp))}, top=top)
    return [f"torch.compile non-matmul kernel ms (fwd+bwd, copies included): {_non_matmul(prof):.3f}",
            f"{'calls':>5s} {'ms/call':>8s}  kernel"] + [_kernel_line(r) for r in prof["top_other"]]


if __name__ == "__main__":
    sys.exit(main())
