"""``emit`` must be correct for any valid parameters, not only the ones the
heuristics pick: hypothesis draws parameters (forced with ``Choices``) and shapes,
and the results must equal the reference executor's, random bits included."""
from __future__ import annotations

import math

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pyfuser.schedulers import Choices
from pyfuser.schedulers.base import next_pow2

from .common import DataType, check, fusion, gen_for, make_tensor


def _norm_dropout(fd, dtype):
    """Layer-norm statistics, softmax and dropout with an explicit seed, a [V] output
    met on the way, and fp16/bf16 stores: inputs x [R, V], w [V], seed, offset."""
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    seed = fd.define_scalar(dtype=DataType.Int)
    off = fd.define_scalar(dtype=DataType.Int)
    t = fd.ops.cast(x, dtype=DataType.Float)
    w2 = fd.ops.mul(w, fd.define_scalar(0.5))
    t = fd.ops.mul(t, fd.ops.broadcast_in_dim(w2, shape=[-1, -1], broadcast_dims=[1]))
    var, mean = fd.ops.var_mean(t, dims=[1], correction=1, keepdim=True)
    e = fd.ops.exp(fd.ops.sub(t, fd.ops.max(t, dims=[1], keepdim=True)))
    y = fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True))
    r = fd.ops.rand_like(y, rng_seed=seed, rng_offset=off)
    keep = fd.ops.cast(fd.ops.gt(r, fd.define_scalar(0.2)), dtype=DataType.Float)
    z = fd.ops.mul(fd.ops.sub(t, mean), fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5))))
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.add(z, y), keep), dtype=dtype))
    fd.add_output(mean)
    fd.add_output(r)
    fd.add_output(w2)


@st.composite
def reduction_case(draw):
    R = draw(st.sampled_from([1, 2, 3, 5, 9]))
    V = draw(st.sampled_from([1, 4, 7, 36, 100, 129, 257]))
    persistent = draw(st.booleans())
    block_k = draw(st.sampled_from([1, 2, 4, 8]))
    block_j = next_pow2(V) * draw(st.sampled_from([1, 2])) if persistent else draw(st.sampled_from([4, 8, 16, 64]))
    align = draw(st.sampled_from([1, 2, 4, 8]))
    quad = V % 4 == 0 and draw(st.booleans())
    half = draw(st.sampled_from([DataType.Half, DataType.BFloat16, DataType.Float]))
    return R, V, dict(persistent=persistent, block_k=block_k, block_j=block_j, align=align, quad_rng=quad), half


@settings(max_examples=15)
@given(reduction_case())
def test_normalization_any_params(case):
    R, V, params, dtype = case
    torch_dtype = {DataType.Half: torch.float16, DataType.BFloat16: torch.bfloat16, DataType.Float: torch.float32}[dtype]
    gen = gen_for("any_params", R, V)
    x = make_tensor((R, V), torch_dtype, gen)
    w = make_tensor((V,), torch.float32, gen)

    def build(fd):
        _norm_dropout(fd, dtype)

    fd = fusion(build)
    with Choices(**params):
        # var with correction 1 of a single element is NaN in both; the normalized
        # output is then NaN too, which the comparison accepts position by position.
        got = check(fd, [x, w, 4242, 8], tol={torch.float32: (1e-5, 2e-5)}, what=f"{R}x{V} {params}",
                    n_launches=1, persistent=params["persistent"], block_j=params["block_j"])
    want_r = fd.reference([x, w, 4242, 8])[2]
    assert torch.equal(got[2], want_r), "random bits depend on the parameters"


@st.composite
def pointwise_case(draw):
    shape = draw(st.sampled_from([(1,), (7,), (129,), (3, 1001), (2, 3, 37)]))
    n = 1
    for s in shape:
        n *= s
    # at most ~32 programs: the interpreter runs them one by one
    block = draw(st.sampled_from([b for b in (4, 8, 32, 128, 256, 2048) if b * 32 >= n]))
    return shape, block


@settings(max_examples=12)
@given(pointwise_case())
def test_pointwise_any_block(case):
    shape, block = case
    gen = gen_for("any_block", shape)
    x = make_tensor(shape, torch.float16, gen)
    b = make_tensor(shape[-1:], torch.float32, gen)

    def build(fd):
        tx = fd.define_tensor(shape=[-1] * len(shape), contiguity=[True] * len(shape), dtype=DataType.Half)
        tb = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        seed = fd.define_scalar(dtype=DataType.Int)
        off = fd.define_scalar(dtype=DataType.Int)
        eb = fd.ops.exp(tb)  # a [V] output on the walk: stored once per element
        t = fd.ops.add(fd.ops.cast(tx, dtype=DataType.Float),
                       fd.ops.broadcast_in_dim(eb, shape=list(shape), broadcast_dims=[len(shape) - 1]))
        n = fd.ops.randn_like(t, rng_seed=seed, rng_offset=off)
        fd.add_output(fd.ops.cast(fd.ops.add(t, n), dtype=DataType.Half))
        fd.add_output(eb)

    with Choices(block=block):
        check(fusion(build), [x, b, 99, 4], n_launches=1, tol={torch.float32: (1e-5, 2e-5)}, block=block)


@st.composite
def broadcast_tile_case(draw):
    """A 2-D pointwise tile with any dims on k (even the last, or all of them), any
    of the others taken one index per program, any rows per block and any block: what
    the heuristics would never pick included.  At most about 40 programs: each costs the
    interpreter tens of milliseconds (a block of 1 over 255 elements took 10 s)."""
    block_outer = draw(st.sampled_from([1, 2, 4, 8, 16]))
    block = block_outer * draw(st.sampled_from([1, 4, 16, 64]))
    shape = draw(st.sampled_from([(3, 5, 17), (2, 40), (4, 1, 9), (6, 3, 2, 5)]))
    outer = tuple(d for d in range(len(shape)) if draw(st.booleans())) or (0,)
    grid_dims = tuple(d for d in range(len(shape)) if d not in outer and draw(st.booleans()))
    one_each = math.prod(shape[d] for d in grid_dims)  # programs taking one index of these dims
    assume(one_each * -(-math.prod(shape) // one_each // block) <= 40)
    return shape, dict(outer=outer, block_outer=block_outer, block=block, grid_dims=grid_dims)


@settings(max_examples=20)
@given(broadcast_tile_case())
def test_broadcast_tile_any_params(case):
    """sin of a value broadcast along dim 0, a transposed input, a random op (one
    Philox call per element on this tile: the same bits as the reference's) and a
    smaller output met on the way."""
    shape, params = case
    gen = gen_for("any_broadcast_tile", shape)
    xt = make_tensor(tuple(reversed(shape)), torch.float16, gen).permute(*reversed(range(len(shape))))
    a = make_tensor(shape[1:], torch.float32, gen)

    def build(fd):
        tx = fd.define_tensor(shape=[-1] * len(shape), contiguity=[False] * len(shape), dtype=DataType.Half)
        ta = fd.define_tensor(shape=[-1] * (len(shape) - 1), dtype=DataType.Float)
        seed = fd.define_scalar(dtype=DataType.Int)
        off = fd.define_scalar(dtype=DataType.Int)
        s = fd.ops.sin(ta)  # an [shape[1:]] output on the walk
        t = fd.ops.mul(fd.ops.cast(tx, dtype=DataType.Float),
                       fd.ops.broadcast_in_dim(s, shape=list(shape), broadcast_dims=list(range(1, len(shape)))))
        fd.add_output(fd.ops.cast(fd.ops.add(t, fd.ops.rand_like(t, rng_seed=seed, rng_offset=off)), DataType.Half))
        fd.add_output(s)

    with Choices(**params):
        check(fusion(build), [xt, a, 7, 12], n_launches=1, tol={torch.float32: (1e-5, 2e-5)}, **params)
