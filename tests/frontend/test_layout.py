"""Layout and creation ops through ``fd.execute`` against eager: broadcast_in_dim
(including the report's rank-preserving expansion of size-1 dims), broadcast, expand,
reshape (with -1), the 2022 view, permute, squeeze, slice, pad, cat, full, iota."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, Fusion, FusionDefinition
from pyfuser.ir.dtypes import from_torch

from ..helpers import assert_matches, gen_for, make_tensor


def _input(fd, x, symbolic=True):
    shape = [-1 if symbolic and s != 1 else s for s in x.shape]
    return fd.define_tensor(shape=shape, contiguity=[True] * x.dim(), dtype=from_torch(x.dtype))


def run_layout(x, build, *, symbolic=True):
    with FusionDefinition() as fd:
        out = build(fd, _input(fd, x, symbolic))
        for o in out if isinstance(out, tuple) else (out,):
            fd.add_output(o)
    return fd.execute([x])


# --- broadcast_in_dim / broadcast / expand ------------------------------------------

BID_CASES = [
    # (input shape, output shape, broadcast_dims)
    ((5,), [3, 5], [1]),
    ((3,), [3, 5], [0]),
    ((3, 1), [3, 5], [0, 1]),  # the report's T17 -> T18: expand a size-1 dim, same rank
    ((2, 1, 1, 4), [2, 3, 5, 4], [0, 1, 2, 3]),  # the report's T11 -> T13 (the attention mask)
    ((4,), [2, 3, 4], [2]),
    ((3, 4), [3, 2, 4], [0, 2]),
    ((1,), [2, 3], [1]),
    ((), [2, 3], []),
    ((3, 4), [3, 4], [0, 1]),  # identity
]


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "concrete"])
@pytest.mark.parametrize("case", BID_CASES, ids=lambda c: f"{list(c[0])}->{c[1]}@{c[2]}")
def test_broadcast_in_dim(case, symbolic):
    in_shape, out_shape, bdims = case
    x = make_tensor(in_shape, torch.float32, gen_for(case))
    (got,) = run_layout(x, lambda fd, t: fd.ops.broadcast_in_dim(t, shape=out_shape, broadcast_dims=bdims),
                        symbolic=symbolic)
    view = [1] * len(out_shape)
    for i, d in enumerate(bdims):
        view[d] = in_shape[i]
    assert_matches(got.contiguous(), x.reshape(view).expand(out_shape).contiguous())


def test_broadcast_in_dim_legacy_spelling_and_minus_one():
    x = make_tensor((3, 1), torch.float16, gen_for("bid-legacy"))
    (got,) = run_layout(x, lambda fd, t: fd.ops.broadcast_in_dim(t, output_shape=[3, 6], broadcast_dims=[0, 1]))
    assert_matches(got, x.expand(3, 6))
    x = make_tensor((3, 4), torch.float16, gen_for("bid-minus-one"))
    (got,) = run_layout(x, lambda fd, t: fd.ops.broadcast_in_dim(t, shape=[-1, 2, -1], broadcast_dims=[0, 2]))
    assert_matches(got, x[:, None, :].expand(3, 2, 4))


def test_broadcast_then_elementwise():
    """A broadcast feeding arithmetic: the broadcast input is read, not copied wrong."""
    x = make_tensor((4, 6), torch.float32, gen_for("bte-x"))
    b = make_tensor((6,), torch.float32, gen_for("bte-b"))
    with FusionDefinition() as fd:
        tx, tb = _input(fd, x), _input(fd, b)
        fd.add_output(fd.ops.mul(tx, fd.ops.broadcast_in_dim(tb, shape=[4, 6], broadcast_dims=[1])))
        fd.add_output(fd.ops.add(fd.ops.broadcast(tb, [True, False]), 1.0))
    got, got2 = fd.execute([x, b])
    assert_matches(got, x * b)
    assert_matches(got2, (b + 1.0)[None, :])


@pytest.mark.parametrize("case", [((3,), [4, 3]), ((3, 1), [3, 5]), ((1, 5), [2, 4, 5]), ((3, 1), [-1, 4])],
                         ids=str)
def test_expand(case):
    in_shape, shape = case
    x = make_tensor(in_shape, torch.float32, gen_for("expand", case))
    (got,) = run_layout(x, lambda fd, t: fd.ops.expand(t, shape=shape))
    assert_matches(got.contiguous(), x.expand(shape).contiguous())


# --- reshape / view -------------------------------------------------------------------

RESHAPE_CASES = [
    ((4, 6), [24]),
    ((4, 6), [2, 2, 6]),
    ((4, 6), [-1, 3]),
    ((2, 3, 4), [6, -1]),
    ((2, 3, 4), [4, 3, 2]),
    ((24,), [2, -1, 4]),
    ((1, 5), [5]),
    ((5,), [5, 1]),
]


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "concrete"])
@pytest.mark.parametrize("case", RESHAPE_CASES, ids=lambda c: f"{list(c[0])}->{c[1]}")
def test_reshape(case, symbolic):
    in_shape, new_shape = case
    x = make_tensor(in_shape, torch.float32, gen_for("reshape", case))
    (got,) = run_layout(x, lambda fd, t: fd.ops.exp(fd.ops.reshape(t, new_shape)), symbolic=symbolic)
    assert_matches(got, torch.exp(x.reshape(new_shape)))


def test_legacy_view_resolves_minus_one_and_chains():
    """The report's two views at the top of a fusion, then arithmetic on the result."""
    x = make_tensor((6, 10), torch.float16, gen_for("view"))
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Half)
        t1 = fd.ops.view(t0, original_shape=[6, 10], new_shape=[2, 3, 10])
        t2 = fd.ops.view(t1, original_shape=[2, 3, 10], new_shape=[-1, 10])
        fd.add_output(fd.ops.mul(fd.ops.cast(t2, DataType.Float), 2.0))
        fd.add_output(t1)
    got, got_view = fs.execute([x])
    assert_matches(got, x.float() * 2.0)
    assert_matches(got_view, x.view(2, 3, 10))
    assert "new_shape=[6, 10]" in repr(fd)


def test_reshape_of_non_contiguous_input():
    x = make_tensor((6, 4), torch.float32, gen_for("nc-reshape")).t()  # [4, 6], strides (1, 4)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], stride_order=[0, 1], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(fd.ops.reshape(t, [2, 12])))
    (got,) = fd.execute([x])
    assert_matches(got, -x.reshape(2, 12))


# --- permute / squeeze / slice / pad / cat ---------------------------------------------


@pytest.mark.parametrize("dims", [[1, 0, 2], [2, 0, 1], [0, 1, 2], [-1, 0, 1]], ids=str)
def test_permute(dims):
    x = make_tensor((2, 3, 4), torch.float32, gen_for("permute", dims))
    (got,) = run_layout(x, lambda fd, t: fd.ops.add(fd.ops.permute(t, dims), 0.5))
    assert_matches(got, x.permute(dims) + 0.5)


@pytest.mark.parametrize("case", [((3, 1, 4), [1]), ((1, 3, 1), [0, 2]), ((1, 3, 1), [-1]), ((1,), [0])], ids=str)
def test_squeeze(case):
    in_shape, dims = case
    x = make_tensor(in_shape, torch.float32, gen_for("squeeze", case))
    (got,) = run_layout(x, lambda fd, t: fd.ops.mul(fd.ops.squeeze(t, dims), 3.0))
    assert_matches(got, x.squeeze(dims) * 3.0)


SLICE_CASES = [
    ([0, 0], [3, 5], None),
    ([1, 2], [4, 7], None),
    ([0, 1], [5, 7], [2, 3]),
    ([2, 0], [100, 7], [1, 2]),  # an end past the extent is clamped, as in Python
    ([-3, 0], [5, -1], None),  # negative indices count from the end
]


@pytest.mark.parametrize("case", SLICE_CASES, ids=str)
def test_slice(case):
    starts, ends, steps = case
    x = make_tensor((5, 7), torch.float32, gen_for("slice", case))
    (got,) = run_layout(x, lambda fd, t: fd.ops.sub(fd.ops.slice(t, starts, ends, steps), 1.0))
    steps = steps or [1, 1]
    want = x[starts[0]:ends[0]:steps[0], starts[1]:ends[1]:steps[1]] - 1.0
    assert_matches(got, want)


@pytest.mark.parametrize("case", [([1, 2], 0.0), ([0, 0, 2, 1], -1.5), ([3, 0], 7.0), ([1, 1, 1, 1], 2.0)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32], ids=str)
def test_pad(case, dtype):
    widths, value = case
    value = int(value) if not dtype.is_floating_point else value
    x = make_tensor((3, 4), dtype, gen_for("pad", case, dtype))
    (got,) = run_layout(x, lambda fd, t: fd.ops.pad(t, widths, value))
    assert_matches(got, torch.nn.functional.pad(x, widths, value=value))


def test_pad_default_value_is_zero():
    x = make_tensor((3, 4), torch.float32, gen_for("pad0"))
    (got,) = run_layout(x, lambda fd, t: fd.ops.pad(t, [2, 1]))
    assert_matches(got, torch.nn.functional.pad(x, [2, 1]))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
    gen = gen_for("cat", dim)
    xs = [make_tensor((3, 4), torch.float32, gen),
          make_tensor((3, 4) if dim != 0 else (2, 4), torch.float32, gen),
          make_tensor((3, 2) if dim != 0 else (3, 4), torch.float32, gen)]
    if dim == 0:
        xs[2] = make_tensor((1, 4), torch.float32, gen)
    else:
        xs[1] = make_tensor((3, 5), torch.float32, gen)
    with FusionDefinition() as fd:
        ts = [_input(fd, x) for x in xs]
        fd.add_output(fd.ops.cat(ts, dim))
    (got,) = fd.execute(xs)
    assert_matches(got, torch.cat(xs, dim))


def test_cat_promotes_dtypes():
    a = make_tensor((2, 3), torch.float16, gen_for("cat-a"))
    b = make_tensor((2, 3), torch.float32, gen_for("cat-b"))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.cat([_input(fd, a), _input(fd, b)], 1))
    (got,) = fd.execute([a, b])
    assert_matches(got, torch.cat([a, b], 1))


# --- full / iota ----------------------------------------------------------------------


@pytest.mark.parametrize("case", [([2, 3], 1.5, DataType.Float), ([4], 7, DataType.Int), ([2, 2], True, DataType.Bool),
                                  ([3, 1], -2.5, DataType.Half), ([5], 3, DataType.Int32)], ids=str)
def test_full(case):
    shape, value, dtype = case
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.full(shape, value, dtype))
    (got,) = fd.execute([])
    assert_matches(got, torch.full(shape, value, dtype=dtype.torch))


def test_full_combined_with_an_input():
    x = make_tensor((2, 3), torch.float32, gen_for("full+x"))
    with FusionDefinition() as fd:
        t = _input(fd, x, symbolic=False)
        fd.add_output(fd.ops.add(t, fd.ops.full([2, 3], 0.25, DataType.Float)))
    (got,) = fd.execute([x])
    assert_matches(got, x + 0.25)


@pytest.mark.parametrize("case", [(5, None, None, DataType.Int), (6, 2, 3, DataType.Int), (4, 1.5, 0.5, DataType.Float),
                                  (7, -3, 2, DataType.Int32), (3, 0.0, -1.0, DataType.Double)], ids=str)
def test_iota(case):
    length, start, step, dtype = case
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.iota(length, start, step, dtype))
    (got,) = fd.execute([])
    s, st = (0 if start is None else start), (1 if step is None else step)
    assert_matches(got, (torch.arange(length, dtype=torch.float64) * st + s).to(dtype.torch))
