"""BERT's masked-LM head (vocabulary 30522, 8192 tokens, fp16) as the backend hands it
to pyfuser, against rewritten graphs: each fusion timed on the GPU (launches replayed
under ``do_bench``) and the rewritten results checked against the current ones.

    PYTHONPATH=src:benchmarks python benchmarks/mlm_head.py           # every variant, timed
    PYTHONPATH=src:benchmarks python benchmarks/mlm_head.py FUSION    # its kernels 3 times (for ncu)

* forward, now: a contiguous copy of the padded decoder's logits (a pointwise kernel
  reading the [B, S, V] view) beside the cross-entropy statistics (a row kernel
  reading the [B * S, V] view of the same memory);
* forward, rewritten: the copy taken from the [B * S, V] view, so one row kernel
  reads the logits once, writes the copy in its first pass and keeps the statistics;
* backward, now: log-softmax backward (a row kernel), then the logits' tangent added,
  padded for the decoder's GEMMs and summed for the bias gradient (two kernels);
* backward, rewritten: the tangent added and the result padded in the log-softmax
  backward's fusion, and the bias gradient summed from the padded copy.
"""
from __future__ import annotations

import torch

from pyfuser import DataType, FusionDefinition

from sweep import measure

R, V, VP, B, S = 8192, 30522, 30528, 64, 128
HALF = DataType.Half
DEV = "cuda"


def _logits_view(dev):
    base = torch.randn(R, VP, device=dev, dtype=torch.half) * 4
    return base[:, :V]


def _labels(dev):
    g = torch.randint(0, V, (R,), device=dev)
    return torch.where(torch.rand(R, device=dev) < 0.15, g, torch.full_like(g, -100))


def _ce_stats(fd, T1, T2, T3, T4):
    T6 = fd.ops.cast(T1, dtype=DataType.Float)
    T7 = fd.ops.max(T6, dims=[1], keepdim=True)
    T8 = fd.ops.sub(T6, T7)
    T11 = fd.ops.log(fd.ops.sum(fd.ops.exp(T8), dims=[1], keepdim=True))
    T14 = fd.ops.ne(T2, fd.define_scalar(-100, dtype=DataType.Int))
    T16 = fd.ops.broadcast_in_dim(fd.ops.where(T14, T2, T3), shape=[R, 1], broadcast_dims=[0])
    T18 = fd.ops.squeeze(fd.ops.gather(fd.ops.sub(T8, T11), T16, dim=1), dims=[1])
    T20 = fd.ops.where(T14, fd.ops.neg(T18), T4)
    return T7, T11, T20


def forward(rewritten):
    def build(fd):
        dev = DEV
        x = _logits_view(dev)
        if not rewritten:
            T0 = fd.define_tensor(shape=[B, S, V], contiguity=[True, False, True], dtype=HALF)
        T1 = fd.define_tensor(shape=[R, V], contiguity=[False, True], dtype=HALF)
        T2 = fd.define_tensor(shape=[R], contiguity=[True], dtype=DataType.Int)
        T3 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Int)
        T4 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        fd.add_output(fd.ops.set(T1 if rewritten else T0))
        for o in _ce_stats(fd, T1, T2, T3, T4):
            fd.add_output(o)
        rest = [x, _labels(dev), torch.tensor(0, device=dev), torch.tensor(0.0, device=dev)]
        return rest if rewritten else [x.view(B, S, V)] + rest
    return build


def _lsm_bwd(fd, logits, labels, stats_max, stats_lse, one_hot_sum=True):
    T0 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
    T3 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
    T8 = fd.ops.div(fd.ops.neg(T0), T1)
    iota = fd.ops.iota(V, fd.define_scalar(0, dtype=DataType.Int), fd.define_scalar(1, dtype=DataType.Int),
                       dtype=DataType.Int)
    cols = fd.ops.broadcast_in_dim(iota, shape=[1, V], broadcast_dims=[1])
    hit = fd.ops.bitwise_and(fd.ops.eq(cols, labels), fd.ops.ne(labels, fd.define_scalar(-100, dtype=DataType.Int)))
    T17 = fd.ops.where(hit, T8, T3)
    p = fd.ops.exp(fd.ops.sub(fd.ops.sub(fd.ops.cast(logits, dtype=DataType.Float), stats_max), stats_lse))
    if one_hot_sum:  # as traced: the one-hot row summed over the vocabulary
        T22 = fd.ops.sum(T17, dims=[1], keepdim=True)
    else:  # as ``one_hot.py`` rewrites it: one value per row
        lab = fd.ops.bitwise_and(fd.ops.ge(labels, fd.define_scalar(0, dtype=DataType.Int)),
                                 fd.ops.lt(labels, fd.define_scalar(V, dtype=DataType.Int)))
        lab = fd.ops.bitwise_and(lab, fd.ops.ne(labels, fd.define_scalar(-100, dtype=DataType.Int)))
        T22 = fd.ops.where(lab, T8, T3)
    return fd.ops.cast(fd.ops.sub(T17, fd.ops.mul(p, T22)), dtype=HALF)


def _bwd_inputs(dev):
    x = torch.randn(R, V, device=dev, dtype=torch.half) * 4
    xf = x.float()
    m = xf.amax(1, keepdim=True)
    lse = (xf - m).exp().sum(1, keepdim=True).log()
    return x, _labels(dev).view(R, 1), m, lse


def backward_lsm():
    def build(fd):
        x, lab, m, lse = _bwd_inputs(DEV)
        L = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Int)
        X = fd.define_tensor(shape=[R, V], contiguity=[True, True], dtype=HALF)
        M = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Float)
        E = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Float)
        fd.add_output(_lsm_bwd(fd, X, L, M, E))
        return [lab, x, m, lse] + [torch.tensor(v, device=DEV) for v in (1.0, 1200.0, 0.0)]
    return build


def backward_add_pad_sum():
    def build(fd):
        T0 = fd.define_tensor(shape=[B, S, V], contiguity=[True, True, True], dtype=HALF)
        T1 = fd.define_tensor(shape=[B, S, V], contiguity=[True, True, True], dtype=HALF)
        T2 = fd.ops.add(T0, T1)
        fd.add_output(fd.ops.pad(fd.ops.reshape(T2, new_shape=[R, V]), pad_widths=[0, VP - V, 0, 0],
                                 value=fd.define_scalar(0.0, dtype=DataType.Double)))
        fd.add_output(fd.ops.cast(fd.ops.sum(T2, dims=[0, 1]), dtype=DataType.Float))
        return [torch.randn(B, S, V, device=DEV, dtype=torch.half) for _ in range(2)]
    return build


def _backward_inputs(fd):
    """The saved logits and statistics, the labels, the logits' tangent and the three
    scalars of the log-softmax backward: (tensors, L, X, M, E, T) with the definitions."""
    x, lab, m, lse = _bwd_inputs(DEV)
    L = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Int)
    X = fd.define_tensor(shape=[R, V], contiguity=[True, True], dtype=HALF)
    M = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Float)
    E = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Float)
    T = fd.define_tensor(shape=[R, V], contiguity=[True, True], dtype=HALF)
    t = torch.randn(R, V, device=DEV, dtype=torch.half)
    return [lab, x, m, lse, t] + [torch.tensor(v, device=DEV) for v in (1.0, 1200.0, 0.0)], L, X, M, E, T


def _padded(fd, y):
    return fd.ops.pad(y, pad_widths=[0, VP - V, 0, 0], value=fd.define_scalar(0.0, dtype=DataType.Double))


def backward_region():
    """The backward region the backend now makes: one-hot sum rewritten, the tangent
    added and the sum padded, the bias gradient summed, in one fusion."""
    def build(fd):
        tensors, L, X, M, E, T = _backward_inputs(fd)
        y = fd.ops.add(T, _lsm_bwd(fd, X, L, M, E, one_hot_sum=False))
        fd.add_output(_padded(fd, y))
        fd.add_output(fd.ops.cast(fd.ops.sum(y, dims=[0]), dtype=DataType.Float))
        return tensors
    return build


def backward_rewritten(one_hot_sum=True):
    def build(fd):
        tensors, L, X, M, E, T = _backward_inputs(fd)
        fd.add_output(_padded(fd, fd.ops.add(T, _lsm_bwd(fd, X, L, M, E, one_hot_sum))))
        return tensors
    return build


def bias_from_padded():
    def build(fd):
        T0 = fd.define_tensor(shape=[R, V], contiguity=[False, True], dtype=HALF)
        fd.add_output(fd.ops.cast(fd.ops.sum(T0, dims=[0]), dtype=DataType.Float))
        return [torch.randn(R, VP, device=DEV, dtype=torch.half)[:, :V]]
    return build


NO_EVICT_LAST = (r", eviction_policy='evict_last'", "")


FUSIONS = {"forward_now": forward(False), "forward": forward(True), "lsm_backward_now": backward_lsm(),
            "add_pad_sum_now": backward_add_pad_sum(), "lsm_backward": backward_rewritten(),
            "lsm_backward_pad": backward_rewritten(False), "backward_region": backward_region(),
            "bias_sum": bias_from_padded()}


def main():
    import sys

    from variants import pipelined, run

    if len(sys.argv) > 1:  # one fusion's kernels, 3 executes, for a profiler
        with FusionDefinition() as fd:
            inputs = FUSIONS[sys.argv[1]](fd)
        for _ in range(3):
            fd.execute(inputs)
        torch.cuda.synchronize()
        return

    rows = []
    rows += run("forward now", forward(False), [("", {}, [])])
    rows += run("forward rewritten", forward(True),
                [("", {}, []), ("2 stages", {}, pipelined(2)), ("3 stages", {}, pipelined(3)),
                 ("no evict_last", {}, [NO_EVICT_LAST]), ("4096 x 8 warps", {"block_j": 4096, "num_warps": 8}, []),
                 ("4096 x 8 warps, 2 stages", {"block_j": 4096, "num_warps": 8}, pipelined(2))])
    rows += run("backward now: log-softmax backward", backward_lsm(), [("", {}, [])])
    rows += run("backward now: add + pad + bias sum", backward_add_pad_sum(), [("", {}, [])])
    rows += run("backward rewritten: log-softmax backward + add + pad", backward_rewritten(), [("", {}, [])])
    rows += run("backward, one-hot sum rewritten: log-softmax backward + add + pad", backward_rewritten(False),
                [("", {}, []), ("flat tile", {"outer": ()}, [])]
                + [(f"2-D tile, {bk} rows", {"outer": (0,), "block_outer": bk}, []) for bk in (1, 2, 4, 16)]
                + [(f"2-D tile, 8 rows, {b}", {"outer": (0,), "block_outer": 8, "block": b}, []) for b in (1024, 4096)])
    rows += run("backward region (one fusion: padded gradient and bias sum)", backward_region(), [("", {}, [])])
    rows += run("backward rewritten: bias sum of the padded copy", bias_from_padded(),
                [("", {}, [])] + [(f"split {s}", {"split": s}, []) for s in (4, 8, 32)])
    print("\n| fusion | variant | us | GB/s | kernels |\n|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
