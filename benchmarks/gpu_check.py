"""GPU check of the code generator: the report's fusions at full size, and RNG bits.

For each seed fusion: kernels launched per execute, median time (L2 flushed),
effective GB/s, registers/spills, and whether the outputs match the reference
executor run on the same GPU with the same random state.  Then one small random
fusion with an explicit seed runs on CPU (interpreter) and GPU: the bits must match.

    PYTHONPATH=src python benchmarks/gpu_check.py
"""
from __future__ import annotations

import sys

import torch
import triton

import pyfuser
from pyfuser import DataType, FusionDefinition
from pyfuser.bench.seeds import SEEDS
from pyfuser.reference import run_reference
from pyfuser.bench.harness import execute_recorded, kernel_stats
from pyfuser.runtime import executor


def copy_gbps():
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
    return 2 * x.numel() * 4 / ms / 1e6


def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


def main():
    copy = copy_gbps()
    print(f"device {torch.cuda.get_device_name()} copy {copy:.0f} GB/s", flush=True)
    rows = []
    for name, case in SEEDS.items():
        with FusionDefinition() as fd:
            case.build(fd, *case.full_sizes)
        inputs = case.make_inputs(case.full_sizes, "cuda")
        torch.manual_seed(1)
        out = fd.execute(inputs)
        torch.manual_seed(1)
        out, recorded, launches = execute_recorded(fd, inputs)
        torch.manual_seed(1)
        rs, _ = executor.make_rng_state(fd.ir, torch.device("cuda"))
        ref = run_reference(fd.ir, inputs, rng_state=rs)
        errs = []
        for o, r in zip(out, ref):
            if o.dtype == torch.bool:
                errs.append(float((o != r).float().mean()))
            else:
                errs.append(float((o.float() - r.float()).abs().max()))
        ok = all(e <= 2e-2 for e in errs)
        aliased = [o.data_ptr() == inputs[0].data_ptr() for o in out]
        moved = nbytes(inputs) + sum(nbytes([o]) for o, a in zip(out, aliased) if not a)
        exec_ms = triton.testing.do_bench(lambda: fd.execute(inputs), return_mode="median")

        def replay():
            for fn, grid, args, kw in recorded:
                fn[grid](*args, **kw)

        ms = triton.testing.do_bench(replay, return_mode="median")
        eager_ms = triton.testing.do_bench(lambda: case.eager(*inputs, *case.full_sizes), return_mode="median")
        gbps = moved / ms / 1e6
        ks = [(k["name"], k["regs"], k["spills"]) for k in kernel_stats(recorded)]
        rows.append((name, launches, ms, gbps, 100 * gbps / copy, eager_ms, ok, errs, ks, exec_ms))
        print(rows[-1], flush=True)
    # RNG: CPU interpreter vs GPU, explicit seed
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        s = fd.define_scalar(None, dtype=DataType.Int)
        o = fd.define_scalar(None, dtype=DataType.Int)
        fd.add_output(fd.ops.rand_like(t, rng_seed=s, rng_offset=o))
        fd.add_output(fd.ops.randn_like(t, rng_seed=s, rng_offset=o))
    x = torch.randn(37, 129)
    cpu = fd.execute([x, 123456789, 8])
    gpu = fd.execute([x.cuda(), 123456789, 8])
    same_u = torch.equal(cpu[0], gpu[0].cpu())
    max_n = float((cpu[1] - gpu[1].cpu()).abs().max())
    print("\n| fusion | kernels | kernel ms | GB/s | % of copy | execute() ms | eager ms | matches reference | max err | regs/spills |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, k, ms, g, pct, ems, ok, errs, ks, xms in rows:
        rs_ = ", ".join(f"{r}/{s}" for _, r, s in ks)
        print(f"| {name} | {k} | {ms:.3f} | {g:.0f} | {pct:.0f}% | {xms:.3f} | {ems:.3f} | {ok} | {max(errs):.2e} | {rs_} |")
    print(f"\nRNG CPU-interpreter vs GPU: uniform bit-identical={same_u}, normal max diff={max_n:.2e}")
    print(pyfuser.cache_info())
    return 0 if all(r[6] for r in rows) and same_u else 1


if __name__ == "__main__":
    sys.exit(main())
