"""Arguments that nvFuser refuses when the fusion is defined are refused there too, with
the kind of error nvFuser's bindings give: a TypeError for the wrong kind of argument
(a float where an int size or dim goes, an int past int64, a pad value of another
dtype kind), a ValueError for a wrong value of the right kind (a step of 0).  Each
check is also shown to leave the valid neighbour of the bad input working."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from pyfuser import DataType, FusionDefinition, InputError

from ..helpers import assert_matches, define
from .test_printer import rebuild
from .test_validation import raises


def _t(fd, shape=(4, 8), dtype=DataType.Float):
    return fd.define_tensor(shape=list(shape), contiguity=[True] * len(shape), dtype=dtype)


# --- sizes and dims are int64 -------------------------------------------------------------


@pytest.mark.parametrize("case", [
    ("define_tensor", "shape", "10.0", lambda fd: fd.define_tensor(shape=[10.0], contiguity=[True])),
    ("define_tensor", "shape", "int64", lambda fd: fd.define_tensor(shape=[2**63], contiguity=[True])),
    ("define_tensor", "sizes", "2.0", lambda fd: fd.define_tensor(sizes=[2.0, 3], strides=[3, 1])),
    ("broadcast_in_dim", "broadcast_dims", "1.0",
     lambda fd: fd.ops.broadcast_in_dim(_t(fd, (4,)), shape=[3, 4], broadcast_dims=[1.0])),
    ("full", "shape", "2.5", lambda fd: fd.ops.full([2.5], 1.0, DataType.Float)),
], ids=lambda c: f"{c[0]}-{c[2]}")
def test_a_size_that_is_not_an_int64_is_a_type_error(case):
    op, arg, shown, build = case
    with raises(op, arg, shown, kind=TypeError):
        define(build)


def test_a_negative_size_stays_a_value_error():
    with raises("define_tensor", "shape", "-2", kind=ValueError):
        define(lambda fd: fd.define_tensor(shape=[-2], contiguity=[True]))


@pytest.mark.parametrize("case", [
    ("permute", "0.0", lambda fd: fd.ops.permute(_t(fd), [0.0, 1.0])),
    ("var_mean", "3.0", lambda fd: fd.ops.var_mean(_t(fd), 3.0)),
    ("sum", "1.0", lambda fd: fd.ops.sum(_t(fd), [1.0])),
    ("squeeze", "1.0", lambda fd: fd.ops.squeeze(_t(fd, (4, 1)), [1.0])),
], ids=lambda c: c[0])
def test_a_dim_that_is_not_an_int_is_a_type_error(case):
    op, shown, build = case
    with raises(op, "dims", shown, kind=TypeError):
        define(build)


def test_var_mean_with_an_int_dim_still_runs():
    x = torch.randn(4, 8)

    def build(fd):
        var, mean = fd.ops.var_mean(_t(fd), 1)
        fd.add_output(var)
        fd.add_output(mean)

    var, mean = define(build).execute([x])
    want_var, want_mean = torch.var_mean(x, 1)
    assert_matches(var, want_var)
    assert_matches(mean, want_mean)


# --- squeeze ----------------------------------------------------------------------------


def test_squeeze_of_a_zero_dim_tensor_names_its_rank():
    with raises("squeeze", "dims [0]", "T0", "rank 0", kind=ValueError):
        define(lambda fd: fd.ops.squeeze(_t(fd, ()), [0]))
    x = torch.tensor(2.5)
    (got,) = define(lambda fd: fd.add_output(fd.ops.squeeze(_t(fd, ()), []))).execute([x])
    assert_matches(got, x)


# --- iota -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [
    ("step", "0", (10, 3, 0, DataType.Int)),
    ("step", "0.0", (10, 1.5, 0.0, DataType.Double)),
    ("start", "inf", (6, float("inf"), 1.0, DataType.Double)),
    ("step", "nan", (6, 0.0, float("nan"), DataType.Double)),
], ids=lambda c: f"{c[0]}={c[1]}")
def test_iota_with_a_constant_step_of_zero_or_a_non_finite_value(case):
    arg, shown, (length, start, step, dtype) = case

    def build(fd):
        fd.add_output(fd.ops.iota(fd.define_scalar(length), fd.define_scalar(start), fd.define_scalar(step), dtype))

    with raises("iota", arg, shown, kind=ValueError):
        define(build)


def test_iota_with_a_complex_constant_is_a_type_error():
    def build(fd):
        fd.add_output(fd.ops.iota(fd.define_scalar(4), fd.define_scalar(1 + 2j), fd.define_scalar(1.0),
                                  DataType.Double))

    with raises("iota", "start", "(1+2j)", kind=TypeError):
        define(build)


def test_iota_with_valid_constants_and_a_runtime_step_runs():
    def build(fd):
        fd.add_output(fd.ops.iota(fd.define_scalar(4), fd.define_scalar(1.5), fd.define_scalar(-0.5), DataType.Double))
        fd.add_output(fd.ops.iota(fd.define_scalar(3), fd.define_scalar(2), fd.define_scalar(DataType.Int),
                                  DataType.Int))

    a, b = define(build).execute([3])
    assert_matches(a, torch.tensor([1.5, 1.0, 0.5, 0.0], dtype=torch.float64))
    assert_matches(b, torch.tensor([2, 5, 8]))


# --- pad's value ------------------------------------------------------------------------


@pytest.mark.parametrize("case", [
    (DataType.ComplexFloat, DataType.Double),
    (DataType.Float, DataType.Int),
    (DataType.Int, DataType.Double),
    (DataType.Bool, DataType.Float),
], ids=lambda c: f"{c[0].value}-by-{c[1].value}")
def test_pad_value_of_another_dtype_kind_is_a_type_error(case):
    tensor_dtype, value_dtype = case
    with raises("pad", "value", "S1", repr(value_dtype), repr(tensor_dtype), kind=TypeError):
        define(lambda fd: fd.ops.pad(_t(fd, (2, 2), tensor_dtype), [1, 1], fd.define_scalar(value_dtype)))


def test_pad_value_of_the_same_kind_runs():
    x = torch.randn(2, 3).half()

    def build(fd):
        fd.add_output(fd.ops.pad(_t(fd, (2, 3), DataType.Half), [1, 2], fd.define_scalar(DataType.Double)))

    (got,) = define(build).execute([x, 0.75])
    assert_matches(got, F.pad(x, [1, 2], value=0.75))


@pytest.mark.parametrize("case", [
    (torch.int64, DataType.Int, 2.5),  # truncated, as F.pad
    (torch.float32, DataType.Float, 0),
    (torch.bool, DataType.Bool, 1),
    (torch.complex64, DataType.ComplexFloat, 2.5),
], ids=lambda c: f"{c[1].value}-{c[2]}")
def test_pad_with_a_python_number_takes_the_tensor_kind_and_round_trips(case):
    torch_dtype, dtype, value = case
    x = (torch.randn(2, 3) * 4).to(torch_dtype)

    def build(fd):
        fd.add_output(fd.ops.pad(_t(fd, (2, 3), dtype), [1, 1, 0, 1], value))

    fd = define(build)
    want = F.pad(x, [1, 1, 0, 1], value=value)
    with warnings.catch_warnings():  # complex values run in torch, with a warning that says so
        warnings.simplefilter("ignore")
        (got,) = fd.execute([x])
        (again,) = rebuild(fd).execute([x])
    assert_matches(got, want)
    assert_matches(again, want)


@pytest.mark.parametrize("value", [float("inf"), float("nan")], ids=repr)
def test_pad_of_an_integer_tensor_with_a_non_finite_number(value):
    with raises("pad", "value", repr(value), "DataType.Int", kind=ValueError):
        define(lambda fd: fd.ops.pad(_t(fd, (2, 2), DataType.Int), [1, 1], value))


@pytest.mark.parametrize("runtime", [False, True], ids=["constant", "runtime"])
def test_pad_with_negative_widths_resizes_as_nvfuser(runtime):
    """docs/SEMANTICS.md: output i reads input i - left where inside, else the value; so
    [-4, 9] on 3 elements gives 8 pad values (eager's F.pad raises), [-1, 2] crops one
    and pads two, and [1, -5] (a negative extent) raises naming the dim."""
    x = torch.tensor([1.0, 2.0, 3.0])

    def run(widths):
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
            w = [fd.define_scalar(dtype=DataType.Int) for _ in widths] if runtime else widths
            fd.add_output(fd.ops.pad(t, w, fd.define_scalar(7.0)))
        return fd.execute([x, *widths] if runtime else [x])[0]

    assert run([-4, 9]).tolist() == [7.0] * 8
    assert run([-1, 2]).tolist() == [2.0, 3.0, 7.0, 7.0]
    with pytest.raises(InputError, match=r"pad: padding \(1, -5\) makes dim 0 negative"):
        run([1, -5])
