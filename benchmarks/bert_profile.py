"""Where a pyfuser BERT training step spends its time, on the GPU.

    PYTHONPATH=src python benchmarks/bert_profile.py [--batch 64 --seq 128] [--out DIR]

Writes to DIR (default .):
* ``plans.txt``: every fusion's segments and scheduler params (PYFUSER_DUMP=segmented_fusion,
  scheduler_params during the first step);
* ``compile_cprofile.txt``: Python profile of the first step (compilation);
* ``host_cprofile.txt``: Python profile of 3 steps (top functions by own time);
* ``torch_profile.txt``: torch.profiler of one step: CPU ops by self time (synchronizing
  calls show up here) and GPU kernels by time.
It prints the step time (CUDA events), the wall time with a synchronize, and the
summed kernel time, so a host-bound step shows as wall >> kernel time.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch

from pyfuser.bench.bert_bench import _batches, _bert_config, _new_model, cprofiled, training_step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--out", default=".")
    p.add_argument("--no-dropout", action="store_true")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import pyfuser.dynamo  # noqa: F401  (registers the backend)

    config = _bert_config(not args.no_dropout, None)
    torch.manual_seed(0)
    model = _new_model(config).cuda().train()
    model = torch.compile(model, backend="pyfuser", dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = _batches(config, args.batch, args.seq, 12, "cuda", 1)

    step = training_step(model, opt, "cuda", torch.float16)

    def first_step():
        step(*batches[0])

    t0 = time.perf_counter()
    with open(os.path.join(args.out, "plans.txt"), "w") as f, contextlib.redirect_stdout(f):
        os.environ["PYFUSER_DUMP"] = "segmented_fusion,scheduler_params"
        compile_text = cprofiled(first_step, "cumulative", 70)
        os.environ["PYFUSER_DUMP"] = ""
    print(f"first step (compiles): {time.perf_counter() - t0:.1f} s")
    with open(os.path.join(args.out, "compile_cprofile.txt"), "w") as f:
        f.write(compile_text)
    for b in batches[1:3]:
        step(*b)
    torch.cuda.synchronize()

    walls, events = [], []
    for b in batches[3:8]:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        e0.record()
        step(*b)
        e1.record()
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        walls.append((host * 1e3, (time.perf_counter() - t0) * 1e3))
        events.append(e0.elapsed_time(e1))
    print("step: host-side ms (until step returns), wall ms with sync, CUDA-event ms")
    for (h, w), e in zip(walls, events):
        print(f"  {h:8.2f} {w:8.2f} {e:8.2f}")

    def three_steps():
        for b in batches[8:11]:
            step(*b)

    with open(os.path.join(args.out, "host_cprofile.txt"), "w") as f:
        f.write(cprofiled(three_steps, "tottime", 45))

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
        step(*batches[11])
        torch.cuda.synchronize()
    ka = tp.key_averages()
    with open(os.path.join(args.out, "torch_profile.txt"), "w") as f:
        f.write(ka.table(sort_by="self_cpu_time_total", row_limit=45, max_name_column_width=90))
        f.write("\n\n")
        f.write(ka.table(sort_by="self_device_time_total", row_limit=45, max_name_column_width=90))
    kernel_us = sum(e.time_range.elapsed_us() for e in tp.events()
                    if e.device_type == torch.autograd.DeviceType.CUDA)
    print(f"profiled step: summed GPU kernel time {kernel_us / 1e3:.2f} ms")


if __name__ == "__main__":
    main()
