"""nvFuser's integer semantics where they differ from eager PyTorch's operators.

``div`` of two integers (or an integer and a bool) is C's truncating division with an
integer result (7 / -2 == -3, torch.div(rounding_mode="trunc")); ``truediv`` divides
truly, as torch's ``/``.  The same holds for Python-number operands, runtime scalars
(``define_scalar``) and scalar arithmetic evaluated on the host.  The other integer
ops (remainder, fmod, abs, neg, comparisons with floats, where) agree with eager and
are checked here on the values where rules could diverge: negative operands,
the most negative integer, mixed int/float."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import InputError

from ..helpers import assert_matches

_DT = {torch.int32: DataType.Int32, torch.int64: DataType.Int}

A = [7, -7, 7, -7, 3, -3, 9, 1]
B = [2, 2, -2, -2, 5, 5, -4, -1]


def _both(fd, inputs, wants):
    for got, ref, want in zip(fd.execute(inputs), fd.reference(inputs), wants):
        assert_matches(got, want)
        assert_matches(ref, want, what="reference")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_div_of_integers_truncates(dtype):
    a, b = torch.tensor(A, dtype=dtype), torch.tensor(B, dtype=dtype)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=_DT[dtype])
        t1 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=_DT[dtype])
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.div(t0, t1))
        fd.add_output(fd.ops.truediv(t0, t1))
        fd.add_output(fd.ops.div(t0, -2))  # a Python int
        fd.add_output(fd.ops.div(-9, t1))
        fd.add_output(fd.ops.div(t0, s))  # a runtime Int scalar
        fd.add_output(fd.ops.div(t0, 2.0))  # a float operand: true division
        fd.add_output(fd.ops.div(fd.ops.gt(t0, 0), t1))  # bool beside int: integer division
    trunc = lambda x, y: torch.div(x, y, rounding_mode="trunc")  # noqa: E731
    wants = [trunc(a, b), a / b, trunc(a, torch.tensor(-2)), trunc(torch.tensor(-9), b),
             trunc(a, torch.tensor(-3)), a / 2.0, trunc(a > 0, b)]
    assert [w.dtype for w in wants[:1] + wants[2:5]] == [dtype] * 4
    _both(fd, [a, b, -3], wants)


def test_div_of_integer_scalars_truncates():
    """Scalar arithmetic (host-evaluated runtime scalars and constants) truncates too:
    -7 / 2 is -3 (Python's // would give -4)."""
    x = torch.tensor(A, dtype=torch.int64)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        s0 = fd.define_scalar(dtype=DataType.Int)
        s1 = fd.define_scalar(dtype=DataType.Int)
        q = fd.ops.div(s0, s1)
        c = fd.ops.div(fd.define_scalar(-7), fd.define_scalar(2))
        fd.add_output(fd.ops.add(t, q))
        fd.add_output(fd.ops.add(t, c))
        fd.add_output(fd.ops.add(t, fd.ops.truediv(s0, s1)))
    _both(fd, [x, -7, 2], [x - 3, x - 3, x - 3.5])
    _both(fd, [x, 7, -2], [x - 3, x - 3, x - 3.5])
    assert fd.ir.outputs[0].dtype is DataType.Int and fd.ir.outputs[2].dtype is DataType.Float


def test_integer_division_by_zero_in_scalar_arithmetic_raises():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        s0, s1 = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.add(t, fd.ops.div(s0, s1)))
    with pytest.raises(InputError, match=r"div: integer division by zero .*S\d+=0"):
        fd.execute([torch.arange(3), 5, 0])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_other_integer_ops_agree_with_eager(dtype):
    """remainder takes the divisor's sign, fmod the dividend's; abs and neg of the most
    negative integer wrap (C's and torch's two's complement)."""
    lo = torch.iinfo(dtype).min
    a = torch.tensor(A[:-1] + [lo], dtype=dtype)
    b = torch.tensor(B, dtype=dtype)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=_DT[dtype])
        t1 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=_DT[dtype])
        fd.add_output(fd.ops.remainder(t0, t1))
        fd.add_output(fd.ops.fmod(t0, t1))
        fd.add_output(fd.ops.abs(t0))
        fd.add_output(fd.ops.neg(t0))
        fd.add_output(fd.ops.lt(t0, 2.5))
        fd.add_output(fd.ops.where(fd.ops.gt(t0, 0), t0, 0.5))
        fd.add_output(fd.ops.mul(t0, t1))
    wants = [torch.remainder(a, b), torch.fmod(a, b), torch.abs(a), -a, a < 2.5, torch.where(a > 0, a, 0.5), a * b]
    _both(fd, [a, b], wants)


def test_int64_division_by_zero_gives_cuda_value():
    """Integer division by zero is undefined in C, and torch's CUDA kernels give what the
    hardware gives: for int64 dividends in [0, 2^32) the 32-bit path's 0xFFFFFFFF, for
    div, fmod and remainder alike (Triton's own int64 division gave -1 there, 2^32 off).
    Kernels give CUDA's value on every device; the interpreter's numpy gives 0 alone."""
    big = 2 ** 40 + 7
    a = torch.tensor([0, 1, 9, 2 ** 32 - 1, big, -big, big, 7], dtype=torch.int64)
    b = torch.tensor([0, 0, 0, 0, 3, 3, -2 ** 33, -2], dtype=torch.int64)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        t1 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        fd.add_output(fd.ops.div(t0, t1))
        fd.add_output(fd.ops.fmod(t0, t1))
        fd.add_output(fd.ops.remainder(t0, t1))
    div, fmod, rem = fd.execute([a, b])
    by_zero = [4294967295] * 4
    nz = slice(4, None)
    assert div.tolist() == by_zero + torch.div(a[nz], b[nz], rounding_mode="trunc").tolist()
    assert fmod.tolist() == by_zero + torch.fmod(a[nz], b[nz]).tolist()
    assert rem.tolist() == by_zero + torch.remainder(a[nz], b[nz]).tolist()
