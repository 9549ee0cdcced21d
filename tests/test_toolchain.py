"""The toolchain CI relies on: Triton's interpreter runs a jit kernel on CPU tensors
inside this (possibly xdist worker) process, without TRITON_INTERPRET set."""
import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, (x.to(tl.float32) + y.to(tl.float32)).to(tl.float16), mask=mask)


def test_triton_interpreter_runs_a_kernel_on_cpu_tensors():
    x = torch.randn(100).half()
    y = torch.randn(100).half()
    out = torch.full_like(x, float("nan"))
    InterpretedFunction(_add_kernel.fn)[(triton.cdiv(100, 32),)](x, y, out, 100, BLOCK_SIZE=32)
    torch.testing.assert_close(out, (x.float() + y.float()).half())
