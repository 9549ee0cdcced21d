"""Edge cases of issue 5 item 4, each checked against PyTorch eager: size-0 and
size-1 axes, reductions over every axis (0-d outputs), keepdim, negative dims,
outputs that are inputs, an input read by several outputs, fusions with no tensor
inputs, 0-d tensor inputs."""
import pytest
import torch

import pyfuser
from pyfuser import DataType, FusionDefinition

FL = DataType.Float


def tensor(fd, rank, dtype=FL):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def steps(fd):
    return list(fd._runtime.plans.values())[-1].steps


def no_host_step(fd):
    assert all(s.scheduler is not None for s in steps(fd)), \
        [(s.reason, s.is_host) for s in steps(fd) if s.scheduler is None]


def run(fd, inputs, **kw):
    before = pyfuser.cache_info()["launches"]
    out = fd.execute(list(inputs), **kw)
    return out, pyfuser.cache_info()["launches"] - before


def fusion(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


# -- size-0 axes ---------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0,), (2, 0, 4)])
def test_pointwise_on_empty_input(shape):
    x = torch.randn(shape)
    y = torch.randn(shape)

    def build(fd):
        a, b = tensor(fd, len(shape)), tensor(fd, len(shape))
        fd.add_output(fd.ops.add(fd.ops.exp(a), fd.ops.mul(b, 2.0)))
    fd = fusion(build)
    (out,), n = run(fd, [x, y])
    assert out.shape == torch.Size(shape) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.exp(x) + y * 2.0)
    assert n == 0, "nothing to compute for an empty output"


@pytest.mark.parametrize("op,torch_op,empty_value", [("sum", torch.sum, 0.0), ("prod", torch.prod, 1.0)])
def test_reduction_over_size_zero_axis(op, torch_op, empty_value):
    x = torch.randn(4, 0)

    def build(fd):
        t = tensor(fd, 2)
        fd.add_output(getattr(fd.ops, op)(t, dims=[1]))
        fd.add_output(fd.ops.add(getattr(fd.ops, op)(t, dims=[-1], keepdim=True), 1.0))
    fd = fusion(build)
    (a, b), _ = run(fd, [x])
    torch.testing.assert_close(a, torch_op(x, 1))
    torch.testing.assert_close(b, torch_op(x, -1, keepdim=True) + 1.0)
    assert torch.all(a == empty_value)
    no_host_step(fd)


def test_sum_all_axes_of_empty_is_zero_scalar():
    x = torch.randn(0, 3)

    def build(fd):
        fd.add_output(fd.ops.sum(tensor(fd, 2), dims=[0, 1]))
    fd = fusion(build)
    (out,), _ = run(fd, [x])
    assert out.shape == torch.Size([])
    torch.testing.assert_close(out, x.sum())


def test_reduction_keeping_size_zero_axis():
    x = torch.randn(0, 6)

    def build(fd):
        t = tensor(fd, 2)
        fd.add_output(fd.ops.sum(t, dims=[1]))
        fd.add_output(fd.ops.max(t, dims=[1], keepdim=True))
    fd = fusion(build)
    (s, m), n = run(fd, [x])
    torch.testing.assert_close(s, x.sum(1))
    assert m.shape == torch.Size([0, 1])
    assert n == 0


# -- size-1 axes ---------------------------------------------------------------------
def test_size_one_axes_pointwise_and_reduction():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 7, 1, generator=g)
    y = torch.randn(1, 7, 1, generator=g)

    def build(fd):
        a, b = tensor(fd, 3), tensor(fd, 3)
        s = fd.ops.add(fd.ops.mul(a, b), 1.0)
        fd.add_output(s)
        fd.add_output(fd.ops.sum(s, dims=[0, 2]))
        fd.add_output(fd.ops.sum(s, dims=[1], keepdim=True))
    fd = fusion(build)
    (s, r1, r2), _ = run(fd, [x, y])
    ref = x * y + 1.0
    torch.testing.assert_close(s, ref)
    torch.testing.assert_close(r1, ref.sum((0, 2)))
    torch.testing.assert_close(r2, ref.sum(1, keepdim=True))
    no_host_step(fd)


def test_reduction_over_size_one_axis():
    x = torch.randn(5, 1)

    def build(fd):
        t = tensor(fd, 2)
        fd.add_output(fd.ops.sum(t, dims=[1]))
        fd.add_output(fd.ops.max(t, dims=[-1], keepdim=True))
    fd = fusion(build)
    (s, m), _ = run(fd, [x])
    torch.testing.assert_close(s, x.sum(1))
    torch.testing.assert_close(m, x.amax(-1, keepdim=True))


# -- reductions over all axes, keepdim, negative dims --------------------------------
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_reduction_over_all_axes_gives_scalar(op):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(6, 10, generator=g) + 0.5
    tref = {"sum": torch.sum, "max": torch.amax, "min": torch.amin, "prod": torch.prod}[op]

    def build(fd):
        t = tensor(fd, 2)
        fd.add_output(getattr(fd.ops, op)(t, dims=[0, 1]))
        fd.add_output(getattr(fd.ops, op)(t, dims=[-2, -1], keepdim=True))
    fd = fusion(build)
    (a, b), n = run(fd, [x])
    assert a.shape == torch.Size([]) and b.shape == torch.Size([1, 1])
    ref = tref(x) if op in ("sum", "prod") else tref(x, (0, 1))
    torch.testing.assert_close(a, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(b, ref.reshape(1, 1), rtol=1e-4, atol=1e-5)
    assert n == 1
    no_host_step(fd)


def test_scalar_output_used_downstream():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 9, generator=g)

    def build(fd):
        t = tensor(fd, 2)
        total = fd.ops.sum(t, dims=[0, 1])
        fd.add_output(total)
        fd.add_output(fd.ops.sub(t, fd.ops.broadcast_in_dim(total, shape=[4, 9], broadcast_dims=[])))
    fd = fusion(build)
    (s, d), _ = run(fd, [x])
    torch.testing.assert_close(s, x.sum())
    torch.testing.assert_close(d, x - x.sum(), rtol=1e-5, atol=1e-5)
    no_host_step(fd)


@pytest.mark.parametrize("dims,keepdim", [([-1], False), ([-1], True), ([0, -1], False), ([-3], True),
                                          ([-2, 0], True)])
def test_negative_dims_and_keepdim(dims, keepdim):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 4, 5, generator=g)

    def build(fd):
        t = tensor(fd, 3)
        fd.add_output(fd.ops.sum(t, dims=dims, keepdim=keepdim))
        v, m = fd.ops.var_mean(t, dims=dims, correction=0, keepdim=keepdim)
        fd.add_output(v)
        fd.add_output(m)
    fd = fusion(build)
    (s, v, m), _ = run(fd, [x])
    torch.testing.assert_close(s, x.sum(dims, keepdim=keepdim), rtol=1e-5, atol=1e-5)
    rv, rm = torch.var_mean(x, dims, correction=0, keepdim=keepdim)
    torch.testing.assert_close(v, rv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m, rm, rtol=1e-5, atol=1e-5)
    no_host_step(fd)


def test_negative_dims_in_views():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 1, 6, generator=g)
    y = torch.randn(3, 2, 2, generator=g)

    def build(fd):
        a = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True])
        b = tensor(fd, 3)
        sq = fd.ops.squeeze(a, dims=[-2])
        p = fd.ops.permute(b, dims=[-1, 0, 1])
        r = fd.ops.reshape(p, new_shape=[2, 6])
        fd.add_output(fd.ops.add(sq, r))
        fd.add_output(fd.ops.cat([sq, r], dim=-1))
    fd = fusion(build)
    (s, c), _ = run(fd, [x, y])
    r = y.permute(2, 0, 1).reshape(2, 6)
    torch.testing.assert_close(s, x.squeeze(-2) + r)
    torch.testing.assert_close(c, torch.cat([x.squeeze(-2), r], -1))


# -- outputs that are inputs, inputs used by several outputs --------------------------
def test_output_that_is_an_input():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 5, generator=g)
    y = torch.randn(4, 5, generator=g)

    def build(fd):
        a, b = tensor(fd, 2), tensor(fd, 2)
        fd.add_output(a)
        fd.add_output(fd.ops.mul(a, b))
        fd.add_output(b)
    fd = fusion(build)
    (o0, o1, o2), n = run(fd, [x, y])
    torch.testing.assert_close(o0, x)
    torch.testing.assert_close(o1, x * y)
    torch.testing.assert_close(o2, y)
    assert n == 1


def test_only_output_is_an_input():
    x = torch.randn(3, 3)

    def build(fd):
        fd.add_output(tensor(fd, 2))
    fd = fusion(build)
    (o,), n = run(fd, [x])
    torch.testing.assert_close(o, x)
    assert n == 0


def test_input_used_by_several_outputs():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(6, 8, generator=g)

    def build(fd):
        t = tensor(fd, 2)
        fd.add_output(fd.ops.exp(t))
        fd.add_output(fd.ops.sum(t, dims=[1]))
        fd.add_output(fd.ops.sum(t, dims=[0]))
        fd.add_output(fd.ops.permute(fd.ops.neg(t), dims=[1, 0]))
    fd = fusion(build)
    (e, r1, r0, p), _ = run(fd, [x])
    torch.testing.assert_close(e, torch.exp(x))
    torch.testing.assert_close(r1, x.sum(1))
    torch.testing.assert_close(r0, x.sum(0))
    torch.testing.assert_close(p, (-x).T)
    no_host_step(fd)


def test_same_value_output_twice():
    x = torch.randn(3, 4)

    def build(fd):
        t = tensor(fd, 2)
        e = fd.ops.exp(t)
        fd.add_output(e)
        fd.add_output(e)
    fd = fusion(build)
    (a, b), _ = run(fd, [x])
    torch.testing.assert_close(a, torch.exp(x))
    torch.testing.assert_close(b, torch.exp(x))


# -- no tensor inputs ----------------------------------------------------------------
def test_full_and_iota_without_inputs():
    def build(fd):
        f = fd.ops.full(shape=[3, 4], fill_value=2.5, dtype=FL)
        i = fd.ops.iota(4, 1, 2, dtype=DataType.Int)
        fi = fd.ops.iota(4, 0.5, 0.25, dtype=FL)
        fd.add_output(f)
        fd.add_output(i)
        fd.add_output(fd.ops.add(f, fd.ops.broadcast_in_dim(fi, shape=[3, 4], broadcast_dims=[1])))
    fd = fusion(build)
    (f, i, s), n = run(fd, [], device="cpu")
    torch.testing.assert_close(f, torch.full((3, 4), 2.5))
    torch.testing.assert_close(i, torch.arange(1, 9, 2))
    torch.testing.assert_close(s, (2.5 + torch.arange(4) * 0.25 + 0.5).expand(3, 4))
    assert n >= 1
    no_host_step(fd)


def test_full_sum_scalar_without_inputs():
    def build(fd):
        f = fd.ops.full(shape=[5, 7], fill_value=3.0, dtype=FL)
        fd.add_output(fd.ops.sum(f, dims=[0, 1]))
    fd = fusion(build)
    (s,), _ = run(fd, [], device="cpu")
    assert s.shape == torch.Size([])
    torch.testing.assert_close(s, torch.tensor(105.0))


def test_uniform_without_inputs_is_seeded_and_in_range():
    def build(fd):
        seed = fd.define_scalar(dtype=DataType.Int)
        u = fd.ops.uniform(-1.0, 3.0, shape=[64, 16], dtype=FL, rng_seed=seed, rng_offset=0)
        fd.add_output(u)
        fd.add_output(fd.ops.mul(u, 2.0))
    fd = fusion(build)
    (u, u2), _ = run(fd, [7], device="cpu")
    (v, _v2), _ = run(fd, [7], device="cpu")
    (w, _w2), _ = run(fd, [8], device="cpu")
    assert u.shape == torch.Size([64, 16]) and u.dtype == torch.float32
    assert float(u.min()) >= -1.0 and float(u.max()) < 3.0
    torch.testing.assert_close(u2, u * 2.0)
    assert torch.equal(u, v) and not torch.equal(u, w)
    torch.testing.assert_close(u, fd.reference([7], device="cpu")[0])


def test_uniform_without_any_input():
    def build(fd):
        fd.add_output(fd.ops.uniform(0.0, 1.0, shape=[32], dtype=FL))
    fd = fusion(build)
    (u,), _ = run(fd, [], device="cpu")
    assert u.shape == torch.Size([32]) and float(u.min()) >= 0.0 and float(u.max()) < 1.0


# -- 0-d tensor inputs ---------------------------------------------------------------
def test_zero_dim_tensor_inputs():
    g = torch.Generator().manual_seed(8)
    s = torch.randn((), generator=g)
    x = torch.randn(4, 6, generator=g)

    def build(fd):
        ts = fd.define_tensor(shape=[], contiguity=[], dtype=FL)
        tx = tensor(fd, 2)
        fd.add_output(fd.ops.mul(tx, ts))
        fd.add_output(fd.ops.exp(ts))
        fd.add_output(fd.ops.add(fd.ops.sum(tx, dims=[0, 1]), ts))
    fd = fusion(build)
    (a, b, c), _ = run(fd, [s, x])
    torch.testing.assert_close(a, x * s)
    torch.testing.assert_close(b, torch.exp(s))
    torch.testing.assert_close(c, x.sum() + s)
    no_host_step(fd)


def test_zero_dim_only():
    s = torch.tensor(1.5)

    def build(fd):
        ts = fd.define_tensor(shape=[], contiguity=[], dtype=FL)
        fd.add_output(fd.ops.mul(fd.ops.sin(ts), ts))
    fd = fusion(build)
    (a,), n = run(fd, [s])
    assert a.shape == torch.Size([])
    torch.testing.assert_close(a, torch.sin(s) * s)
    assert n == 1


# -- found while writing these tests -------------------------------------------------
def test_var_mean_over_size_zero_axis_is_nan():
    """torch gives nan for both the variance and the mean of nothing (the mean was 0)."""
    x = torch.randn(3, 0)

    def build(fd):
        v, m = fd.ops.var_mean(tensor(fd, 2), dims=[1], correction=0)
        fd.add_output(v)
        fd.add_output(m)
    fd = fusion(build)
    (v, m), _ = run(fd, [x])
    with pytest.warns(UserWarning):
        rv, rm = torch.var_mean(x, 1, correction=0)
    torch.testing.assert_close(v, rv, equal_nan=True)
    torch.testing.assert_close(m, rm, equal_nan=True)


def test_bf16_constants_full_and_pad():
    """bf16 constants (full's fill value, pad's value) in the interpreter."""
    x = torch.randn(3, 2).bfloat16()

    def build(fd):
        fd.add_output(fd.ops.full(shape=[2, 3], fill_value=1.25, dtype=DataType.BFloat16))
        fd.add_output(fd.ops.pad(fd.define_tensor(shape=[-1, -1], contiguity=[True, True],
                                                  dtype=DataType.BFloat16), [1, 1, 0, 0], 1.5))
    fd = fusion(build)
    (f, p), _ = run(fd, [x])
    torch.testing.assert_close(f, torch.full((2, 3), 1.25, dtype=torch.bfloat16))
    torch.testing.assert_close(p, torch.nn.functional.pad(x, [1, 1], value=1.5))
