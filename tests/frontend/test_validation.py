"""Bad input is refused with a PyfuserError that is also a ValueError or TypeError,
and whose message names the op or argument, what was expected and what was given.
After an execute-time error, the same fusion still runs correctly."""
from __future__ import annotations

import re

import pytest
import torch

from pyfuser import DataType, Fusion, FusionDefinition, PyfuserError

from ..helpers import assert_matches


def raises(*fragments, kind=(ValueError, TypeError)):
    """Context manager: a PyfuserError of ``kind`` whose message holds every fragment."""
    pattern = "".join(f"(?=.*{re.escape(f)})" for f in fragments)
    return _Raises(pattern, kind)


class _Raises:
    def __init__(self, pattern, kind):
        self.pattern, self.kind = pattern, kind

    def __enter__(self):
        self.ctx = pytest.raises(PyfuserError)
        self.info = self.ctx.__enter__()
        return self.info

    def __exit__(self, *exc):
        handled = self.ctx.__exit__(*exc)
        err = self.info.value
        assert isinstance(err, self.kind), f"{type(err).__name__} is not a {self.kind}"
        assert re.search(self.pattern, str(err), re.S), f"message {str(err)!r} lacks {self.pattern}"
        return handled


def neg_fusion(shape=(-1, -1), dtype=DataType.Float, contiguity=None):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=list(shape), contiguity=contiguity or [True] * len(shape), dtype=dtype)
        fd.add_output(fd.ops.neg(t))
    return fd


def assert_still_runs(fd, inputs, want):
    (got,) = fd.execute(inputs)
    assert_matches(got, want)


X = torch.tensor([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]])


# --- execute-time: inputs that contradict the definition --------------------------


def test_wrong_number_of_inputs():
    fd = neg_fusion()
    with raises("execute", "expected 1 input", "got 2"):
        fd.execute([X, X])
    with raises("execute", "expected 1 input", "got 0"):
        fd.execute([])
    assert_still_runs(fd, [X], -X)


def test_wrong_dtype():
    fd = neg_fusion()
    with raises("input 0", "dtype", "Float", "Half"):
        fd.execute([X.half()])
    assert_still_runs(fd, [X], -X)


def test_wrong_rank():
    fd = neg_fusion()
    with raises("input 0", "rank 2", "rank 1"):
        fd.execute([X[0]])
    assert_still_runs(fd, [X], -X)


def test_size_contradicts_a_concrete_size():
    fd = neg_fusion(shape=(2, -1))
    with raises("input 0", "dim 0", "size 2", "got 3"):
        fd.execute([torch.ones(3, 3)])
    assert_still_runs(fd, [X], -X)


def test_transposed_tensor_declared_contiguous():
    fd = neg_fusion()
    with raises("input 0", "contiguous", "strides"):
        fd.execute([X.t().contiguous().t()])  # shape [2, 3] with strides (1, 2)
    assert_still_runs(fd, [X], -X)


def test_strided_tensor_declared_contiguous():
    fd = neg_fusion(shape=(-1,))
    with raises("input 0", "contiguous", "strides"):
        fd.execute([torch.arange(10.0)[::2]])
    assert_still_runs(fd, [X[0]], -X[0])


def test_non_tensor_where_a_tensor_is_expected():
    fd = neg_fusion()
    with raises("input 0", "torch.Tensor", "float", kind=TypeError):
        fd.execute([1.5])
    with raises("inputs must be a list", kind=TypeError):
        fd.execute(X)
    assert_still_runs(fd, [X], -X)


def test_wrong_scalar_input():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.mul(t, s))
    with raises("input 1", "Int", "str", kind=TypeError):
        fd.execute([X, "3"])
    with raises("input 1", "Int", "float", kind=TypeError):
        fd.execute([X, 2.5])
    assert_still_runs(fd, [X, 3], X * 3)


def test_inputs_on_different_devices_or_unsupported_dtype():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(t))
    with raises("input 0", "complex", kind=(TypeError, ValueError)):
        fd.execute([torch.ones(3, dtype=torch.complex64)])


def test_mismatched_shapes_at_execute_time():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.add(a, b))
    with raises("add", "[2, 3]", "[4, 3]", "broadcast"):
        fd.execute([X, torch.ones(4, 3)])
    assert_still_runs(fd, [X, torch.ones(2, 3)], X + 1)
    assert_still_runs(fd, [X, torch.ones(1, 3)], X + 1)  # broadcasting a size-1 dim is fine


def test_reshape_element_count_at_execute_time():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.reshape(t, [3, 2]))
    with raises("reshape", "[2, 4]", "8 elements", "[3, 2]"):
        fd.execute([torch.ones(2, 4)])
    assert_still_runs(fd, [X], X.reshape(3, 2))


def test_view_original_shape_contradicted_at_execute_time():
    """The 2022 view states the input's sizes; an input of other sizes (even with the
    same element count) is refused, not silently reshaped."""
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.view(t, original_shape=[2, 3], new_shape=[3, 2]))
    with raises("view", "original_shape [2, 3]", "[3, 2]"):
        fs.execute([torch.ones(3, 2)])
    assert_still_runs(fs, [X], X.reshape(3, 2))


def test_broadcast_in_dim_extent_at_execute_time():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.broadcast_in_dim(t, shape=[2, 3], broadcast_dims=[1]))
    with raises("broadcast_in_dim", "extent 4", "extent 3"):
        fd.execute([torch.ones(4)])
    assert_still_runs(fd, [X[0]], X[0].expand(2, 3))


# --- definition time -----------------------------------------------------------------


def _define(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


def _t(fd, shape=(4, 8), dtype=DataType.Float):
    return fd.define_tensor(shape=list(shape), contiguity=[True] * len(shape), dtype=dtype)


def test_mismatched_shapes_at_definition_time():
    with raises("add", "[4, 8]", "[5, 8]", "dim 0"):
        _define(lambda fd: fd.ops.add(_t(fd, (4, 8)), _t(fd, (5, 8))))


def test_reshape_with_a_different_element_count():
    with raises("reshape", "[4, 8]", "32 elements", "[5, 7]", "35 elements"):
        _define(lambda fd: fd.ops.reshape(_t(fd), [5, 7]))
    with raises("reshape", "-1"):
        _define(lambda fd: fd.ops.reshape(_t(fd), [-1, -1]))
    with raises("view", "[3, 7]"):
        _define(lambda fd: fd.ops.view(_t(fd), original_shape=[4, 8], new_shape=[3, 7]))
    with raises("view", "original_shape", "dim 0", "4"):
        _define(lambda fd: fd.ops.view(_t(fd), original_shape=[5, 8], new_shape=[40]))


@pytest.mark.parametrize("case", [
    ([4, 8, 3], [0, 2], "input dim 1"),  # 8 cannot broadcast to 3
    ([4, 8, 3], [1, 0], "strictly increasing"),
    ([4, 8, 3], [0], "one entry per input dim"),
    ([4, 8], [0, 2], "out of range"),
    ([4, 8, 3], [0, 0], "strictly increasing"),
], ids=lambda c: f"{c[0]}@{c[1]}")
def test_bad_broadcast_dims(case):
    shape, bdims, fragment = case
    with raises("broadcast_in_dim", fragment):
        _define(lambda fd: fd.ops.broadcast_in_dim(_t(fd), shape=shape, broadcast_dims=bdims))


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod", "var"])
def test_reduction_dims_out_of_range_or_repeated(op):
    with raises(op, "dims", "2", "out of range", "rank 2"):
        _define(lambda fd: getattr(fd.ops, op)(_t(fd), dims=[2]))
    with raises(op, "-3", "out of range"):
        _define(lambda fd: getattr(fd.ops, op)(_t(fd), dims=[-3]))
    with raises(op, "repeats", "[1, -1]"):
        _define(lambda fd: getattr(fd.ops, op)(_t(fd), dims=[1, -1]))
    with raises(op, "2", "out of range"):  # the 2022 spelling
        _define(lambda fd: getattr(fd.ops, op)(_t(fd), axes=[2]))


def test_permute_dims_out_of_range_repeated_or_missing():
    with raises("permute", "repeats", "[0, 0]"):
        _define(lambda fd: fd.ops.permute(_t(fd), [0, 0]))
    with raises("permute", "2", "out of range"):
        _define(lambda fd: fd.ops.permute(_t(fd), [0, 2]))
    with raises("permute", "each of the 2 dims"):
        _define(lambda fd: fd.ops.permute(_t(fd), [1]))


def test_squeeze_of_a_non_size_one_dim():
    with raises("squeeze", "dim 0", "extent 4", "expected 1"):
        _define(lambda fd: fd.ops.squeeze(_t(fd), [0]))


def test_value_from_another_fusion_definition():
    with FusionDefinition() as other:
        foreign = _t(other)
    with raises("add", "T0", "another FusionDefinition"):
        _define(lambda fd: fd.ops.add(_t(fd), foreign))
    with raises("add_output", "another FusionDefinition"):
        _define(lambda fd: fd.add_output(foreign))


@pytest.mark.parametrize("bad", [3, 2.5, "T0", None, torch.ones(2)], ids=repr)
def test_add_output_of_a_non_value(bad):
    with raises("add_output", "expected a tensor", kind=TypeError):
        _define(lambda fd: fd.add_output(bad))


def test_add_output_of_a_scalar():
    with raises("add_output", "scalar", kind=TypeError):
        _define(lambda fd: fd.add_output(fd.define_scalar(1.0)))


@pytest.mark.parametrize("case", [
    ("sum", lambda fd: fd.ops.sum(3.0, dims=[0])),
    ("neg", lambda fd: fd.ops.neg([1, 2])),
    ("add", lambda fd: fd.ops.add(_t(fd), torch.ones(4, 8))),
    ("broadcast_in_dim", lambda fd: fd.ops.broadcast_in_dim(fd.define_scalar(1.0), shape=[2], broadcast_dims=[])),
    ("reshape", lambda fd: fd.ops.reshape("T0", [4])),
    ("cast", lambda fd: fd.ops.cast(_t(fd), dtype="float")),
], ids=lambda c: c[0] if isinstance(c, tuple) else None)
def test_non_tensor_where_a_tensor_is_expected_at_definition(case):
    op, build = case
    with raises(op, kind=TypeError):
        _define(build)


def test_unsupported_dtype_for_an_op():
    with raises("bitwise_and", "Float"):
        _define(lambda fd: fd.ops.bitwise_and(_t(fd), _t(fd)))
    with raises("neg", "Bool"):
        _define(lambda fd: fd.ops.neg(_t(fd, dtype=DataType.Bool)))


def test_bad_define_tensor_arguments():
    with raises("define_tensor", "contiguity", "3 entries", "(2)"):
        _define(lambda fd: fd.define_tensor(shape=[-1, -1], contiguity=[True, True, True]))
    with raises("define_tensor", "stride_order", "permutation"):
        _define(lambda fd: fd.define_tensor(shape=[-1, -1], contiguity=[True, True], stride_order=[0, 0]))
    with raises("define_tensor", "shape", "-2"):
        _define(lambda fd: fd.define_tensor(shape=[-2, 4], contiguity=[True, True]))
    with raises("define_tensor", "dtype", kind=TypeError):
        _define(lambda fd: fd.define_tensor(shape=[4], contiguity=[True], dtype="half"))


def test_error_inside_the_with_block_propagates():
    """An error raised while defining leaves no half-built fusion that executes silently."""
    fs = Fusion()
    with pytest.raises(PyfuserError):
        with FusionDefinition(fs) as fd:
            t = fd.define_tensor(symbolic_sizes=[-1], contiguous=[True], dtype=DataType.Float)
            fd.ops.sum(t, axes=[1])
    with raises("execute", "not completely defined"):
        fs.execute([torch.ones(3)])


def test_execute_inside_the_with_block():
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(_t(fd, (2, 3))))
        with raises("execute", "not completely defined"):
            fd.execute([X])
    assert_still_runs(fd, [X], -X)


def test_legacy_fusion_without_definition():
    with raises("Fusion.execute", "FusionDefinition"):
        Fusion().execute([X])
