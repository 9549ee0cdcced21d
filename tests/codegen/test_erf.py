"""erf in fp32 (``op_emit.ERF_FP32``: a polynomial below 1 and 1 - 2^Q(|x|) above, both
computed, one selected), against float64, against the reference executor, and in the
GELU forms that call it."""
from __future__ import annotations

import math

import pytest
import torch

from .common import (DataType, around, assert_fp32_helper_within_two_ulps, check, define_input, from_torch, fusion,
                     gen_for, make_tensor, sources_of, tol_for)


def test_erf_fp32_within_two_ulps_of_float64():
    """The branch-free fp32 erf: at most 2 ulp from float64 on magnitudes 1e-30..6
    (dense around 1, where it switches halves, and 4, where it holds |x|), subnormals
    included; -0 kept, +-1 at +-inf, NaN kept."""
    mag = torch.cat([torch.logspace(-30, math.log10(6), 20000, base=10, dtype=torch.float64).float(),
                     torch.linspace(0, 6, 40000), torch.stack(around(1.0, 256)), torch.stack(around(4.0, 64)),
                     torch.tensor([3.9, 10.0, 3e38])])
    assert_fp32_helper_within_two_ulps("erf", mag, "_pyfuser_erf", "tl.erf")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gelu_erf_forward_and_backward_match_eager(dtype):
    """GELU-erf's forward x Phi(x) and backward dy (Phi(x) + x phi(x)), Phi(x) = (1 +
    erf(x / sqrt 2)) / 2, as the backend translates them, in one kernel with the fp32
    erf, as eager's F.gelu and its gradient (x up to +-8: both halves and the held tail)."""
    gen = gen_for("erf", "gelu", str(dtype))
    x = make_tensor((48, 200), dtype, gen) * 8.0
    dy = make_tensor((48, 200), dtype, gen)
    out = from_torch(dtype)

    def build(fd):
        xv, dyv = define_input(fd, x), define_input(fd, dy)
        xf, dyf = fd.ops.cast(xv, DataType.Float), fd.ops.cast(dyv, DataType.Float)
        cdf = fd.ops.mul(fd.ops.add(fd.ops.erf(fd.ops.mul(xf, 1 / math.sqrt(2))), 1.0), 0.5)
        pdf = fd.ops.mul(fd.ops.exp(fd.ops.mul(fd.ops.mul(xf, xf), -0.5)), 1 / math.sqrt(2 * math.pi))
        fd.add_output(fd.ops.cast(fd.ops.mul(xf, cdf), out))
        fd.add_output(fd.ops.cast(fd.ops.mul(dyf, fd.ops.add(cdf, fd.ops.mul(xf, pdf))), out))

    fd = fusion(build)
    y, dx = check(fd, [x, dy], n_launches=1)
    assert "_pyfuser_erf(" in "\n".join(sources_of(fd))
    xg = x.detach().clone().requires_grad_()
    ref = torch.nn.functional.gelu(xg)
    ref.backward(dy)
    rtol, atol = tol_for(dtype)
    torch.testing.assert_close(y, ref.detach(), rtol=rtol, atol=atol)
    torch.testing.assert_close(dx, xg.grad, rtol=rtol, atol=atol)


def test_erf_in_fp64_is_libdevices_double_erf():
    """fp64 computes libdevice's double erf, not the fp32 helper."""
    x = make_tensor((9, 40), torch.float64, gen_for("erf", "fp64")) * 3.0
    fd = fusion(lambda fd: fd.add_output(fd.ops.erf(define_input(fd, x))))
    check(fd, [x], n_launches=1)
    src = "\n".join(sources_of(fd))
    assert "tl.erf(" in src and "_pyfuser_erf(" not in src
