"""Sizes as values: ``fd.ops.size``, ``fd.ops.shape``, ``fd.ops.at`` and
``fd.define_vector``, used where nvFuser takes them (shape arguments of reshape, full,
broadcast_in_dim, expand, uniform/normal, iota; scalar arithmetic; kernel math), run
through ``fd.execute`` against eager.  Each fusion is executed again with other sizes:
a size must never come back stale from a cached kernel or launch."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, Fusion, FusionDefinition, cache_info
from pyfuser.ir.dtypes import from_torch

from ..helpers import assert_all_match, assert_matches, gen_for, make_tensor, without_scheduler
from .test_printer import assert_round_trip
from .test_validation import raises

DTYPES = [torch.float32, torch.bfloat16]


def _input(fd, rank, dtype=torch.float32):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=from_torch(dtype))


def _check(fd, shapes, make_inputs, eager):
    """Execute ``fd`` once per shape (the first shape again last) and compare with eager."""
    for i, shape in enumerate(list(shapes) + [shapes[0]]):
        inputs = make_inputs(shape, gen_for(shape, i))
        assert_all_match(fd.execute(inputs), eager(*inputs))


def _tensor(dtype):
    return lambda shape, gen: [make_tensor(shape, dtype, gen)]


# --- kernel math ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mean_divides_by_a_size(dtype):
    """x.sum(-1) / x.size(-1): the size is a kernel argument, not a literal."""
    with FusionDefinition() as fd:
        t = _input(fd, 3, dtype)
        fd.add_output(fd.ops.div(fd.ops.sum(t, [-1]), fd.ops.size(t, -1)))
    _check(fd, [(3, 4, 8), (2, 5, 3), (4, 1, 6)], _tensor(dtype), lambda x: [x.sum(-1) / x.size(-1)])


def test_a_cached_kernel_takes_each_execute_s_size():
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        fd.add_output(fd.ops.mul(t, fd.ops.size(t, 0)))
    x = make_tensor((3, 8), torch.float32, gen_for("cached"))
    fd.execute([x])
    compiled = cache_info()["kernels_compiled"]
    for shape in [(5, 8), (7, 9), (3, 8)]:
        x = make_tensor(shape, torch.float32, gen_for("cached", shape))
        (got,) = fd.execute([x])
        assert_matches(got, x * shape[0])
    assert cache_info()["kernels_compiled"] == compiled, "a new size must not need a new kernel"
    (src, _), = fd._runtime.kernels.values()
    assert [a.kind for a in src.args if a.name == "S1"] == ["scalar"], "the size is a kernel argument"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scalar_arithmetic_on_sizes(dtype):
    """Products, differences, casts and true division of sizes, in pointwise math."""
    with FusionDefinition() as fd:
        t = _input(fd, 2, dtype)
        n, h = fd.ops.size(t, 0), t.size(1)
        numel = fd.ops.mul(n, h)
        scale = fd.ops.div(fd.ops.cast(h, DataType.Float), fd.ops.sub(numel, 1))
        fd.add_output(fd.ops.mul(fd.ops.add(t, fd.ops.sub(h, n)), scale))
        fd.add_output(fd.ops.full([2], fd.ops.mul(n, 3), DataType.Int))

    def eager(x):
        n, h = x.shape
        return [(x + (h - n)) * (float(h) / (n * h - 1)), torch.full([2], n * 3)]

    _check(fd, [(3, 5), (6, 2)], _tensor(dtype), eager)


def test_size_of_an_intermediate_only_measured():
    """A size of a tensor nothing else reads: its shape is inferred, it is not computed."""
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        p = fd.ops.permute(fd.ops.sum(t, [0], keepdim=True), [1, 0])
        fd.add_output(fd.ops.mul(t, fd.ops.size(p, 0)))
    _check(fd, [(3, 4), (2, 7)], _tensor(torch.float32), lambda x: [x * x.shape[1]])


@without_scheduler("inner_outer")  # planned as two kernels, the second reading sizes of a cut segment
def test_sizes_in_a_fusion_cut_at_reductions():
    """Layer-norm backward written with sizes: the divisors and broadcast shapes reach
    the kernels of a fusion cut at reductions, one of them reading intermediates."""
    with FusionDefinition() as fd:
        x, dy, w = _input(fd, 2), _input(fd, 2), _input(fd, 1)
        shape = fd.ops.shape(x)
        h = fd.ops.at(shape, -1)
        var, mean = fd.ops.var_mean(x, dims=[1], correction=0)
        rstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
        bc = lambda t: fd.ops.broadcast_in_dim(t, shape=shape, broadcast_dims=[0])  # noqa: E731
        xhat = fd.ops.mul(fd.ops.sub(x, bc(mean)), bc(rstd))
        g = fd.ops.mul(dy, fd.ops.expand(w, shape))
        a, b = fd.ops.sum(g, dims=[1]), fd.ops.sum(fd.ops.mul(g, xhat), dims=[1])
        dx = fd.ops.mul(bc(rstd), fd.ops.sub(fd.ops.sub(g, fd.ops.div(bc(a), h)),
                                             fd.ops.mul(xhat, fd.ops.div(bc(b), h))))
        fd.add_output(dx)
        fd.add_output(fd.ops.div(fd.ops.sum(fd.ops.mul(dy, xhat), dims=[0]), x.size(0)))

    def make(shape, gen):
        return [make_tensor(shape, torch.float32, gen), make_tensor(shape, torch.float32, gen),
                make_tensor(shape[1:], torch.float32, gen)]

    def eager(x, dy, w):
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        torch.nn.functional.layer_norm(xr, [x.shape[1]], wr, eps=1e-5).backward(dy)
        return [xr.grad, wr.grad / x.shape[0]]

    for i, shape in enumerate([(6, 20), (3, 9), (6, 20)]):
        got = fd.execute(make(shape, gen_for("ln", shape, i)))
        want = eager(*make(shape, gen_for("ln", shape, i)))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    subs = [s.sub for s in list(fd._runtime.plans.values())[-1].steps if s.sub is not None]
    assert any(v.name == "S30" for sub in subs for v in sub.ir.inputs), "a size is an input of a cut segment"


# --- shape arguments --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reshape_to_a_product_of_sizes(dtype):
    with FusionDefinition() as fd:
        t = _input(fd, 3, dtype)
        s0, s1, s2 = (fd.ops.size(t, d) for d in range(3))
        r = fd.ops.reshape(t, [fd.ops.mul(s0, s1), s2])
        fd.add_output(fd.ops.exp(r))
        fd.add_output(r)  # a view of the input: no kernel
        fd.add_output(fd.ops.reshape(t, new_shape=[s2, -1]))
    _check(fd, [(2, 3, 4), (4, 1, 5), (3, 2, 2)], _tensor(dtype),
           lambda x: [x.reshape(-1, x.shape[2]).exp(), x.reshape(-1, x.shape[2]), x.reshape(x.shape[2], -1)])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_full_of_a_shape_plus_x(dtype):
    with FusionDefinition() as fd:
        t = _input(fd, 2, dtype)
        fd.add_output(fd.ops.add(fd.ops.full(fd.ops.shape(t), 1.5, from_torch(dtype)), t))
        fd.add_output(fd.ops.full([t.size(1), 2], 2, DataType.Int))
    _check(fd, [(3, 5), (2, 9)], _tensor(dtype),
           lambda x: [torch.full(x.shape, 1.5, dtype=dtype) + x, torch.full([x.shape[1], 2], 2)])


def test_broadcast_in_dim_and_expand_to_sizes():
    with FusionDefinition() as fd:
        t, row = _input(fd, 2), _input(fd, 1)
        shape = fd.ops.shape(t)
        fd.add_output(fd.ops.mul(t, fd.ops.broadcast_in_dim(row, shape=shape, broadcast_dims=[1])))
        col = fd.ops.broadcast_in_dim(fd.ops.sum(t, [1]), shape=[shape[0], 1], broadcast_dims=[0])
        fd.add_output(fd.ops.sub(t, fd.ops.expand(col, [-1, t.size(1)])))
        fd.add_output(fd.ops.expand(row, [fd.ops.add(t.size(0), 1), -1]))

    def make(shape, gen):
        return [make_tensor(shape, torch.float32, gen), make_tensor(shape[1:], torch.float32, gen)]

    def eager(x, r):
        return [x * r, x - x.sum(1, keepdim=True), r.expand(x.shape[0] + 1, -1)]

    _check(fd, [(3, 4), (5, 2)], make, eager)


def test_random_ops_and_iota_take_sizes():
    """Seeded random values over a shape made of sizes are those over the same shape
    given as ints; iota counts to a size."""

    def build(fd, t, sizes):
        fd.add_output(fd.ops.uniform(-1.0, 1.0, shape=sizes, dtype=DataType.Float, rng_seed=5, rng_offset=0))
        fd.add_output(fd.ops.normal(0.0, 2.0, shape=sizes, dtype=DataType.BFloat16, rng_seed=6, rng_offset=4))
        fd.add_output(fd.ops.iota(sizes[0] if isinstance(sizes, list) else fd.ops.at(sizes, 0), 1, 2))

    for shape in [(3, 5), (4, 2)]:
        x = torch.ones(shape)
        with FusionDefinition() as by_size:
            t = _input(by_size, 2)
            build(by_size, t, by_size.ops.shape(t))
        with FusionDefinition() as by_int:
            t = _input(by_int, 2)
            build(by_int, t, list(shape))
        assert_all_match(by_size.execute([x]), by_int.execute([x]), tol=(0.0, 0.0))
        assert_matches(by_size.execute([x])[2], torch.arange(shape[0]) * 2 + 1)


def test_at_getitem_and_negative_indices():
    with FusionDefinition() as fd:
        t = _input(fd, 3)
        v = fd.ops.shape(t)
        assert v.size == 3
        parts = [fd.ops.at(v, -1), v[0], v.at(1), fd.ops.size(t, -2)]
        fd.add_output(fd.ops.full(parts, 0.5, DataType.Float))
    x = torch.ones(2, 3, 4)
    assert_matches(fd.execute([x])[0], torch.full([4, 2, 3, 3], 0.5))
    assert "fd.ops.at(c0, index=2)" in repr(fd) and "fd.ops.size(tv0, dim=1)" in repr(fd)


def test_define_vector_of_ints_and_sizes():
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        v = fd.define_vector([t.size(1), -1], dtype=DataType.Int)
        fd.add_output(fd.ops.neg(fd.ops.reshape(t, v)))
        fd.add_output(fd.ops.full(fd.define_vector((2, 3)), 1, DataType.Int))
    _check(fd, [(4, 3), (2, 5)], _tensor(torch.float32),
           lambda x: [-x.reshape(x.shape[1], -1), torch.ones(2, 3, dtype=torch.int64)])


def test_define_vector_of_runtime_scalars():
    """define_vector(n): n Int scalar inputs.  The same tensor with other scalar values
    gets other shapes: the scalars' values key the cached launches."""
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        v = fd.define_vector(2)
        fd.add_output(fd.ops.mul(fd.ops.reshape(t, v), 2.0))
        fd.add_output(fd.ops.full(fd.define_vector([v[1], v[0]]), 1.0, DataType.Float))
    x = make_tensor((4, 6), torch.float32, gen_for("dv-runtime"))
    for a, b in [(3, 8), (2, 12), (24, 1), (3, 8)]:
        got = fd.execute([x, a, b])
        assert_all_match(got, [(x * 2).reshape(a, b), torch.ones(b, a)])
    assert len(fd._runtime.programs) == 3
    with raises("execute", "reshape", "[4, 6]", "[5, 5]"):
        fd.execute([x, 5, 5])


def test_runtime_scalars_and_their_arithmetic_as_shapes():
    with FusionDefinition() as fd:
        t = _input(fd, 1)
        rows = fd.define_scalar(dtype=DataType.Int)
        cols = fd.ops.div(fd.ops.size(t, 0), rows)  # true division: a Double, not a size
        half = fd.ops.mul(rows, 2)
        fd.add_output(fd.ops.reshape(t, [half, -1]))
        fd.add_output(fd.ops.mul(t, cols))
    x = make_tensor((12,), torch.float32, gen_for("rt-arith"))
    for r in (2, 3, 1):
        assert_all_match(fd.execute([x, r]), [x.reshape(2 * r, -1), x * (12 / r)])


def test_known_sizes_give_definition_time_shapes():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[4, -1, 3], contiguity=[True] * 3)
        r = fd.ops.reshape(t, [fd.ops.mul(t.size(0), t.size(2)), -1])
        f = fd.ops.full(fd.ops.shape(t), 0.0, DataType.Float)
        fd.add_output(r)
        fd.add_output(f)
    assert r.shape == (12, None) and f.shape == (4, None, 3)
    with raises("reshape", "[4, 6]", "24 elements", "[4, 5]"):
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[4, 6], contiguity=[True, True])
            fd.ops.reshape(t, [t.size(0), 5])


def test_legacy_api_and_validate():
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.div(fd.ops.sum(t, [1]), fd.ops.size(t, 1)))
    x = make_tensor((3, 7), torch.float32, gen_for("legacy"))
    assert_matches(fs.execute([x])[0], x.mean(1))
    fd.validate([x])


# --- repr(fd) ------------------------------------------------------------------------------------


def test_round_trip():
    with FusionDefinition() as fd:
        t = _input(fd, 3, torch.bfloat16)
        v = fd.define_vector(1)
        shape = fd.ops.shape(t)
        n = fd.ops.mul(fd.ops.size(t, 0), fd.ops.at(shape, 1))
        flat = fd.ops.reshape(t, fd.define_vector([n, -1]))
        mean = fd.ops.div(fd.ops.sum(flat, [1]), fd.ops.at(shape, -1))
        fd.add_output(fd.ops.add(fd.ops.full(shape, 1.5, DataType.BFloat16), t))
        fd.add_output(mean)
        fd.add_output(fd.ops.iota(v[0], 0, 1, DataType.Int))
        fd.add_output(fd.ops.uniform(0.0, 1.0, shape=[n, 2], rng_seed=1, rng_offset=0))
    text = repr(fd)
    for fragment in ("c2 = fd.ops.shape(tv0)", "fd.ops.size(tv0, dim=0)", "fd.ops.at(c2, index=2)",
                     "fd.define_vector([c0], dtype=DataType.Int)", "new_shape=c6", "shape=c2"):
        assert fragment in text, fragment
    x = make_tensor((2, 3, 4), torch.bfloat16, gen_for("rt-sizes"))
    assert_round_trip(fd, [x, 5])


# --- errors ---------------------------------------------------------------------------------------


def _define(build):
    with FusionDefinition() as fd:
        build(fd, fd.define_tensor(shape=[-1, -1], contiguity=[True, True]))
    return fd


def test_size_errors():
    with raises("size", "dim 2", "rank 2", "-2 <= dim < 2"):
        _define(lambda fd, t: fd.ops.size(t, 2))
    with raises("size", "dim -3", "rank 2"):
        _define(lambda fd, t: fd.ops.size(t, -3))
    with raises("size", "arg", "tensor", "scalar S1", kind=TypeError):
        _define(lambda fd, t: fd.ops.size(fd.define_scalar(dtype=DataType.Int), 0))
    with raises("size", "arg", "tensor", "int 3", kind=TypeError):
        _define(lambda fd, t: fd.ops.size(3, 0))
    with raises("size", "dim", "an int", "str", kind=TypeError):
        _define(lambda fd, t: fd.ops.size(t, "0"))
    with raises("size", "rank 0"):
        _define(lambda fd, t: fd.ops.size(fd.define_tensor(shape=[], contiguity=[]), 0))
    with raises("shape", "arg", "tensor", kind=TypeError):
        _define(lambda fd, t: fd.ops.shape(fd.ops.shape(t)))


def test_at_errors():
    with raises("at", "index 2", "V1", "size 2", "-2 <= index < 2"):
        _define(lambda fd, t: fd.ops.at(fd.ops.shape(t), 2))
    with raises("at", "index -3", "size 2"):
        _define(lambda fd, t: fd.ops.shape(t)[-3])
    with raises("at", "arg", "Vector", "tensor T0", kind=TypeError):
        _define(lambda fd, t: fd.ops.at(t, 0))
    with raises("at", "arg", "Vector", "list", kind=TypeError):
        _define(lambda fd, t: fd.ops.at([1, 2], 0))
    with raises("at", "index", "an int", "float", kind=TypeError):
        _define(lambda fd, t: fd.ops.at(fd.ops.shape(t), 0.5))


def test_define_vector_errors():
    with raises("define_vector", "dtype", "DataType.Int", "DataType.Float"):
        _define(lambda fd, t: fd.define_vector([1, 2], dtype=DataType.Float))
    with raises("define_vector", "values", "ints >= 0 or -1", "-2"):
        _define(lambda fd, t: fd.define_vector([-2]))
    with raises("define_vector", "values", "Int scalars", "Double", kind=TypeError):
        _define(lambda fd, t: fd.define_vector([fd.define_scalar(dtype=DataType.Double)]))
    with raises("define_vector", "size", "int >= 0", "-1"):
        _define(lambda fd, t: fd.define_vector(size=-1))


def test_shape_argument_errors():
    with raises("reshape", "new_shape", "Int scalars", "floating", "dtype DataType.Bool", kind=TypeError):
        _define(lambda fd, t: fd.ops.reshape(t, [fd.ops.cast(t.size(0), DataType.Bool), -1]))
    with raises("full", "shape", "Int scalars", "tensor T0", kind=TypeError):
        _define(lambda fd, t: fd.ops.full([t], 1.0, DataType.Float))
    with raises("add", "rhs", "Vector V1", kind=TypeError):
        _define(lambda fd, t: fd.ops.add(t, fd.ops.shape(t)))
    with raises("expand", "fewer dims", "rank 2"):
        _define(lambda fd, t: fd.ops.expand(t, fd.define_vector([3])))
    other = _define(lambda fd, t: fd.ops.shape(t))
    with raises("reshape", "belongs to another FusionDefinition"):
        _define(lambda fd, t: fd.ops.reshape(t, other.ir.vals[-1]))


def test_sizes_checked_at_execute_time():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        n = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.full([fd.ops.sub(t.size(0), n)], 1.0, DataType.Float))
    with raises("execute", "full", "shape", "S3", "-1", "expected an int >= 0"):
        fd.execute([torch.ones(3), 4])
    assert_matches(fd.execute([torch.ones(3), 1])[0], torch.ones(2))
