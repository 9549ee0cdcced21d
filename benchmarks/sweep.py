"""Parameter sweep for one fusion on the GPU: time, registers and spills per variant.

    PYTHONPATH=src python benchmarks/sweep.py
Each variant forces scheduler params through ``pyfuser.schedulers.override``; the
table shows what the heuristics should pick.
"""
from __future__ import annotations

import torch
import triton

from pyfuser import FusionDefinition
from pyfuser.bench.seeds import SEEDS
from pyfuser.runtime import executor
from pyfuser.schedulers import override


def stats(recorded):
    out = []
    for fn, grid, args, kw in recorded:
        for dev_cache in getattr(fn, "device_caches", {}).values():
            for k in dev_cache[0].values():
                out.append(f"{k.n_regs}/{k.n_spills}")
    return ",".join(out[-1:])


def run_case(name, sizes, variants):
    case = SEEDS[name]
    inputs = case.make_inputs(sizes, "cuda")
    nbytes = None
    for ov in variants:
        with FusionDefinition() as fd:
            case.build(fd, *sizes)
        with override(**ov):
            fd.execute(inputs)
            executor.RECORD_LAUNCHES = []
            out = fd.execute(inputs)
            rec, executor.RECORD_LAUNCHES = executor.RECORD_LAUNCHES, None
        if nbytes is None:
            nbytes = sum(t.numel() * t.element_size() for t in inputs)
            nbytes += sum(o.numel() * o.element_size() for o in out if o.data_ptr() != inputs[0].data_ptr())

        def replay():
            for fn, grid, args, kw in rec:
                fn[grid](*args, **kw)

        ms = triton.testing.do_bench(replay, return_mode="median")
        print(f"| {name} {sizes} | {ov} | {ms:.3f} | {nbytes / ms / 1e6:.0f} | {stats(rec)} |", flush=True)


def main():
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
    print(f"copy {2 * x.numel() * 4 / ms / 1e6:.0f} GB/s")
    print("| case | params | ms | GB/s | regs/spills |\n|---|---|---|---|---|")
    P = dict(persistent=True, block_k=1, block_j=32768)
    M = dict(persistent=False, block_k=1)
    run_case("log_softmax_sub", (8192, 30522), [
        {}, dict(P, num_warps=32), dict(P, num_warps=16),
        dict(M, block_j=8192, num_warps=16), dict(M, block_j=8192, num_warps=8), dict(M, block_j=4096, num_warps=8),
        dict(M, block_j=4096, num_warps=4), dict(M, block_j=2048, num_warps=4), dict(M, block_j=16384, num_warps=16),
    ])
    run_case("log_softmax_sub", (8192, 4096), [
        {}, dict(persistent=True, block_k=1, block_j=4096, num_warps=8), dict(persistent=True, block_k=1, block_j=4096, num_warps=16),
        dict(persistent=True, block_k=2, block_j=4096, num_warps=16), dict(M, block_j=2048, num_warps=4),
    ])
    run_case("log_softmax_sub", (65536, 1001), [
        {}, dict(persistent=True, block_k=1, block_j=1024, num_warps=4), dict(persistent=True, block_k=2, block_j=1024, num_warps=8),
        dict(persistent=True, block_k=4, block_j=1024, num_warps=8), dict(persistent=True, block_k=1, block_j=1024, num_warps=2),
    ])
    run_case("log_softmax_full", (64, 128, 30522), [{}, dict(M, block_j=4096, num_warps=4)])
    run_case("bert_softmax_dropout", (64, 12, 128), [
        {}, dict(block_k=8, num_warps=4), dict(block_k=16, num_warps=8), dict(block_k=32, num_warps=16),
        dict(block_k=4, num_warps=2), dict(block_k=8, num_warps=2),
    ])


if __name__ == "__main__":
    main()
