"""The memory copies and fills of a zoo model's training step, and who made them (GPU).

    PYTHONPATH=src python benchmarks/zoo_copies.py gpt2 --layers 2 [--impl inductor]

The bench's "copy kernels" column (``step_profile.kernel_class``: memcpy and memset)
says how long they take, not why they are there.  This builds the model at the zoo
bench's full width with ``--layers`` layers, runs five training steps (forward and
backward; CUDA graphs as configured, ``PYFUSER_CUDA_GRAPHS=0`` to turn them off), and
profiles one more.  Each copy or fill is grouped by its kernel, bytes per call, the
CUDA runtime call that issued it and the innermost Python frames around that call
(pyfuser's, ATen's, transformers'), heaviest first.  Copies inside a CUDA graph
replay show ``cudaGraphLaunch`` as their runtime call.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

import torch

FRAMES = ("pyfuser", "aten::", "transformers")  # the frames worth naming
DEPTH = 4


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a zoo model: bert, gpt2, llama, t5, vit")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--impl", default="pyfuser", choices=("pyfuser", "inductor"))
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a GPU (copies come from the CUDA profiler)")
    from torch.profiler import ProfilerActivity, profile

    from pyfuser.bench import zoo_bench

    model, batch, amp = zoo_bench.full_width(args.model, args.layers)
    if args.impl == "pyfuser":
        import pyfuser.dynamo  # noqa: F401 - registers the backend
    step = zoo_bench.training_step(model, torch.compile(model, backend=args.impl), batch, amp)
    for _ in range(5):  # compiles, warm-up calls, CUDA graph captures
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        step()
        torch.cuda.synchronize()
    rows = copies(prof)
    total = sum(ms for _, ms in rows.values())
    graphs = os.environ.get("PYFUSER_CUDA_GRAPHS", "1")
    print(f"== {args.model} {args.impl} layers={args.layers} cuda graphs={graphs}: memcpy/memset {total:.3f} ms")
    for (kernel, nbytes, call, frames), (n, ms) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"  {n:4d} x {nbytes / 1e6:9.2f} MB {ms:7.3f} ms  {kernel} | {call} | {frames}")
    return 0


def copies(prof) -> dict:
    """(kernel, bytes per call, runtime call, frames) -> [calls, ms] of the profile's
    memcpy and memset events, read from its Chrome trace (which links each GPU event
    to the runtime call that issued it, and that call to the frames around it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    frames = collections.defaultdict(list)
    for e in events:
        if e.get("cat") in ("python_function", "cpu_op") and "dur" in e:
            frames[e["tid"]].append(e)
    rows: dict = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("cat") not in ("gpu_memcpy", "gpu_memset"):
            continue
        call = calls.get(e["args"].get("correlation"))
        key = (e["name"][:40], e["args"].get("bytes", -1), call["name"] if call else "?", _frames(call, frames))
        rows[key][0] += 1
        rows[key][1] += e["dur"] / 1e3
    return rows


def _frames(call, frames) -> str:
    """The innermost named frames around a runtime call, innermost first."""
    if call is None:
        return "?"
    around = sorted((e for e in frames[call["tid"]] if e["ts"] <= call["ts"] <= e["ts"] + e["dur"]),
                    key=lambda e: e["ts"])
    named = [e["name"][-70:] for e in around if any(s in e["name"] for s in FRAMES)]
    return " < ".join(named[::-1][:DEPTH])


if __name__ == "__main__":
    sys.exit(main())
