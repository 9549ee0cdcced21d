"""CUDA math functions keep subnormal results, as torch's CUDA kernels do.

Triton links libdevice's flush-to-zero variants by default (``enable_reflect_ftz``):
``expf(-100)`` is then 0 instead of 3.7e-44, and ``powf`` rounds some normal results
differently from torch's (nvFuser's op sweep saw 2.4e-7 relative).  Every CUDA launch
and ahead-of-time compile takes ``runtime.args.launch_kw``, which turns that off.
On the CPU machine the PTX of a libdevice kernel compiled offline with those options
is checked (no flushing arithmetic left, only the hardware's approximate ``ex2`` and
``rcp``, which libdevice applies to scaled arguments); on the GPU the results are
compared with eager bit for bit."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from pyfuser import DataType, FusionDefinition
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("op", ["exp", "pow"])
def test_subnormal_results_match_eager_bit_for_bit(op):
    if op == "exp":
        x = torch.tensor([-100.0, -95.5, -88.0, -20.0, 0.5, 3.0], device="cuda")
        y = torch.zeros(6, device="cuda")
    else:  # both tensors: libdevice's powf (constant exponents take products or sqrt)
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
