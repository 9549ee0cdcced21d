"""The inner-outer tile: row reductions and column sums of the same tensor in one
kernel, the column partials folded in two levels (``codegen.inner_outer``).  Checked
against the reference executor on random inputs, executed twice (the counters in the
scratch buffer must be back at zero), with fold shapes that leave partial groups."""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import inner_outer, Choices
from pyfuser.schedulers.device_model import H200

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
    assert inner_outer.programs_per_sm(H200, 4) == 4 and inner_outer.programs_per_sm(H200, 16) == 1


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


def _softmax_backward_and_batch_sum(dy, p, bias_grad, lead, keepdim=True, bias=None):
    """dx of a softmax over the last dim in bf16, and dx summed over the ``lead``
    leading dims into a running fp32 gradient (``bias_grad``, or none): T5's position
    bias, added to every batch's scores, takes this batch sum.  With a strided
    ``bias`` (T5's first layer), dy has the bias's row-major copy added first, and the
    copy is returned too."""
    shape = list(dy.shape)

    def build(fd):
        tdy, tp = (fd.ops.cast(define_input(fd, t), DataType.Float) for t in (dy, p))
        if bias is not None:
            copy = fd.ops.set(define_input(fd, bias, contiguous=False))
            dims = list(range(len(shape) - bias.dim(), len(shape)))
            tdy = fd.ops.add(tdy, fd.ops.broadcast_in_dim(copy, shape=shape, broadcast_dims=dims))
            fd.add_output(copy)
        dp = fd.ops.mul(tdy, tp)
        r = fd.ops.sum(dp, dims=[len(shape) - 1], keepdim=True)
        dx = fd.ops.sub(dp, fd.ops.mul(tp, fd.ops.broadcast_in_dim(r, shape=shape,
                                                                    broadcast_dims=list(range(len(shape))))))
        fd.add_output(fd.ops.cast(dx, DataType.BFloat16))
        total = fd.ops.sum(dx, dims=list(range(lead)), keepdim=keepdim)
        fd.add_output(total if bias_grad is None else fd.ops.add(define_input(fd, bias_grad), total))

    return fusion(build)


def _bias_grad(shape, lead, keepdim):
    return ((1,) * lead if keepdim else ()) + tuple(shape[lead:])


@pytest.mark.parametrize("shape,lead,keepdim,block_k", [((4, 3, 5, 8), 1, True, 2), ((2, 3, 7, 20), 1, True, 4),
                                                        ((5, 6, 16), 1, False, 1), ((3, 2, 2, 9), 2, False, 4),
                                                        ((3, 1, 4, 8), 1, True, 2)], ids=str)
def test_column_sums_over_leading_dims_are_summed_per_group(shape, lead, keepdim, block_k):
    """Column sums that keep trailing row dims (the groups' walk): a program per block of
    groups sums its rows over the leading dims in registers; groups not a multiple of
    the block, a kept dim of 1, a batch-only sum and a (batch, head) sum."""
    dy, p = _x(shape, name="dy"), _x(shape, name="p")
    g = _x(_bias_grad(shape, lead, keepdim), torch.float32, name="g")
    fd = _softmax_backward_and_batch_sum(dy, p, g, lead, keepdim)
    with Choices(block_k=block_k):
        for _ in range(2):
            check(fd, [dy, p, g], n_launches=1, scheduler="inner_outer", grouped=True, block_k=block_k)


@pytest.mark.parametrize("keepdim", [True, False])
def test_a_column_shaped_copy_is_stored_with_the_column_sums_of_the_groups_walk(keepdim):
    """T5's first layer: the softmax backward reads the position bias through its
    row-major copy, which the region also returns (a value shaped like the column sums,
    computed from an input alone), beside the bias gradient's batch sum: all three
    outputs from the one groups' walk kernel."""
    shape = (3, 4, 5, 8)
    dy, p = _x(shape, name="dy"), _x(shape, name="p")
    bias = _x((5, 8, 4), torch.float32, name="bias").permute(2, 0, 1)  # [heads, q, k], heads innermost
    if keepdim:
        bias = bias.unsqueeze(0)

    fd = _softmax_backward_and_batch_sum(dy, p, None, 1, keepdim, bias=bias)
    for block_k in (1, 2):
        with Choices(block_k=block_k):
            got = check(fd, [dy, p, bias], n_launches=1, scheduler="inner_outer", grouped=True)
        assert got[0].is_contiguous() and torch.equal(got[0], bias)


def test_a_column_shaped_value_is_stored_with_the_folded_column_sums():
    """The folded walk too: a layer norm backward that also returns its weight in fp32
    (a value shaped like dw, computed from an input alone) is still one kernel."""
    dy, x, w, mean, rstd = _ln_inputs((6, 5, 16))

    def build(fd):
        tdy, tx, tw = (fd.ops.cast(define_input(fd, t), DataType.Float) for t in (dy, x, w))
        tm, tr = define_input(fd, mean), define_input(fd, rstd)
        xhat = fd.ops.mul(fd.ops.sub(tx, tm), tr)
        g = fd.ops.mul(tdy, fd.ops.broadcast_in_dim(tw, shape=[6, 5, 16], broadcast_dims=[2]))
        a = fd.ops.sum(g, dims=[2], keepdim=True)
        fd.add_output(fd.ops.cast(fd.ops.sub(g, fd.ops.mul(xhat, a)), DataType.BFloat16))
        fd.add_output(fd.ops.sum(fd.ops.mul(tdy, xhat), dims=[0, 1]))
        fd.add_output(fd.ops.mul(tw, 2.0))

    fd = fusion(build)
    with Choices(nprog=3, group=2):
        got = check(fd, [dy, x, w, mean, rstd], n_launches=1, scheduler="inner_outer", grouped=False)
    assert torch.equal(got[2], w.float() * 2)


def test_the_groups_walk_on_the_gpu_needs_two_waves_of_groups():
    """On the GPU the groups' walk takes a segment only when its groups fill the SMs
    twice over (else two kernels); two groups a block, one in the fallback."""
    from pyfuser.ir.concretize import bind
    from pyfuser.schedulers import Segment
    from pyfuser.schedulers.device_model import current_model

    def segment(shape):
        dy = torch.empty(shape, dtype=torch.bfloat16, device="meta")
        g = torch.empty((1,) + tuple(shape[1:]), dtype=torch.float32, device="meta")
        fd = _softmax_backward_and_batch_sum(dy, dy, g, 1)
        b = bind(fd.ir, [dy, dy, g])
        return Segment(list(fd.ir.outputs), b.shapes, {v: {"contiguous": True} for v in fd.ir.inputs}, "cuda")

    few = segment((16, 1, current_model().sms, 64))
    assert inner_outer.can_schedule(few).code == "few_groups"
    seg = segment((16, 12, 512, 512))
    assert inner_outer.can_schedule(seg) is None
    p = inner_outer.heuristics(seg)
    assert (p.grouped, p.block_k, p.nprog, p.block_j, p.num_warps) == (True, 2, 3072, 512, 2)
    assert inner_outer.max_registers(seg, p) is None
    (fall,) = inner_outer.fallbacks(seg, p)
    assert (fall.block_k, fall.nprog) == (1, 6144)


def test_column_sums_over_other_than_leading_dims_are_declined():
    """A sum over the head dim alone keeps the batch: neither walk takes it."""
    x = _x((3, 4, 8), torch.float32)

    def build(fd):
        t = define_input(fd, x)
        fd.add_output(fd.ops.sum(t, dims=[2]))
        fd.add_output(fd.ops.sum(t, dims=[1]))

    from pyfuser.ir.concretize import bind
    from pyfuser.schedulers import Segment

    fd = fusion(build)
    check(fd, [x])
    assert all(name != "inner_outer" for name, _ in kernels_of(fd))
    seg = Segment(list(fd.ir.outputs), bind(fd.ir, [x]).shapes, {v: {"contiguous": True} for v in fd.ir.inputs}, "cpu")
    assert inner_outer.can_schedule(seg).code == "column_dims"
