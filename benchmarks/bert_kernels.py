"""BERT layer kernels that the BERT record shows furthest from the copy bandwidth, as
pyfuser receives them from the backend, timed with scheduler overrides on the GPU
(launches replayed under ``do_bench``):

    PYTHONPATH=src:benchmarks python benchmarks/bert_kernels.py

* ``qkv_bias``: the Q, K and V gradients ([batch, heads, seq, 64] read as [batch,
  seq, heads, 64]) copied to [tokens, 768] for the weight GEMMs, with their bias
  gradients (column sums): an outer reduction with three full-size outputs.
"""
from __future__ import annotations

import torch

from pyfuser import DataType, FusionDefinition

B, S, H, D = 64, 128, 12, 64


def qkv_bias(fd):
    ins = [torch.randn(B, H, S, D, dtype=torch.half, device="cuda").permute(0, 2, 1, 3),
           torch.randn(B, S, H * D, dtype=torch.half, device="cuda"),
           torch.randn(B, H, S, D, dtype=torch.half, device="cuda").permute(0, 2, 1, 3)]
    sums = []
    for x in ins:
        t = fd.define_tensor(sizes=list(x.shape), strides=list(x.stride()), dtype=DataType.Half)
        c = fd.ops.set(t)
        if x.dim() == 4:
            c = fd.ops.reshape(c, new_shape=[B, S, H * D])
        fd.add_output(c)
        s = fd.ops.sum(c, dims=[0, 1], dtype=DataType.Float)
        sums.append(fd.ops.cast(fd.ops.cast(s, DataType.Half), DataType.Float))
    for s in sums:
        fd.add_output(s)
    return ins


def gelu_bias(fd):
    """BERT's GELU (erf) backward with its bias gradient: [tokens, 3072] fp16 in twice,
    out once, column sums (the backward's ``f15``)."""
    from pyfuser import DataType as T

    ins = [torch.randn(B, S, 3072, dtype=torch.half, device="cuda") for _ in range(2)]
    dy, x = (fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=T.Half) for _ in range(2))
    xf, dyf = fd.ops.cast(x, T.Float), fd.ops.cast(dy, T.Float)
    cdf = fd.ops.mul(fd.ops.add(fd.ops.erf(fd.ops.mul(xf, 0.7071067811865476)), 1.0), 0.5)
    pdf = fd.ops.mul(fd.ops.exp(fd.ops.mul(fd.ops.mul(xf, xf), -0.5)), 0.3989422804014327)
    dx = fd.ops.cast(fd.ops.mul(dyf, fd.ops.add(cdf, fd.ops.mul(xf, pdf))), T.Half)
    fd.add_output(dx)
    fd.add_output(fd.ops.sum(dx, dims=[0, 1], dtype=T.Float))
    return ins


def col_sum(rows, cols):
    def build(fd):
        from pyfuser import DataType as T

        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=T.Half)
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(x, T.Float), dims=[0]), T.Half))
        return [torch.randn(rows, cols, device="cuda", dtype=torch.float16)]
    return build


def main():
    import sys

    from variants import run

    if sys.argv[1:] == ["qkv_bias"]:  # its kernels 3 times, for a profiler
        with FusionDefinition() as fd:
            inputs = qkv_bias(fd)
        for _ in range(3):
            fd.execute(inputs)
        torch.cuda.synchronize()
        return
    if sys.argv[1:] == ["online"]:
        print("\n".join(online_rows()))
        return

    rows = run("qkv_bias", qkv_bias, [("", {}, [])]
               + [(f"{bk} columns x {bj} rows, {w} warps, split {sp}",
                   {"block_k": bk, "block_j": bj, "num_warps": w, "split": sp}, [])
                  for bk, bj, w, sp in [(32, 32, 4, 32), (64, 32, 4, 32), (64, 16, 4, 32), (32, 32, 2, 32),
                                        (64, 64, 4, 16), (128, 32, 4, 32), (64, 32, 2, 32), (64, 16, 8, 32),
                                        (64, 8, 4, 32), (64, 16, 4, 64), (64, 16, 2, 32), (64, 32, 2, 64),
                                        (32, 32, 4, 64), (32, 16, 2, 32), (128, 16, 4, 32)]])
    print("\n| fusion | variant | us | GB/s | kernels |\n|---|---|---|---|---|")
    print("\n".join(rows))



def online_rows():
    """Wide rows through the online (one-pass statistics) tile: its chunk size, warps
    and a pipelined chunk loop, on the bench cases that take it."""
    from variants import bench_build, pipelined, run

    rows = []
    for name in ("log_softmax_logsum", "log_softmax_sub", "softmax_30522_bf16", "log_softmax_50257_bf16",
                 "cross_entropy_bf16"):
        for v in [("", {}, []), ("2 stages", {}, pipelined(2)),
                  ("4096 x 8 warps", {"block_j": 4096, "num_warps": 8}, []),
                  ("4096 x 8 warps, 2 stages", {"block_j": 4096, "num_warps": 8}, pipelined(2))]:
            try:
                rows += run(name, bench_build(name), [v])
            except Exception as err:  # an override a kernel of the case cannot take
                rows.append(f"| {name} | {v[0]} | failed: {type(err).__name__} | | |")
    return rows


if __name__ == "__main__":
    main()
