"""Parameter sweep for one fusion on the GPU: time, registers and spills per variant.

    PYTHONPATH=src python benchmarks/sweep.py
Each variant forces scheduler params through ``pyfuser.schedulers.Choices``; the
table shows what the heuristics should pick.
"""
from __future__ import annotations

import torch
import triton

from pyfuser import FusionDefinition
from pyfuser.bench.harness import execute_recorded, moved_bytes
from pyfuser.bench.seeds import SEEDS
from pyfuser.schedulers import Choices


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
        with Choices(**ov):
            fd.execute(inputs)
            out, rec, _ = execute_recorded(fd, inputs)
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
    O = dict(persistent=False)
    run_custom("sum_dim0 [16384,4096] fp16", sum_dim0, [
        dict(O, block_k=128, block_j=64, num_warps=4), dict(O, block_k=32, block_j=64, num_warps=4),
        dict(O, block_k=8, block_j=256, num_warps=4), dict(O, block_k=16, block_j=256, num_warps=8),
        dict(O, block_k=32, block_j=256, num_warps=8), dict(O, block_k=64, block_j=128, num_warps=8),
        dict(O, block_k=16, block_j=512, num_warps=8), dict(O, block_k=32, block_j=128, num_warps=4),
    ])
    M = dict(persistent=False, block_k=1)
    run_bench_case("softmax_30522_bf16", [{}, dict(M, block_j=8192, num_warps=16), dict(M, block_j=4096, num_warps=8),
                                          dict(persistent=True, block_k=1, block_j=32768, num_warps=16)])
    run_bench_case("log_softmax_50257_bf16", [{}, dict(M, block_j=4096, num_warps=8), dict(M, block_j=16384, num_warps=16),
                                              dict(persistent=True, block_k=1, block_j=65536, num_warps=32)])
    run_bench_case("bias_gelu_tanh_fp16", [{}, dict(block=2048, num_warps=8), dict(block=4096, num_warps=8)])
    run_bench_case("bert_softmax_dropout_noview", [{}])


def run_bench_case(name, variants):
    from pyfuser.bench import cases
    c = cases.BY_NAME[name]
    sizes = c.sizes(1.0)

    def build(fd):
        c.build(fd, sizes)
        return [x for x in c.make_inputs(sizes, "cuda", None)]

    run_custom(name, build, variants)


def sum_dim0(fd):
    from pyfuser import DataType
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
    fd.add_output(fd.ops.sum(x, dims=[0]))
    return [torch.randn(16384, 4096, device="cuda", dtype=torch.float16)]


def softmax_only(fd):
    from pyfuser import DataType
    x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.Half)
    xf = fd.ops.cast(x, DataType.Float)
    m = fd.ops.max(xf, dims=[3])
    e = fd.ops.exp(fd.ops.sub(xf, fd.ops.broadcast_in_dim(m, shape=[64, 12, 128, 128], broadcast_dims=[0, 1, 2])))
    s = fd.ops.sum(e, dims=[3])
    y = fd.ops.div(e, fd.ops.broadcast_in_dim(s, shape=[64, 12, 128, 128], broadcast_dims=[0, 1, 2]))
    fd.add_output(y)
    fd.add_output(fd.ops.cast(y, DataType.Half))
    return [torch.randn(64, 12, 128, 128, device="cuda", dtype=torch.float16)]


def dropout_only(fd):
    from pyfuser import DataType
    x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.Float)
    keep = fd.ops.gt(fd.ops.rand_like(x), 0.1)
    fd.add_output(keep)
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.mul(fd.ops.cast(keep, DataType.Float), x), 1.11111), DataType.Half))
    return [torch.randn(64, 12, 128, 128, device="cuda", dtype=torch.float32)]


def measure(build, ov):
    """(median ms, bytes moved, recorded launches) of the fusion ``build(fd)`` defines
    (returning its inputs), with the scheduler overrides ``ov``: its launches replayed
    under ``do_bench``."""
    with FusionDefinition() as fd:
        inputs = build(fd)
    with Choices(**ov):
        fd.execute(inputs)
        out, rec, _ = execute_recorded(fd, inputs)
    nbytes = moved_bytes(inputs, out)  # the bench's count: an expanded or aliased output moves its storage only

    def replay():
        for fn, grid, args, kw in rec:
            fn[grid](*args, **kw)

    return triton.testing.do_bench(replay, return_mode="median"), nbytes, rec


def run_custom(name, build, variants):
    for ov in variants:
        ms, nbytes, rec = measure(build, ov)
        print(f"| {name} | {ov} | {ms:.3f} | {nbytes / ms / 1e6:.0f} | {stats(rec)} |", flush=True)


if __name__ == "__main__":
    main()
