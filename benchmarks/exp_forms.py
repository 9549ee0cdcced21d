"""The price and the accuracy of three fp32 exp forms (docs/TUNING.md#fast-exp):
libdevice's expf (what fp32 outputs get), Triton's ``tl.exp`` (ex2.approx of the
rounded product x * log2(e), what 16-bit outputs get) and a compensated form, ex2.approx
of the rounded product times 1 + ln(2) * the product's rounding error (from an fma and
the low part of log2(e)), the error zeroed where the product is not finite so that
exp(-inf) = 0, exp(inf) = inf and exp(x) = 0 where x * log2(e) overflows (a masked
score of -3.4e38).

First each form's error against float64 exp over [-104, 89] (ulp of the fp32 result,
subnormal results excepted, and the special values), then GPT-2's attention softmax
forward as the backend builds it (bf16 scores of [8, 12, 1024, 1024], causal and
padding mask, the row max and sum kept in fp32 for the backward) as planned (libdevice's
expf: the row sum is fp32), against the device-to-device copy of its bytes.

    PYTHONPATH=src:benchmarks python benchmarks/exp_forms.py
"""
import torch
import triton

from pyfuser import DataType, FusionDefinition

from jit_source import module_from_source
from odd_rows import bench, measure, report

COMPENSATED = ("tl.exp2({x} * 1.4426950408889634) * (1.0 + tl.where(tl.abs({x} * 1.4426950408889634) < float('inf'), "
               "{e}, 0.0) * 0.6931471805599453)",
               "tl.fma({x}, 1.4426950408889634, -({x} * 1.4426950408889634)) + {x} * 1.925963033500011e-08")


def compensated(x: str) -> str:
    return COMPENSATED[0].format(x=x, e=COMPENSATED[1].format(x=x))


KERNELS = f'''import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def forms(x_ptr, ld_ptr, fast_ptr, comp_ptr, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    x = tl.load(x_ptr + i, mask=m)
    tl.store(ld_ptr + i, libdevice.exp(x), mask=m)
    tl.store(fast_ptr + i, tl.exp(x), mask=m)
    tl.store(comp_ptr + i, {compensated("x")}, mask=m)
'''


def ulps(got, want):
    """|got - want| in ulps of the fp32 value nearest ``want`` (float64)."""
    w32 = want.float()
    ulp = (torch.nextafter(w32.abs(), torch.tensor(float("inf"), device=w32.device)) - w32.abs()).double()
    return ((got.double() - want).abs() / ulp)


def accuracy(k):
    x = torch.cat([torch.linspace(-104, 89, 1 << 24, device="cuda", dtype=torch.float64).float(),
                   torch.tensor([float("-inf"), float("inf"), float("nan"), 0.0, -0.0, -3.4e38, 88.72, -87.3],
                                device="cuda")])
    outs = [torch.empty_like(x) for _ in range(3)]
    k.forms[(triton.cdiv(x.numel(), 1024),)](x, *outs, x.numel(), BLOCK=1024)
    want = torch.exp(x.double())
    normal = (want >= torch.finfo(torch.float32).tiny) & (want <= torch.finfo(torch.float32).max)
    special = ~torch.isfinite(x) | (x == 0) | (x < -1e30)
    print(f"{'exp form':28} {'max ulp':>8} {'mean ulp':>9}  special values (-inf, inf, nan, 0, -0, -3.4e38) ok")
    for name, got in zip(("libdevice expf", "tl.exp", "compensated ex2"), outs):
        u = ulps(got[normal], want[normal])
        ok = torch.equal(got[special].nan_to_num(nan=7.0), torch.exp(x[special]).nan_to_num(nan=7.0))
        print(f"{name:28} {u.max().item():8.2f} {u.mean().item():9.3f}  {ok}")


def gpt2_softmax(B=8, H=12, S=1024):
    """GPT-2's attention softmax forward as the backend builds it."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Bool)
        pad = fd.define_tensor(shape=[B, 1, 1, S], contiguity=[True, None, None, True], dtype=DataType.Bool)
        zero = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        low = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        scores = fd.define_tensor(shape=[B, H, S, S], contiguity=[True] * 4, dtype=DataType.BFloat16)
        pos = fd.ops.iota(S, fd.define_scalar(0, dtype=DataType.Int), fd.define_scalar(1, dtype=DataType.Int),
                          dtype=DataType.Int)
        q = fd.ops.broadcast_in_dim(pos, shape=[1, 1, S, 1], broadcast_dims=[2])
        kv = fd.ops.broadcast_in_dim(pos, shape=[1, 1, 1, S], broadcast_dims=[3])
        keep = fd.ops.bitwise_and(fd.ops.bitwise_and(t0, fd.ops.le(kv, q)), pad)
        x = fd.ops.add(fd.ops.mul(scores, fd.define_scalar(0.125, dtype=DataType.Double)),
                       fd.ops.where(keep, zero, low))
        mx = fd.ops.max(x, dims=[3], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(x, mx))
        s = fd.ops.sum(e, dims=[3], keepdim=True)
        fd.add_output(mx)
        fd.add_output(s)
        fd.add_output(fd.ops.cast(fd.ops.truediv(e, s), dtype=DataType.BFloat16))
    gen = torch.Generator(device="cuda").manual_seed(3)
    sc = (torch.randn(B, H, S, S, device="cuda", generator=gen) * 4).to(torch.bfloat16)
    padmask = torch.ones(B, 1, 1, S, dtype=torch.bool, device="cuda")
    padmask[1::2, ..., S - 100:] = False
    args = [torch.tensor(True, device="cuda"), padmask, torch.tensor(0.0, device="cuda"),
            torch.tensor(torch.finfo(torch.float32).min, device="cuda"), sc]
    causal = torch.ones(S, S, dtype=torch.bool, device="cuda").tril()
    ref = torch.softmax(sc.float() * 0.125 + torch.where(causal & padmask, 0.0, torch.finfo(torch.float32).min), -1)
    return fd, args, ref.to(torch.bfloat16), (sc.numel() * 4) / 1e6


def main():
    k = module_from_source("exp_forms_kernels", KERNELS)
    accuracy(k)
    fd, args, want, mb = gpt2_softmax()
    rows = []
    sc = args[-1]
    out = torch.empty_like(sc)
    rows.append(("GPT-2", "copy (read + write)", bench(lambda: out.copy_(sc)), mb, 0.0))
    measure(rows, "GPT-2", "attention softmax fwd, as planned", lambda: fd.execute(args)[2], want, mb)
    report(rows)


if __name__ == "__main__":
    main()
