"""The inner-outer tile: row reductions and column sums of the same tensor in one
kernel, the column partials folded in two levels (``codegen.inner_outer``).  Checked
against the reference executor on random inputs, executed twice (the counters in the
scratch buffer must be back at zero), with fold shapes that leave partial groups."""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import inner_outer, Choices

from .common import DataType, check, define_input, fusion, gen_for, kernels_of, make_tensor


def _x(shape, dtype=torch.bfloat16, name="x"):
    return make_tensor(shape, dtype, gen_for("inner_outer", name, shape, str(dtype)))


def _layer_norm_backward(dy, x, w, mean, rstd):
    """dx, dw, db of a layer norm over the last dim, as the dynamo backend writes it."""

    def build(fd):
        tdy, tx, tw = (fd.ops.cast(define_input(fd, t), DataType.Float) for t in (dy, x, w))
        tm, tr = define_input(fd, mean), define_input(fd, rstd)
        shape, n = list(dy.shape), dy.shape[-1]
        dims = list(range(len(shape) - 1))

        def rows(t):
            return fd.ops.broadcast_in_dim(t, shape=shape, broadcast_dims=list(range(len(shape))))

        def cols(t):
            return fd.ops.broadcast_in_dim(t, shape=shape, broadcast_dims=[len(shape) - 1])

        xhat = fd.ops.mul(fd.ops.sub(tx, rows(tm)), rows(tr))
        g = fd.ops.mul(tdy, cols(tw))
        a = fd.ops.sum(g, dims=[-1], keepdim=True)
        b = fd.ops.sum(fd.ops.mul(g, xhat), dims=[-1], keepdim=True)
        inner = fd.ops.sub(fd.ops.sub(fd.ops.mul(g, float(n)), rows(a)), fd.ops.mul(xhat, rows(b)))
        dx = fd.ops.mul(fd.ops.mul(rows(tr), inner), 1.0 / n)
        fd.add_output(fd.ops.cast(dx, DataType.BFloat16))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(tdy, xhat), dims=dims), DataType.BFloat16))
        fd.add_output(fd.ops.sum(tdy, dims=dims, keepdim=True))

    return fusion(build)


def _ln_inputs(shape):
    dy, x, w = _x(shape, name="dy"), _x(shape), _x(shape[-1:], name="w")
    mean = x.float().mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.float().var(-1, unbiased=False, keepdim=True) + 1e-5)
    return [dy, x, w, mean, rstd]


@pytest.mark.parametrize("fold", [dict(nprog=1, group=1), dict(nprog=3, group=2, fold_rows=1),
                                  dict(nprog=7, group=3, fold_rows=2, stages=2), dict(nprog=16, group=4, fold_rows=4)],
                         ids=lambda f: "-".join(f"{k}{v}" for k, v in f.items()))
@pytest.mark.parametrize("shape", [(37, 20), (5, 3), (129, 64), (1, 7)], ids=str)
def test_layer_norm_backward_is_one_kernel(shape, fold):
    inputs = _ln_inputs(shape)
    fd = _layer_norm_backward(*inputs)
    with Choices(**fold, block_k=2):
        for _ in range(2):
            check(fd, inputs, n_launches=1, scheduler="inner_outer", **fold)


def test_three_dims_and_repeatable_bits():
    """[B, S, H] with column sums over (B, S); the folds add in a fixed order."""
    inputs = _ln_inputs((3, 11, 24))
    fd = _layer_norm_backward(*inputs)
    with Choices(nprog=5, group=2):
        first = check(fd, inputs, n_launches=1, scheduler="inner_outer")
        again = fd.execute(inputs)
    for a, b in zip(first, again):
        assert torch.equal(a, b)


def test_row_outputs_and_random_rows():
    """A row statistic stored beside the column sum of dropped-out values (Philox
    words depend on the element, not on which program holds the row)."""
    x = _x((50, 16), torch.float32)

    def build(fd):
        t = define_input(fd, x)
        seed, off = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        keep = fd.ops.lt(fd.ops.rand_like(t, rng_seed=seed, rng_offset=off), 0.8)
        d = fd.ops.where(keep, fd.ops.mul(t, 1.25), 0.0)
        fd.add_output(fd.ops.sum(d, dims=[1]))
        fd.add_output(fd.ops.sum(d, dims=[0]))
        fd.add_output(d)

    fd = fusion(build)
    with Choices(nprog=6, group=4):
        check(fd, [x, 1234, 8], n_launches=1, scheduler="inner_outer")


@pytest.mark.parametrize("case", ["column_max", "column_sum_feeds_rows", "row_max_only"])
def test_what_it_declines(case):
    """Not inner-outer: a column max, a column sum read back by the rows, one direction."""
    x = _x((24, 8), torch.float32)

    def build(fd):
        t = define_input(fd, x)
        fd.add_output(fd.ops.sum(t, dims=[1]))
        if case == "column_max":
            fd.add_output(fd.ops.max(t, dims=[0]))
        elif case == "column_sum_feeds_rows":
            c = fd.ops.sum(t, dims=[0], keepdim=True)
            fd.add_output(fd.ops.sub(t, fd.ops.broadcast_in_dim(c, shape=[24, 8], broadcast_dims=[0, 1])))

    fd = fusion(build)
    check(fd, [x])
    assert all(name != "inner_outer" for name, _ in kernels_of(fd))


def test_params_print_and_fold_sizes():
    p = inner_outer._sized(inner_outer.InnerOuterParams(1, 1024, 4, 1056, 0, 0, False))
    assert (p.group, p.fold_rows) == (33, 4)  # 32 groups of 33; 4096 elements per fold load
    assert "nprog=1056" in repr(p)
    assert inner_outer.programs_per_sm(4) == 4 and inner_outer.programs_per_sm(16) == 1


def test_gpu_heuristics_take_two_rows_and_fall_back_to_one():
    """On the GPU a block holds two rows; the first fallback (taken when two rows need
    more registers than one wave of programs allows) is one row with the same
    programs, then half the programs."""
    from pyfuser.ir.concretize import bind
    from pyfuser.schedulers import Segment

    inputs = _ln_inputs((64, 48))
    fd = _layer_norm_backward(*inputs)
    b = bind(fd.ir, inputs)
    seg = Segment(list(fd.ir.outputs), b.shapes, {v: {"contiguous": True} for v in fd.ir.inputs}, "cuda")
    p = inner_outer.heuristics(seg)
    assert (p.block_k, p.nprog) == (2, 32)  # 64 rows in blocks of two
    falls = inner_outer.fallbacks(seg, p)
    assert (falls[0].block_k, falls[0].nprog) == (1, 32)
    assert all(f.block_k == 1 for f in falls)
