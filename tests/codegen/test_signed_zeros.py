"""Signed zeros survive constants, negation and runtime scalars.

Triton makes +0.0 of every constant equal to 0 and lowers unary minus as ``0 - x``
(compiled and interpreted alike), so ``-0.0`` is spelled by its bits and ``neg`` is a
product with -1 (``codegen.lower.literal``, ``ir.ops._neg``); the interpreter gets
float arguments as the fp32 scalars a compiled launch gets.  The sign of a zero shows
after a division (``1 / -0.0 == -inf``) and in ``atan2``; every case is checked against
eager PyTorch bit for bit in the sign, and against the reference executor.  Maximum,
minimum and clamp order -0.0 below +0.0 (IEEE 754-2019, CUDA's instructions, nvFuser's
kernels, eager on the GPU); eager on the CPU returns either zero, so those cases are
checked against that rule (``_max``, ``_min``)."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition

from ..helpers import gen_for, make_tensor

_DT = {torch.float32: DataType.Float, torch.float64: DataType.Double, torch.bfloat16: DataType.BFloat16}


def _max(x, s):
    """IEEE 754-2019 maximum: of two zeros +0.0 unless both are -0.0."""
    s = torch.as_tensor(s, dtype=x.dtype, device=x.device).expand_as(x)
    both = (x == 0) & (s == 0)
    return torch.where(both, torch.where(torch.signbit(x) & torch.signbit(s), -0.0, 0.0).to(x.dtype),
                       torch.maximum(x, s))


def _min(x, s):
    """IEEE 754-2019 minimum: of two zeros -0.0 unless both are +0.0."""
    s = torch.as_tensor(s, dtype=x.dtype, device=x.device).expand_as(x)
    both = (x == 0) & (s == 0)
    return torch.where(both, torch.where(torch.signbit(x) | torch.signbit(s), -0.0, 0.0).to(x.dtype),
                       torch.minimum(x, s))


def _zero(fd, t):
    return fd.ops.mul(t, 0.0)  # +0.0 or -0.0 with t's sign


# (name, fusion builder on (fd, t), eager on x)
CASES = [
    ("recip_neg", lambda fd, t: fd.ops.div(1.0, fd.ops.neg(_zero(fd, t))), lambda x: 1.0 / -(x * 0.0)),
    ("neg_direct", lambda fd, t: fd.ops.neg(t), lambda x: -x),
    ("mul_scalar", lambda fd, t: fd.ops.mul(t, fd.define_scalar(-0.0, dtype=DataType.Double)), lambda x: x * -0.0),
    ("mul_constant", lambda fd, t: fd.ops.mul(t, fd.define_constant(-0.0)), lambda x: x * -0.0),
    ("mul_python", lambda fd, t: fd.ops.mul(t, -0.0), lambda x: x * -0.0),
    ("div_python", lambda fd, t: fd.ops.div(t, -0.0), lambda x: x / -0.0),
    ("add_python", lambda fd, t: fd.ops.add(_zero(fd, t), -0.0), lambda x: x * 0.0 + -0.0),
    ("sub_from_neg_zero", lambda fd, t: fd.ops.sub(-0.0, _zero(fd, t)), lambda x: -0.0 - x * 0.0),
    ("atan2", lambda fd, t: fd.ops.atan2(fd.ops.mul(t, -0.0), fd.define_constant(-0.0)),
     lambda x: torch.atan2(x * -0.0, torch.tensor(-0.0, dtype=x.dtype))),
    ("where", lambda fd, t: fd.ops.where(fd.ops.gt(t, 0.0), t, -0.0), lambda x: torch.where(x > 0, x, -0.0)),
    ("full", lambda fd, t: fd.ops.add(fd.ops.full([t.shape[0]], -0.0, DataType.Float), _zero(fd, t)),
     lambda x: torch.full(x.shape, -0.0, device=x.device) + x * 0.0),
    ("neg_constant", lambda fd, t: fd.ops.mul(t, fd.ops.neg(fd.define_scalar(0.0))), lambda x: x * -0.0),
    ("abs", lambda fd, t: fd.ops.abs(fd.ops.mul(t, -0.0)), lambda x: torch.abs(x * -0.0)),
    # max, min and clamp order -0.0 below +0.0 (CUDA's instructions; eager on the CPU
    # returns either zero): clamp(-0.0, min=0.0) is +0.0
    ("clamp_min_zero", lambda fd, t: fd.ops.clamp(t, min=0.0, max=2.0), lambda x: _min(_max(x, 0.0), 2.0)),
    ("clamp_max_neg_zero", lambda fd, t: fd.ops.clamp(t, max=fd.define_constant(-0.0)), lambda x: _min(x, -0.0)),
    ("clamp_min_neg_zero", lambda fd, t: fd.ops.clamp(t, min=-0.0), lambda x: _max(x, -0.0)),
    ("maximum_zero", lambda fd, t: fd.ops.maximum(t, 0.0), lambda x: _max(x, 0.0)),
    ("minimum_neg_zero", lambda fd, t: fd.ops.minimum(fd.ops.neg(_zero(fd, t)), t),
     lambda x: _min(-(x * 0.0), x)),
    ("maximum_neg_zero", lambda fd, t: fd.ops.maximum(-0.0, t), lambda x: _max(x, -0.0)),
]


def _input(dtype, device):
    x = make_tensor((8,), dtype, gen_for("signed-zeros", dtype))
    x[:4] = torch.tensor([0.0, -0.0, 0.0, -0.0])
    return x.to(device)


def _same(got, want, what):
    assert got.dtype == want.dtype, what
    torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{what}: {m}")
    assert torch.equal(torch.signbit(got[~got.isnan()]), torch.signbit(want[~want.isnan()])), \
        f"{what}: signs differ\n got {got}\nwant {want}"


def _check(name, build, eager, dtype, device, runtime=()):
    x = _input(dtype, device)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[8], contiguity=[True], dtype=_DT[dtype])
        scalars = [fd.define_scalar(dtype=DataType.Double) for _ in runtime]
        fd.add_output(build(fd, t, *scalars))
    want = eager(x, *runtime)
    _same(fd.execute([x, *runtime])[0], want, f"{name} {dtype}")
    _same(fd.reference([x, *runtime])[0], want, f"{name} {dtype} (reference)")


RUNTIME = [
    ("runtime_mul", lambda fd, t, s: fd.ops.mul(t, s), lambda x, s: x * s),
    ("runtime_div", lambda fd, t, s: fd.ops.div(t, s), lambda x, s: x / s),
    ("runtime_neg", lambda fd, t, s: fd.ops.div(t, fd.ops.neg(s)), lambda x, s: x / -s),
    ("runtime_clamp", lambda fd, t, s: fd.ops.clamp(t, min=s), lambda x, s: _max(x, s)),
    ("runtime_clamp_max", lambda fd, t, s: fd.ops.clamp(t, max=s), lambda x, s: _min(x, s)),
    ("runtime_maximum", lambda fd, t, s: fd.ops.maximum(t, s), lambda x, s: _max(x, s)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,build,eager", CASES, ids=[c[0] for c in CASES])
def test_signed_zeros(name, build, eager, dtype):
    _check(name, build, eager, dtype, "cpu")


@pytest.mark.parametrize("value", [-0.0, 0.0])
@pytest.mark.parametrize("name,build,eager", RUNTIME, ids=[c[0] for c in RUNTIME])
def test_signed_zero_runtime_scalars(name, build, eager, value):
    _check(name, build, eager, torch.float32, "cpu", (value,))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_signed_zeros_gpu(dtype):
    for name, build, eager in CASES:
        _check(name, build, eager, dtype, "cuda")
    for value in (-0.0, 0.0):
        for name, build, eager in RUNTIME:
            _check(name, build, eager, torch.float32, "cuda", (value,))
