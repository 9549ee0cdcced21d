"""Reductions (sum, max, min, prod, var, var_mean) through ``fd.execute`` against eager:
dims in both spellings (``dims=``, the 2022 ``axes=``), negative dims, keepdim,
``dtype=``, every input dtype eager accepts, NaN propagation."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition, PyfuserError
from pyfuser.ir.dtypes import from_torch

from ..helpers import ALL_DTYPES, assert_matches, gen_for, make_tensor

SHAPE = (3, 5, 7)
DIMS = [[2], [0], [1], [-1], [0, 2], [-3, -1], [0, 1, 2], None]


def _dtype_id(dt):
    return str(dt).replace("torch.", "")


def _define(dtype, reduce):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=from_torch(dtype))
        outs = reduce(fd, t)
        for o in outs if isinstance(outs, tuple) else (outs,):
            fd.add_output(o)
    return fd


def _eager_dims(dims):
    return list(range(len(SHAPE))) if dims is None else dims


EAGER = {
    "sum": lambda x, d, k, dt: torch.sum(x, d, keepdim=k, dtype=dt),
    "max": lambda x, d, k, dt: torch.amax(x, d, keepdim=k),
    "min": lambda x, d, k, dt: torch.amin(x, d, keepdim=k),
}


@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("dims", DIMS, ids=str)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reduce_dims(op, dims, keepdim):
    x = make_tensor(SHAPE, torch.float32, gen_for(op, dims, keepdim))
    fd = _define(torch.float32, lambda fd, t: getattr(fd.ops, op)(t, dims=dims, keepdim=keepdim))
    (got,) = fd.execute([x])
    assert_matches(got, EAGER[op](x, _eager_dims(dims), keepdim, None), tol=(1e-5, 1e-5))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_reduce_dtypes(op, dtype):
    """Result dtypes are eager's: sum/prod of ints and bools give int64."""
    # prod of [7] values near 1 stays well inside fp16's range.
    x = make_tensor(SHAPE, dtype, gen_for(op, dtype), low=0.5, high=1.5) if op == "prod" and dtype.is_floating_point \
        else make_tensor(SHAPE, dtype, gen_for(op, dtype))
    fd = _define(dtype, lambda fd, t: getattr(fd.ops, op)(t, dims=[2]))
    (got,) = fd.execute([x])
    want = torch.prod(x, 2) if op == "prod" else EAGER[op](x, [2], False, None)
    tol = {torch.float16: (4e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}.get(dtype, (1e-5, 1e-5))
    assert_matches(got, want, tol=tol)


@pytest.mark.parametrize("out_dtype", [DataType.Float, DataType.Double, DataType.Int, DataType.Null], ids=str)
@pytest.mark.parametrize("in_dtype", [torch.float16, torch.int32, torch.bool], ids=_dtype_id)
def test_sum_dtype_argument(in_dtype, out_dtype):
    x = make_tensor(SHAPE, in_dtype, gen_for(in_dtype, out_dtype))
    fd = _define(in_dtype, lambda fd, t: fd.ops.sum(t, dims=[1, 2], dtype=out_dtype))
    (got,) = fd.execute([x])
    want = torch.sum(x, [1, 2], dtype=None if out_dtype is DataType.Null else out_dtype.torch)
    assert_matches(got, want, tol=(4e-3, 1e-3))


@pytest.mark.parametrize("op", ["max", "min", "sum"])
def test_reduce_propagates_nan_and_inf(op):
    x = make_tensor(SHAPE, torch.float32, gen_for(op, "nan"))
    x[0, 1, 3] = float("nan")
    x[1, 2, 0] = float("inf")
    x[2, 4, 6] = float("-inf")
    fd = _define(torch.float32, lambda fd, t: getattr(fd.ops, op)(t, dims=[2]))
    (got,) = fd.execute([x])
    assert_matches(got, EAGER[op](x, [2], False, None))


def test_legacy_axes_spelling():
    x = make_tensor(SHAPE, torch.float16, gen_for("axes"))
    fd = _define(torch.float16, lambda fd, t: (fd.ops.max(t, axes=[2], keepdim=False, dtype=DataType.Null),
                                               fd.ops.sum(t, axes=[0, 1], keepdim=True, dtype=DataType.Float)))
    got_max, got_sum = fd.execute([x])
    assert_matches(got_max, torch.amax(x, 2))
    assert_matches(got_sum, torch.sum(x, [0, 1], keepdim=True, dtype=torch.float32))


@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("dims", [[2], [-1], [0, 2], None], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=_dtype_id)
def test_var_and_var_mean(dtype, dims, keepdim, correction):
    x = make_tensor(SHAPE, dtype, gen_for("var", dtype, dims, keepdim, correction))
    d = _eager_dims(dims)
    fd = _define(dtype, lambda fd, t: (fd.ops.var(t, dims, correction=correction, keepdim=keepdim),)
                 + fd.ops.var_mean(t, dims, correction, keepdim))
    got_var, got_var2, got_mean = fd.execute([x])
    want_var, want_mean = torch.var_mean(x, d, correction=correction, keepdim=keepdim)
    tol = {torch.float32: (1e-5, 1e-5), torch.float16: (4e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}[dtype]
    assert_matches(got_var, want_var, tol=tol)
    assert_matches(got_var2, want_var, tol=tol)
    assert_matches(got_mean, want_mean, tol=tol)


def test_var_of_int_tensor_is_rejected():
    with pytest.raises(PyfuserError, match="var"):
        _define(torch.int64, lambda fd, t: fd.ops.var(t, dims=[0]))


def test_reduction_of_reduction_and_broadcast_back():
    """The softmax pattern: reduce, broadcast_in_dim back, combine with the input."""
    x = make_tensor((4, 9), torch.float32, gen_for("softmax"))

    def build(fd, t):
        m = fd.ops.max(t, dims=[1])
        e = fd.ops.exp(fd.ops.sub(t, fd.ops.broadcast_in_dim(m, shape=[4, 9], broadcast_dims=[0])))
        s = fd.ops.sum(e, dims=[1], keepdim=True)
        return fd.ops.div(e, s), fd.ops.sum(s, dims=[0, 1])

    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        for o in build(fd, t):
            fd.add_output(o)
    probs, total = fd.execute([x])
    want = torch.softmax(x, 1)
    assert_matches(probs, want)
    assert_matches(total, torch.exp(x - x.amax(1, keepdim=True)).sum(), tol=(1e-5, 1e-5))


def test_reduction_over_size_one_and_non_contiguous_input():
    x = make_tensor((7, 1, 5), torch.float32, gen_for("nc")).transpose(0, 2)  # [5, 1, 7], strides (1, 7, 7)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, 1, -1], contiguity=[False, None, False], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(t, dims=[1]))
        fd.add_output(fd.ops.max(t, dims=[0, 2]))
    a, b = fd.execute([x])
    assert_matches(a, x.sum(1))
    assert_matches(b, x.amax([0, 2]))


@pytest.mark.parametrize("normalization", [False, True])
def test_sum_of_a_long_row_of_equal_values(normalization):
    """A float32 sum over 2**21 copies of one value is that value * 2**21 (exact in
    float32) to within 1e-6: the row's lanes do not add one value per chunk along a
    single chain (1 ulp of rounding a step, 8e-6 over 512 chunks).  With
    ``normalization`` the row is also written (as nvFuser issue 2664's repro)."""
    n = 1 << 21
    values = torch.tensor([-0.4893668, 0.7501, 1.3, -2.22222], dtype=torch.float32)
    with FusionDefinition() as fd:
        row = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        s = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        b = fd.ops.broadcast_in_dim(s, shape=[n], broadcast_dims=[])
        fd.add_output(fd.ops.sum(b, dims=[0]))
        if normalization:
            fd.add_output(fd.ops.add(row, b))
    x = torch.zeros(n)
    for v in values:
        got = fd.execute([x, v.clone()])[0].double()
        want = v.double() * n
        assert abs((got - want) / want) < 1e-6, (v.item(), got.item(), want.item())
