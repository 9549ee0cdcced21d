"""A Double scalar in an fp64 kernel keeps its 53 bits.

Triton types a Python float argument as fp32, so a Double scalar, a runtime
``define_scalar(dtype=DataType.Double)`` or one computed from constants on the host,
would reach a kernel rounded to fp32 (0.1 becomes 0.10000000149).  The kernel's
parameter is annotated ``tl.float64`` (``codegen.writer``), which the interpreter
honours too (``runtime.interpreter``).  ``PYFUSER_SWEEP_DEVICE=cuda`` runs it on the GPU."""
import os

import torch

from pyfuser import DataType, FusionDefinition

DEVICE = os.environ.get("PYFUSER_SWEEP_DEVICE", "cpu")


def test_runtime_double_scalar_keeps_fp64_precision():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(t, s))
        fd.add_output(fd.ops.add(t, s))
    x = torch.linspace(-3.0, 5.0, 37, dtype=torch.float64, device=DEVICE)
    got = fd.execute([x, 0.1])
    for g, w in zip(got, [x * 0.1, x + 0.1]):
        torch.testing.assert_close(g, w, rtol=1e-15, atol=0)


def test_double_scalar_computed_on_the_host_keeps_fp64_precision():
    """exp(1.5) of a constant is computed before the kernel and passed to it."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        fd.add_output(fd.ops.add(t, fd.ops.exp(fd.define_scalar(1.5))))
    x = torch.linspace(-3.0, 5.0, 37, dtype=torch.float64, device=DEVICE)
    torch.testing.assert_close(fd.execute([x])[0], x + torch.tensor(1.5, dtype=torch.float64, device=DEVICE).exp(), rtol=1e-15, atol=0)


def test_double_scalar_in_a_float_kernel_rounds_once():
    """A Double scalar in an fp32 op is rounded to fp32 once, as eager's scalar is."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(t, fd.define_scalar(dtype=DataType.Double)))
    x = torch.linspace(-3.0, 5.0, 37, device=DEVICE)
    torch.testing.assert_close(fd.execute([x, 0.1])[0], x * 0.1, rtol=0, atol=0)


def test_a_double_scalar_is_an_f64_parameter_of_the_compiled_kernel():
    """Compiled offline for sm_90 as a launch would specialise it: the Double scalar is an
    ``.f64`` parameter (Triton's default for a Python float is ``.f32``), converted once
    to fp32 where an fp32 op reads it."""
    from pyfuser.bench import offline
    from pyfuser.compat import compile_offline
    from pyfuser.runtime.args import arg_value, launch_kw
    from pyfuser.runtime.cache import load_kernel

    from .common import need_ptxas

    need_ptxas()
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Double)
        s = fd.define_scalar(dtype=DataType.Double)
        u = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(t, s))
        fd.add_output(fd.ops.mul(u, s))
    inputs = [torch.empty(4096, dtype=torch.float64, device="meta"), 0.1, torch.empty(4096, device="meta")]
    rt, b, _ = offline.plan_offline(fd, inputs)
    (key, (src, *_)), = rt.kernels.items()
    outs = {o: torch.empty(b.shapes[o], dtype=o.dtype.torch, device="meta") for o in src.outputs}
    args = [arg_value(a, b, b.values, outs, {}) for a in src.args]
    ptx = compile_offline(load_kernel(src.name, src.source, "cuda"), args, launch_kw(src, key.params, cuda=True), 90).asm["ptx"]
    params = [line for line in ptx.splitlines() if ".param ." in line and f"{src.name}_param_" in line]
    assert sum(".param .f64 " in line for line in params) == 1 and not any(".param .f32 " in line for line in params)
    assert "cvt.rn.f32.f64" in ptx


import pytest


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Double])
@pytest.mark.parametrize("exponent", [0.5, -0.5, 1.0, 2.0, 3.0, -1.0, -2.0, 1.5])
def test_a_constant_exponent_gives_eagers_special_values(dtype, exponent):
    """Eager computes ``x ** 0.5`` as sqrt and ``x ** -0.5`` as rsqrt, so pow(-inf, 0.5)
    is nan and pow(-0.0, -0.5) is -inf where C's pow says inf; pyfuser follows it in
    every float dtype, an fp64 constant (spelled as a typed tensor) as much as an fp32 one."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        fd.add_output(fd.ops.pow(t, exponent))
    special = [-float("inf"), float("inf"), -0.0, 0.0, float("nan"), -2.5, -1.0, 1e-300, 0.3, 4.0, 7.25]
    x = torch.tensor(special, dtype=dtype.torch, device=DEVICE)
    want = torch.pow(x, exponent)
    got = fd.execute([x])[0]
    torch.testing.assert_close(got, want, equal_nan=True, rtol=2e-7 if dtype is DataType.Float else 1e-15, atol=0)
    # signs of zeros and infinities too
    assert torch.equal(torch.signbit(got[~got.isnan()]), torch.signbit(want[~want.isnan()]))
