"""Accuracy of tanh's forms on the GPU against float64, in units of the fp32 result's
last place: ``libdevice.tanh`` (what pyfuser emitted before, and torch.compile emits),
pyfuser's fp32 tanh (``ops.TANH_FP32``), and ``1 + tanh(u)`` both as an add and as
``2 / (1 + e^-2u)`` (``Lowering._shifted_tanh``).

    PYTHONPATH=src:benchmarks python benchmarks/tanh_probe.py
"""
import torch
import triton

from pyfuser.ir.ops import TANH_FP32

from jit_source import module_from_source

KERNEL = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


''' + TANH_FP32 + '''


@triton.jit
def forms(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    tl.store(out_ptr + i, libdevice.tanh(x), mask=m)
    tl.store(out_ptr + n + i, _pyfuser_tanh(x), mask=m)
    tl.store(out_ptr + 2 * n + i, 1.0 + libdevice.tanh(x), mask=m)
    tl.store(out_ptr + 3 * n + i, 2.0 / (1.0 + tl.exp2(x * -2.8853900817779268)), mask=m)
'''


def load_forms():
    return module_from_source("tanh_forms", KERNEL).forms


def ulps(got, want):
    w = want.float().abs()
    ulp = (torch.nextafter(w, torch.tensor(float("inf"), device=w.device)) - w).double()
    return (got.double() - want).abs() / ulp


def main():
    mag = torch.logspace(-30, 1.6, 1 << 24, base=10, device="cuda", dtype=torch.float64).float()
    near = torch.linspace(0.55, 0.65, 1 << 20, device="cuda")
    x = torch.cat([mag, -mag, near, -near, torch.empty(1 << 24, device="cuda").uniform_(-12, 12),
                   torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan")], device="cuda")])
    n = x.numel()
    out = torch.empty(4 * n, device="cuda")
    load_forms()[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    o = out.view(4, n)
    t = torch.tanh(x.double())
    # 1 + tanh(u) in float64 is itself only as good as 1e-16 absolute; 2 / (1 + e^-2u) is
    # exact algebra without that cancellation
    shifted = 2.0 / (1.0 + torch.exp(-2.0 * x.double()))
    fin = torch.isfinite(x)
    print(f"{n} inputs, |x| from 1e-30 to 40 (log-spaced), dense around 0.6, uniform in [-12, 12]; "
          "1 + tanh(u) against 2 / (1 + e^-2u) in float64")
    print("| form | max ulp | mean ulp | NaN kept, +-inf -> +-1 (tanh) | -0 kept |")
    print("|---|---|---|---|---|")
    for label, got, want, is_tanh in (("libdevice.tanh", o[0], t, True), ("pyfuser tanh (TANH_FP32)", o[1], t, True),
                                      ("1 + libdevice.tanh(u)", o[2], shifted, False),
                                      ("2 / (1 + e^-2u)", o[3], shifted, False)):
        e = ulps(got[fin], want[fin])
        nan_ok = torch.equal(torch.isnan(got), torch.isnan(x))
        if is_tanh:
            inf_ok = bool((got[x == float("inf")] == 1).all() and (got[x == -float("inf")] == -1).all())
            zero = x == 0
            zero_ok = torch.equal(torch.signbit(got[zero]), torch.signbit(x[zero]))
        else:
            inf_ok, zero_ok = "", ""
        print(f"| {label} | {e.max().item():.2f} | {e.mean().item():.3f} | {nan_ok} {inf_ok} | {zero_ok} |")


if __name__ == "__main__":
    main()
