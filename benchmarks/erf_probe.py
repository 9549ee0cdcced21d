"""fp32 erf on the GPU: libdevice's ``erff`` (what pyfuser emitted before, and
torch.compile emits) against pyfuser's branch-free erf (``op_emit.ERF_FP32``), for accuracy
against float64 in ulps, and for time in GELU-erf's forward and backward over bf16
tensors of ViT-B/16's and BERT-base's MLP (the same kernel with either erf), each
against a copy of the same bytes.

    PYTHONPATH=src:benchmarks python benchmarks/erf_probe.py
"""
import torch
import triton

from pyfuser.ir.op_emit import ERF_FP32, EX2_APPROX

from jit_source import module_from_source
from odd_rows import bench
from tanh_probe import ulps

KERNEL = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


''' + EX2_APPROX + '''


''' + ERF_FP32 + '''


@triton.jit
def erf_of(x, OURS: tl.constexpr):
    if OURS:
        return _pyfuser_erf(x)
    return libdevice.erf(x)


@triton.jit
def forms(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    tl.store(out_ptr + i, libdevice.erf(x), mask=m)
    tl.store(out_ptr + n + i, _pyfuser_erf(x), mask=m)


@triton.jit
def gelu(x_ptr, y_ptr, n, OURS: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m).to(tl.float32)
    y = x * 0.5 * (1.0 + erf_of(x * 0.7071067811865476, OURS))
    tl.store(y_ptr + i, y.to(tl.bfloat16), mask=m)


@triton.jit
def gelu_backward(x_ptr, dy_ptr, dx_ptr, n, OURS: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m).to(tl.float32)
    dy = tl.load(dy_ptr + i, mask=m).to(tl.float32)
    cdf = 0.5 * (1.0 + erf_of(x * 0.7071067811865476, OURS))
    pdf = tl.exp(-0.5 * x * x) * 0.3989422804014327
    tl.store(dx_ptr + i, (dy * (cdf + x * pdf)).to(tl.bfloat16), mask=m)
'''

# pyfuser's launches link libdevice without flush-to-zero (``runtime.args.launch_kw``)
FTZ_OFF = {"enable_reflect_ftz": False}
SHAPES = {"ViT-B/16 MLP, 64 x 197 tokens": (64 * 197, 3072), "BERT-base MLP, 64 x 128 tokens": (64 * 128, 3072)}


def accuracy(mod):
    mag = torch.logspace(-30, 0.8, 1 << 24, base=10, device="cuda", dtype=torch.float64).float()
    near = torch.linspace(0.95, 1.05, 1 << 20, device="cuda")
    x = torch.cat([mag, -mag, near, torch.empty(1 << 24, device="cuda").uniform_(-6, 6),
                   torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan")], device="cuda")])
    n = x.numel()
    out = torch.empty(2 * n, device="cuda")
    mod.forms[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024, **FTZ_OFF)
    o = out.view(2, n)
    want, fin = torch.erf(x.double()), torch.isfinite(x)
    print(f"{n} inputs: |x| from 1e-30 to 6.3 (log-spaced), dense around 1, uniform in [-6, 6]")
    print("| erf | max ulp | mean ulp | NaN kept | +-inf -> +-1 | -0 kept |")
    print("|---|---|---|---|---|---|")
    for label, got in (("libdevice erff", o[0]), ("pyfuser (ERF_FP32)", o[1])):
        e = ulps(got[fin], want[fin])
        inf_ok = bool((got[x == float("inf")] == 1).all() and (got[x == -float("inf")] == -1).all())
        zero = x == 0
        print(f"| {label} | {e.max().item():.2f} | {e.mean().item():.3f} | "
              f"{torch.equal(torch.isnan(got), torch.isnan(x))} | {inf_ok} | "
              f"{torch.equal(torch.signbit(got[zero]), torch.signbit(x[zero]))} |")


def timing(mod):
    print("| tensor | kernel | libdevice erff (ms) | pyfuser erf (ms) | copy of its bytes (ms) | max diff |")
    print("|---|---|---|---|---|---|")
    for label, (rows, cols) in SHAPES.items():
        n = rows * cols
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 3
        dy = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        grid = (triton.cdiv(n, 1024),)
        for name, args, nbytes in (("forward", (x,), 4 * n), ("backward", (x, dy), 6 * n)):
            outs = [torch.full((n,), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            kernel = mod.gelu if name == "forward" else mod.gelu_backward
            ms = []
            for ours, out in zip((False, True), outs):
                ms.append(bench(lambda: kernel[grid](*args, out, n, OURS=ours, BLOCK=1024, **FTZ_OFF)))
            src = torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8)
            dst = torch.empty_like(src)
            copy = bench(lambda: dst.copy_(src))
            diff = (outs[0].float() - outs[1].float()).abs().max().item()
            print(f"| {label} | GELU {name} | {ms[0]:.4f} | {ms[1]:.4f} | {copy:.4f} | {diff:.2e} |")


def main():
    mod = module_from_source("erf_forms", KERNEL)
    print(torch.cuda.get_device_name())
    accuracy(mod)
    timing(mod)


if __name__ == "__main__":
    main()
