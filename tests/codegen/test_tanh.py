"""tanh in fp32 (``ops.TANH_FP32``: both halves computed, one selected) and ``1 + tanh(u)``
/ ``1 - tanh(u)`` as ``2 / (1 + e^-+2u)`` (``ir.peephole.shifted_tanh``), against the
reference executor and against float64."""
from __future__ import annotations

import pytest
import torch

from .common import (DataType, around, assert_fp32_helper_within_two_ulps, check, define_input, fusion,
                     gen_for, make_tensor, sources_of)


def test_tanh_fp32_within_two_ulps_of_float64():
    """The branch-free fp32 tanh: at most 2 ulp from float64 on magnitudes 1e-30..20
    (dense around 0.6, where it switches halves, and near the saturation at 9 and 20),
    -0 kept, +-1 at +-inf, NaN kept."""
    mag = torch.cat([torch.logspace(-30, 1.3, 20000, base=10, dtype=torch.float64).float(),
                     torch.linspace(0, 12, 20000), torch.stack(around(0.6, 64)),
                     torch.tensor([1e-7, 88.0, 9.0, 20.0])])
    assert_fp32_helper_within_two_ulps("tanh", mag, "_pyfuser_tanh", "libdevice.tanh")


FORMS = {
    "1 + tanh": lambda fd, t: fd.ops.add(1.0, t),
    "tanh + 1": lambda fd, t: fd.ops.add(t, 1.0),
    "1 - tanh": lambda fd, t: fd.ops.sub(1.0, t),
    "int 1 + tanh": lambda fd, t: fd.ops.add(1, t),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_one_plus_or_minus_tanh_is_one_exponential(form):
    """A tanh used once, in 1 +- tanh(u): no tanh in the kernel, and the result matches
    eager's, also where tanh(u) is within an ulp of -1 or 1 (|u| up to 20)."""
    x = make_tensor((33, 40), torch.float32, gen_for("tanh", form)) * 6.0
    x[0, :4] = torch.tensor([20.0, -20.0, 9.5, -9.5])

    def build(fd):
        xv = define_input(fd, x)
        u = fd.ops.mul(fd.ops.add(xv, fd.ops.mul(fd.ops.mul(fd.ops.mul(xv, xv), xv), 0.044715)), 0.7978845608)
        fd.add_output(fd.ops.mul(fd.ops.mul(xv, 0.5), FORMS[form](fd, fd.ops.tanh(u))))

    fd = fusion(build)
    check(fd, [x], n_launches=1, what=form)
    src = "\n".join(sources_of(fd))
    assert "_pyfuser_tanh(" not in src and "libdevice.tanh" not in src
    sign = "2.8853900817779268" if form == "1 - tanh" else "-2.8853900817779268"
    assert "2.0 / (1.0 + _pyfuser_ex2_approx(" in src and f"* {sign}))" in src


def test_gelu_tanh_fp16_without_a_tanh():
    """bias + GELU-tanh in fp16, the bench's fusion: one exponential per element."""
    gen = gen_for("tanh", "gelu")
    x, b = make_tensor((64, 96), torch.float16, gen), make_tensor((96,), torch.float16, gen)

    def build(fd):
        xv, bv = define_input(fd, x), define_input(fd, b)
        h = fd.ops.cast(fd.ops.add(xv, fd.ops.broadcast_in_dim(bv, shape=[64, 96], broadcast_dims=[1])),
                        DataType.Float)
        inner = fd.ops.mul(0.7978845608028654, fd.ops.add(h, fd.ops.mul(0.044715, fd.ops.mul(h, fd.ops.mul(h, h)))))
        y = fd.ops.mul(fd.ops.mul(0.5, h), fd.ops.add(1.0, fd.ops.tanh(inner)))
        fd.add_output(fd.ops.cast(y, DataType.Half))

    fd = fusion(build)
    check(fd, [x, b], n_launches=1)
    src = "\n".join(sources_of(fd))
    assert "_pyfuser_ex2_approx(" in src and "_pyfuser_tanh(" not in src


KEPT = {
    # GELU-tanh's derivative reads tanh(u) twice: 1 + t and 1 - t * t
    "used twice": lambda fd, t: fd.ops.add(fd.ops.add(t, 1.0), fd.ops.sub(1.0, fd.ops.mul(t, t))),
    "tanh - 1": lambda fd, t: fd.ops.sub(t, 1.0),
    "2 + tanh": lambda fd, t: fd.ops.add(2.0, t),
    "runtime 1": lambda fd, t: fd.ops.add(fd.define_scalar(dtype=DataType.Double), t),
}


@pytest.mark.parametrize("form", sorted(KEPT))
def test_tanh_kept_where_the_form_does_not_apply(form):
    """tanh read elsewhere too, shifted by other than a constant 1, or the other way
    round: the tanh itself is computed (and the results match)."""
    x = make_tensor((17, 48), torch.float32, gen_for("tanh", "kept", form)) * 3.0
    fd = fusion(lambda fd: fd.add_output(KEPT[form](fd, fd.ops.tanh(define_input(fd, x)))))
    args = [x] + ([1.0] if form == "runtime 1" else [])
    check(fd, args, n_launches=1, what=form)
    assert "_pyfuser_tanh(" in "\n".join(sources_of(fd))


def test_tanh_that_is_an_output_is_kept():
    """A tanh stored as an output as well as shifted: both stored, the tanh computed."""
    x = make_tensor((9, 64), torch.float32, gen_for("tanh", "output")) * 3.0

    def build(fd):
        t = fd.ops.tanh(define_input(fd, x))
        fd.add_output(t)
        fd.add_output(fd.ops.add(1.0, t))

    fd = fusion(build)
    check(fd, [x], n_launches=1)
    assert "_pyfuser_tanh(" in "\n".join(sources_of(fd))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_tanh_in_other_dtypes(dtype):
    """fp64 computes libdevice's double tanh; an fp16 tanh rounds to fp16 before the
    add, as eager does, so 1 + tanh keeps the tanh."""
    x = make_tensor((11, 40), dtype, gen_for("tanh", str(dtype))) * 3.0
    fd = fusion(lambda fd: fd.add_output(fd.ops.add(1.0, fd.ops.tanh(define_input(fd, x)))))
    check(fd, [x], n_launches=1)
    src = "\n".join(sources_of(fd))
    assert ("libdevice.tanh(" in src) == (dtype == torch.float64)
    assert "2.0 / (1.0 + _pyfuser_ex2_approx(" not in src
