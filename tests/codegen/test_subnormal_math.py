"""CUDA math functions keep subnormal results, as torch's CUDA kernels do, and fp32 pow
rounds as torch's.

Triton links libdevice's flush-to-zero variants by default (``enable_reflect_ftz``):
``expf(-100)`` is then 0 instead of 3.7e-44.  Every CUDA launch and ahead-of-time
compile takes ``runtime.args.launch_kw``, which turns that off.  torch's fp32 pow is
C++'s ``::pow`` on floats, the double function: libdevice's ``powf`` was an ulp off in
normal results too (nvFuser's op sweep saw 2.4e-7 relative), so fp32 pow computes in
double (``op_emit.pow_``).
On the CPU machine the PTX of a libdevice kernel compiled offline with those options
is checked (no flushing arithmetic left, only the hardware's approximate ``ex2`` and
``rcp``, which libdevice applies to scaled arguments); on the GPU the results are
compared with eager bit for bit."""
from __future__ import annotations

import importlib.util
import re
from types import SimpleNamespace

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.ir import op_emit
from pyfuser.runtime.args import launch_kw

from .common import need_ptxas

_FTZ = re.compile(r"\b[a-z0-9]+(?:\.[a-z0-9]+)*\.ftz(?:\.[a-z0-9]+)*")


def _pow_kernel():
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.jit
    def k(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        x = tl.load(x_ptr + i, mask=m)
        tl.store(o_ptr + i, libdevice.pow(x, tl.load(y_ptr + i, mask=m)) + libdevice.exp(x), mask=m)

    return k


def test_cuda_launch_options_compile_libdevice_without_flush_to_zero():
    from pyfuser.compat import compile_offline

    need_ptxas()
    x = torch.empty(256, dtype=torch.float32, device="meta")
    kw = launch_kw(SimpleNamespace(constexprs={"BLOCK": 256}), SimpleNamespace(num_warps=4), cuda=True)
    ours = set(_FTZ.findall(compile_offline(_pow_kernel(), (x, x, x, 256), kw, 90).asm["ptx"]))
    default = set(_FTZ.findall(compile_offline(_pow_kernel(), (x, x, x, 256), {"BLOCK": 256, "num_warps": 4},
                                               90).asm["ptx"]))
    assert ours <= {"ex2.approx.ftz.f32", "rcp.approx.ftz.f32"}, ours
    assert {"mul.rn.ftz.f32", "fma.rn.ftz.f32"} <= default  # what the option removes: the test can fail


def _helper_kernel(path, name: str, source: str):
    """A kernel storing ``name`` (an fp32 helper of ``op_emit``, defined by ``source``)
    of its input, with the PTX helpers it calls."""
    path.write_text(f"""import triton
import triton.language as tl


{op_emit.EX2_APPROX}


{op_emit.FDIV_APPROX}


{source}


@triton.jit
def k(x_ptr, o_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(o_ptr + i, {name}(tl.load(x_ptr + i)))
""")
    spec = importlib.util.spec_from_file_location(f"{name}_ptx_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


@pytest.mark.parametrize("name, source, approx", [
    ("_pyfuser_tanh", op_emit.TANH_FP32, {"div.approx.ftz.f32", "ex2.approx.ftz.f32"}),
    ("_pyfuser_erf", op_emit.ERF_FP32, {"ex2.approx.ftz.f32"})])
def test_the_fp32_helpers_take_the_flushing_approximations(tmp_path, name, source, approx):
    """The branch-free tanh's 2^x and division, and the erf's 2^x, are
    ``ex2.approx.ftz.f32`` and ``div.approx.ftz.f32`` under pyfuser's launch options,
    which turn flushing off for the rest of the kernel: the non-flushing approximations
    are the slower ones (docs/TUNING.md#branchless-tanh)."""
    from pyfuser.compat import compile_offline

    need_ptxas()
    x = torch.empty(256, dtype=torch.float32, device="meta")
    kw = launch_kw(SimpleNamespace(constexprs={"BLOCK": 256}), SimpleNamespace(num_warps=4), cuda=True)
    ptx = compile_offline(_helper_kernel(tmp_path / "k.py", name, source), (x, x), kw, 90).asm["ptx"]
    assert set(re.findall(r"\b(?:div|ex2)\.[a-z.0-9]*", ptx)) == approx, ptx


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("op", ["exp", "pow"])
def test_subnormal_results_match_eager_bit_for_bit(op):
    """Subnormal results as eager's, bit for bit (pow: also two normal results that
    libdevice's powf rounded the other way)."""
    if op == "exp":
        x = torch.tensor([-100.0, -95.5, -88.0, -20.0, 0.5, 3.0], device="cuda")
        y = torch.zeros(6, device="cuda")
    else:  # both tensors (constant exponents take products or sqrt)
        x = torch.tensor([1e-3, 0.5, 0.25, 3.0, 2.0, 1e-20, 1.5], device="cuda")
        y = torch.tensor([14.0, 140.0, 70.0, -85.0, -135.0, 2.0, 7.3], device="cuda")
    with FusionDefinition() as fd:
        tx = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        ty = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.exp(tx), ty) if op == "exp" else fd.ops.pow(tx, ty))
    (got,) = fd.execute([x, y])
    want = torch.exp(x) + y if op == "exp" else torch.pow(x, y)
    assert ((want.abs() < torch.finfo(torch.float32).tiny) & (want != 0)).any()  # subnormals to keep
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def _ulps_apart(a, b):
    ia, ib = (t.view(torch.int32).long() for t in (a, b))
    return (ia - ib).abs()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("exponent", ["tensor", "constant"])
def test_fp32_pow_is_close_to_eager_bit_for_bit(exponent):
    """fp32 pow on 2**20 random pairs: the double pow rounded to fp32 (correctly rounded
    but for double rounding) is within the 4 ulp that CUDA documents for its powf, and
    equal to eager's in about 94% of the values (libdevice's powf: 60%; H200,
    torch 2.11 for CUDA 13).  A constant exponent is rounded to fp32 first, as torch's
    scalar exponent is."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2**20, device="cuda", generator=g).abs() * 9
    y = torch.randn(2**20, device="cuda", generator=g) * 9
    with FusionDefinition() as fd:
        tx = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        if exponent == "tensor":
            fd.add_output(fd.ops.pow(tx, fd.define_tensor(shape=[-1], dtype=DataType.Float)))
        else:
            fd.add_output(fd.ops.pow(tx, 7.3))
    (got,) = fd.execute([x, y] if exponent == "tensor" else [x])
    want = torch.pow(x, y) if exponent == "tensor" else torch.pow(x, 7.3)
    finite = torch.isfinite(want) & (want != 0)
    assert torch.equal(torch.isfinite(got), torch.isfinite(want))
    assert int(_ulps_apart(got[finite], want[finite]).max()) <= 4
    assert float((got[finite] == want[finite]).float().mean()) > 0.9
