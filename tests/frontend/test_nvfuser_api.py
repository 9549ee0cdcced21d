"""nvFuser's current frontend spellings, run against eager: ``fd.from_pytorch``,
``define_scalar(DataType.X)``, ``T.shape()`` and ``T.size(i)`` as values, the
subclass style, tuples of inputs, ``slice(manual_normalization=)``, the
``stride_order`` and ``segment_set`` hints, take_along_axis broadcasting,
embedding_fwd with runtime options, and errors that are RuntimeErrors too.  Each
definition also round-trips through ``repr(fd)``."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from pyfuser import DataType, DefinitionError, FusionDefinition, InputError, compute_tensor_descriptor

from ..helpers import assert_all_match, gen_for, make_tensor
from .test_printer import assert_round_trip


def _rand(shape, dtype=torch.float32, name="x"):
    return make_tensor(shape, dtype, gen_for("nvf-api", name, *shape))


# --- inputs -----------------------------------------------------------------------------


def test_from_pytorch_takes_dtype_broadcasts_and_layout():
    x = _rand((4, 1, 6))
    y = _rand((6, 4)).t()  # column-major
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        t1 = fd.from_pytorch(y)
        fd.add_output(fd.ops.add(t0, fd.ops.broadcast_in_dim(t1, [4, 1, 6], [0, 2])))
    assert t0.shape == (None, 1, None) and t0.contiguity == (True, None, True)
    assert t1.stride_order == (0, 1)
    assert_all_match(fd.execute([x, y]), [x + y[:, None, :]])
    assert_round_trip(fd, [x, y])


@pytest.mark.parametrize("sizes, strides, contiguity, order", [
    ((3, 4), (4, 1), [True, True], [1, 0]),
    ((3, 4), (1, 3), [True, True], [0, 1]),  # column-major: contiguity lists dim 1 first
    ((3, 4), (8, 1), [False, True], [1, 0]),
    ((3, 1, 4), (4, 4, 1), [True, None, True], [2, 1, 0]),
    ((3, 5, 4), (4, 0, 1), [True, None, True], [2, 1, 0]),  # expanded dim 1 keeps its place
    ((2, 3, 4), (1, 8, 2), [True, True, True], [0, 2, 1]),
    ((2, 3), (0, 0), [None, None], [1, 0]),
])
def test_compute_tensor_descriptor(sizes, strides, contiguity, order):
    assert compute_tensor_descriptor(sizes, strides) == (contiguity, order)
    extent = 1 + sum((n - 1) * st for n, st in zip(sizes, strides))
    base = torch.randn(extent, generator=gen_for("desc", *strides))
    x = base.as_strided(sizes, strides)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.mul(fd.from_pytorch(x), 2.0))
    assert_all_match(fd.execute([x]), [x * 2.0])
    assert_round_trip(fd, [x])


def test_contiguity_is_listed_in_allocation_order():
    x = torch.empty_strided((4, 6), (1, 8)).normal_(generator=gen_for("alloc"))  # dim 1 outer, gaps in it
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], stride_order=[0, 1])
        fd.add_output(fd.ops.neg(t0))
    assert t0.contiguity == (True, False)  # per dim
    assert_all_match(fd.execute([x]), [-x])
    with pytest.raises(InputError, match="declared contiguous in dim 0"):
        fd.execute([x[::2]])


def test_from_pytorch_static_sizes_fixes_the_extents():
    x = _rand((3, 5))
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x, static_sizes=True)
        fd.add_output(fd.ops.neg(t0))
    assert t0.shape == (3, 5)
    assert_all_match(fd.execute([x]), [-x])
    with pytest.raises(InputError):
        fd.execute([_rand((3, 6))])


def test_from_pytorch_rejects_what_is_not_a_tensor():
    with FusionDefinition() as fd, pytest.raises(TypeError, match="from_pytorch: expected a torch.Tensor"):
        fd.from_pytorch([1.0, 2.0])


def test_define_scalar_by_dtype_is_a_runtime_input():
    x = _rand((4, 5))
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        s1 = fd.define_scalar(DataType.Double)
        s2 = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.add(t0, s1), s2))
    assert not s1.is_constant and s1.dtype is DataType.Double and s2.dtype is DataType.Int
    assert_all_match(fd.execute([x, 0.5, 3]), [(x + 0.5) * 3])
    assert_round_trip(fd, [x, 0.5, 3])


def test_execute_takes_a_tuple_of_inputs():
    x = _rand((4, 5))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.exp(fd.from_pytorch(x)))
    assert_all_match(fd.execute((x,)), [x.exp()])
    assert_all_match(fd.execute((x,)), [x.exp()])  # the cached path too


# --- sizes as values --------------------------------------------------------------------


def test_shape_call_and_size_feed_later_ops():
    x, y = _rand((2, 3, 4)), _rand((4,), name="y")
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        t1 = fd.from_pytorch(y)
        b = fd.ops.broadcast_in_dim(t1, t0.shape(), [2])
        r = fd.ops.reshape(t0, [t0.size(0), fd.ops.mul(t0.size(1), t0.size(2))])
        f = fd.ops.full(t0.shape(), 2.0, DataType.Float)
        fd.add_output(fd.ops.add(t0, b))
        fd.add_output(r)
        fd.add_output(f)
    assert t0.shape == (None, None, None) and t0.shape[1] is None  # the definition's extents still read
    for shape in ((2, 3, 4), (5, 1, 4)):
        x = _rand(shape)
        assert_all_match(fd.execute([x, y]), [x + y, x.reshape(shape[0], -1), torch.full(shape, 2.0)])
    assert_round_trip(fd, [x, y])


# --- the subclass style -----------------------------------------------------------------


class _Square(FusionDefinition):
    def definition(self):
        t0 = self.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        self.add_output(self.ops.mul(t0, t0))


def test_subclass_defines_itself_on_first_execute():
    x = _rand((3, 4))
    fd = _Square()
    assert_all_match(fd.execute([x]), [x * x])
    assert_all_match(fd.execute([x]), [x * x])  # defined once
    assert repr(fd).count("define_tensor") == 1


# --- ops --------------------------------------------------------------------------------


@pytest.mark.parametrize("manual", [False, True])
def test_slice_manual_normalization(manual):
    x = _rand((6, 8))
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.slice(t0, [1, 2], [5, 8], [1, 1], manual_normalization=manual))
    assert_all_match(fd.execute([x]), [x[1:5, 2:8]])
    assert_round_trip(fd, [x])


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_stride_order_lays_the_output_out(order):
    x = _rand((2, 3, 4))
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.stride_order(fd.ops.add(t0, 3.0), order))
    (out,) = fd.execute([x])
    assert_all_match([out], [x + 3.0])
    by_rank = sorted(range(3), key=lambda d: order[d])  # innermost first
    strides = [out.stride(d) for d in by_rank]
    assert strides == sorted(strides) and strides[0] == 1
    assert "fd.ops.stride_order(" in repr(fd)
    assert_round_trip(fd, [x])


def test_stride_order_after_a_reduction():
    x = _rand((2, 3, 4, 5))
    with FusionDefinition() as fd:
        t1 = fd.ops.sum(fd.from_pytorch(x), dims=[2])
        fd.add_output(fd.ops.stride_order(t1, [0, 2, 1]))
    (out,) = fd.execute([x])
    assert_all_match([out], [x.sum(2)])
    assert out.stride(1) > out.stride(2) > out.stride(0) == 1  # dim 1 outermost, dim 0 innermost


def test_stride_order_must_be_a_permutation():
    with FusionDefinition() as fd, pytest.raises(DefinitionError, match="permutation of 0..1"):
        fd.ops.stride_order(fd.define_tensor(shape=[-1, -1]), [0, 0])


def test_segment_set_is_the_identity():
    x = _rand((5, 5, 5))
    with FusionDefinition() as fd:
        t1 = fd.ops.neg(fd.from_pytorch(x))
        fd.add_output(fd.ops.relu(fd.ops.segment_set(t1)))
    assert_all_match(fd.execute([x]), [x.neg().relu()])
    assert "fd.ops.segment_set(" in repr(fd)
    assert_round_trip(fd, [x])


@pytest.mark.parametrize("xs, idx, dim", [((4, 1, 5), (4, 3, 2), 2), ((1, 6), (3, 6), 1), ((3, 6), (3, 1), 0)])
def test_take_along_axis_broadcasts_as_torch(xs, idx, dim):
    x = _rand(xs)
    i = torch.randint(0, xs[dim], idx, generator=gen_for("idx", *idx))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.take_along_axis(fd.from_pytorch(x), fd.from_pytorch(i), dim))
    assert_all_match(fd.execute([x, i]), [torch.take_along_dim(x, i, dim)])
    assert_round_trip(fd, [x, i])


def test_take_along_axis_rejects_extents_that_do_not_broadcast():
    with FusionDefinition() as fd, pytest.raises(DefinitionError, match="do not broadcast"):
        x = fd.define_tensor(shape=[4, 5])
        fd.ops.take_along_axis(x, fd.define_tensor(shape=[3, 5], dtype=DataType.Int), 1)


@pytest.mark.parametrize("given", [(0, 1), (0, 2, 3), (1, 2, 3, 4), ()])
def test_embedding_options_as_runtime_scalars(given):
    values = [-2, 1e-2, 1.0, True, False]
    dtypes = [DataType.Int, DataType.Float, DataType.Float, DataType.Bool, DataType.Bool]
    idx = torch.randint(0, 10, (7,), generator=gen_for("emb"))
    w = _rand((10, 3), torch.bfloat16, "w")
    with FusionDefinition() as fd:
        t0, t1 = fd.from_pytorch(idx), fd.from_pytorch(w)
        opts = [fd.define_scalar(None, dtype=dtypes[k]) if k in given else None for k in range(5)]
        fd.add_output(fd.ops.embedding_fwd(t0, t1, *opts))
    inputs = [idx, w] + [values[k] for k in given]
    kw = dict(zip(["padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"],
                  [values[k] if k in given else d for k, d in enumerate([None, None, 2.0, False, False])]))
    w_before = w.clone()
    assert_all_match(fd.execute(inputs), [F.embedding(idx, w.clone(), **kw)])
    assert torch.equal(w, w_before)  # max_norm renormalises a copy
    assert_round_trip(fd, inputs)


# --- errors -----------------------------------------------------------------------------


def test_errors_are_runtime_errors_as_in_nvfuser():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1])
        with pytest.raises(RuntimeError, match="permute"):
            fd.ops.permute(t0, [0])
        with pytest.raises(RuntimeError):
            fd.ops.add(t0, [1])  # also a TypeError
        fd.add_output(fd.ops.neg(t0))
    with pytest.raises(RuntimeError) as info:
        fd.execute([torch.ones(2, 3, 4)])
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("given", [list, tuple])
def test_a_vector_input_takes_one_list_or_its_scalars(given):
    x = _rand((2, 3, 4))
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.reshape(t0, fd.define_vector(2)))
    assert_all_match(fd.execute([x, given([6, 4])]), [x.reshape(6, 4)])
    assert_all_match(fd.execute([x, 4, 6]), [x.reshape(4, 6)])


def test_reductions_take_a_dtype_in_place_of_dims():
    x = torch.ones(2, 4, 8)
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.prod(t0, DataType.Float))
        fd.add_output(fd.ops.sum(t0, 1, False, DataType.Double))
    got = fd.execute([x])
    assert_all_match(got, [x.prod(), x.sum(1, dtype=torch.float64)])
    assert got[1].dtype == torch.float64
    assert_round_trip(fd, [x])


def test_values_say_whether_they_are_tensors():
    """nvFuser's ``is_tensor()``/``is_scalar()``: an op on two scalars gives a scalar,
    which definitions written for nvFuser skip when choosing outputs."""
    x = _rand((4,))
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        s = fd.define_scalar(-1.0, dtype=DataType.Double)
        kinds = []
        for a, b in itertools.product([t, s], [t, s]):
            v = fd.ops.nextafter(a, b)
            kinds.append((v.is_tensor(), v.is_scalar()))
            if v.is_tensor():
                fd.add_output(v)
    assert kinds == [(True, False), (True, False), (True, False), (False, True)]
    outs = fd.execute([x])
    minus_one = torch.tensor(-1.0, dtype=torch.float64)
    want = [torch.nextafter(x, x), torch.nextafter(x, minus_one.float()), torch.nextafter(minus_one.float(), x)]
    assert_all_match(outs, want)
