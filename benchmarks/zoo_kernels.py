"""Which pyfuser kernel is which region of a zoo model, and how near the copy
bandwidth each runs (GPU).

    PYTHONPATH=src:benchmarks python benchmarks/zoo_kernels.py llama --layers 3 [--out DIR]

The model is built at the zoo bench's full width (``pyfuser.bench.zoo_bench.FULL``)
with ``--layers`` layers (layer 0 often differs from the rest; three show both kinds).
``pyfuser.dynamo.explain`` lists every region of the forward and backward graphs
with its fusion ids, segments (scheduler and outputs) and last source line; then one
training step (CUDA graphs off, so the launches are recorded) gives, per pyfuser
kernel, its calls, time per call, MB its tensor arguments address per call and the
GB/s that makes.  A kernel far below the device's copy bandwidth is the one to look
at; its name ``pyfuser_f<id>_k<n>`` leads to the fusion id in the region list.
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
    p.add_argument("--out", default=None, help="also write the text here (DIR/zoo_kernels_MODEL.txt)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a GPU (kernel times come from the CUDA profiler)")
    os.environ["PYFUSER_CUDA_GRAPHS"] = "0"  # launches are recorded outside graph replays
    import pyfuser.dynamo as pd
    from pyfuser.bench import zoo, zoo_bench
    from pyfuser.bench.step_profile import kernel_traffic, profile_step, pyfuser_kernel_rows

    full = zoo_bench.FULL[args.model]
    built = getattr(zoo, args.model)(**dict(full["sizes"], layers=args.layers))
    model = built.model.cuda()
    batch = {k: v.cuda() for k, v in built.batch(full["batch"], torch.Generator().manual_seed(0)).items()}
    lines = []
    with torch.autocast("cuda", dtype=full["amp"]):
        e = pd.explain(model, **batch)
    for g in e.graphs:
        lines.append(f"== {g.name}")
        for r in g.regions:
            segs = "; ".join(f"{s.scheduler}: {', '.join(s.outputs)[:60]}" for s in r.segments)
            lines.append(f"  fusion {', '.join(map(str, r.fusion_ids))} [{segs}] {(r.sources[-1] if r.sources else '')[-70:]}")
    compiled = torch.compile(model, backend="pyfuser")

    def step():
        with torch.autocast("cuda", dtype=full["amp"]):
            loss = zoo.loss(compiled(**batch))
        loss.backward()
        model.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    traffic = kernel_traffic(step)
    prof = profile_step({"step": step}, top=max(args.top, 60))
    rows = sorted(pyfuser_kernel_rows(prof["top_other"], traffic), key=lambda r: -r["ms"])[:args.top]
    lines.append(f"{'kernel':22s} {'calls':>5s} {'ms/call':>8s} {'MB/call':>9s} {'GB/s':>7s}")
    for r in rows:
        lines.append(f"{r['name']:22s} {r['calls']:5d} {r['ms'] / r['calls']:8.3f} {r['mb'] / r['calls']:9.1f} "
                     f"{r['gbps'] or 0:7.0f}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"zoo_kernels_{args.model}.txt"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
