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


def main():
    from variants import run

    rows = run("qkv_bias", qkv_bias, [("", {}, [])]
               + [(f"{bk} columns x {bj} rows, split {sp}, {st} stages",
                   {"block_k": bk, "block_j": bj, "split": sp, "stages": st}, [])
                  for bk, bj, sp, st in [(64, 32, 32, 3), (64, 16, 32, 3), (32, 64, 32, 3), (32, 32, 16, 3),
                                         (32, 32, 64, 3), (32, 32, 32, 1), (64, 32, 32, 1), (128, 16, 32, 1),
                                         (64, 64, 16, 1), (32, 16, 32, 3)]])
    print("\n| fusion | variant | us | GB/s | kernels |\n|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
