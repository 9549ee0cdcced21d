"""Every constant and every Python scalar reaches a kernel's source typed.

A constant in kernel text (an int or float literal, ``float('inf')``, a coordinate
along a size-1 dim such as ``(0 + 3)``) is a Python number there: it has no ``.to``,
and alone it is an fp32 value.  ``op_emit.is_number`` recognises every such form;
``dtype_policy.convert`` and ``op_emit.tensor_arg`` type them before a conversion or an
extern call, and ``op_emit.const`` spells a constant in the op's compute dtype.  The
sweep below puts constants of every kind into every unary and binary op, on fp64
tensors (where an fp32 constant shows as an error of 1e-8) and fp32 ones.
``PYFUSER_SWEEP_DEVICE=cuda`` runs it on the GPU (compiled kernels, libdevice).
"""
import math
import os

import pytest
import torch

from pyfuser import DataType, FusionDefinition, PyfuserError
from pyfuser.ir.ops import BINARY_OPS, UNARY_OPS

from .common import assert_matches

DEVICE = os.environ.get("PYFUSER_SWEEP_DEVICE", "cpu")
TORCH = {torch.float32: DataType.Float, torch.float64: DataType.Double}
TOL = {torch.float64: (1e-13, 1e-13), torch.float32: (1e-5, 1e-5)}


def _input(dtype):
    g = torch.Generator().manual_seed(7)
    return (torch.randn(4, 9, generator=g, dtype=torch.float64) * 3).to(dtype).to(DEVICE)


def _check(build, x):
    try:
        with FusionDefinition() as fd:
            build(fd, fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=TORCH[x.dtype]))
    except PyfuserError:
        return  # not definable on this dtype (bitwise ops of floats, ...)
    try:
        want = fd.reference([x])
    except Exception:  # torch refuses the op on these dtypes
        return
    got = fd.execute([x])
    for g, w in zip(got, want):
        assert_matches(g, w, what=repr(fd), tol=TOL.get(w.dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_of_a_constant(op, dtype):
    for c in (1.5, -0.0, float("inf"), float("nan")):
        _check(lambda fd, t: fd.add_output(fd.ops.add(t, getattr(fd.ops, op)(fd.define_scalar(c)))), _input(dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_with_a_non_finite_constant(op, dtype):
    for c in (float("inf"), float("-inf"), float("nan"), 1.5):
        _check(lambda fd, t: fd.add_output(getattr(fd.ops, op)(t, fd.define_scalar(c))), _input(dtype))
        _check(lambda fd, t: fd.add_output(getattr(fd.ops, op)(fd.define_scalar(c), t)), _input(dtype))


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_pow_with_a_non_finite_constant(value):
    """Emitted ``(float('inf')).to(tl.float64)``: a crash in the interpreter and on the GPU."""
    x = torch.tensor([0.0, 0.5, 1.0, 2.0, -0.5, -2.0, float("nan"), float("inf")], device=DEVICE)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.pow(t, fd.define_scalar(value)))
        fd.add_output(fd.ops.pow(fd.define_scalar(value), t))
    got = fd.execute([x])
    assert_matches(got[0], torch.pow(x, value), what="pow(t, c)")
    assert_matches(got[1], torch.pow(torch.tensor(value, device=DEVICE), x), what="pow(c, t)")


def test_slice_of_one_element_after_a_flattening_reshape():
    """The element's index is a constant, ``(0 + 3)``, which the index division took
    ``.to(tl.uint64)`` of."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.slice(fd.ops.reshape(t, new_shape=[-1]), [3], [4], [1]))
    x = torch.randn(8, 5, device=DEVICE)
    assert torch.equal(fd.execute([x])[0], x.reshape(-1)[3:4])


def test_sign_of_a_double_tensor_stays_double():
    """sign's 1.0 / -1.0 / 0.0 were fp32 constants: exp(sign(x)) ran in fp32."""
    x = torch.tensor([1.5, -2.0, 0.0, -0.0, float("nan"), 1e-300], dtype=torch.float64, device=DEVICE)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Double)
        fd.add_output(fd.ops.exp(fd.ops.sign(t)))
    torch.testing.assert_close(fd.execute([x])[0], torch.exp(torch.sign(x)), rtol=1e-15, atol=0, equal_nan=True)
    assert fd.execute([x])[0][0].item() == math.e
