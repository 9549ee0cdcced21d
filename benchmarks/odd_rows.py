"""Pointwise kernels over long rows that read values once per row: the cross-entropy
backward from the saved statistics (GPT-2's 50257 words, BERT's 30522; and GPT-2's as
the backend builds it) and the gradient's pad for the padded GEMMs.  Times pyfuser's
kernel as planned, its row tile at other rows and block sizes and the flat walk
(``Choices``), and two hand-written flat walks that derive the row once per program
(a block spans at most two rows; the row values gathered per lane, or loaded as two
scalars and selected), against the device-to-device copy of the same bytes
(docs/TUNING.md#long-rows).

    PYTHONPATH=src:benchmarks python benchmarks/odd_rows.py [--bert-zoo]
"""
import sys

import torch
import triton

from pyfuser import DataType, FusionDefinition
from pyfuser.schedulers.base import Choices

from jit_source import module_from_source

KERNELS = '''import triton
import triton.language as tl


@triton.jit
def span_gather(lg, lse, lab, g, out, N, J, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lane = tl.arange(0, BLOCK)
    x = pid * BLOCK + lane
    mask = x < N
    r0 = (pid * BLOCK) // J
    row = r0 + (lane >= (r0 + 1) * J - pid * BLOCK).to(tl.int32)
    col = x - row * J
    v = tl.load(lg + x, mask=mask).to(tl.float32)
    s = tl.load(lse + row, mask=mask)
    lb = tl.load(lab + row, mask=mask)
    gy = tl.where(lb != -100, tl.load(g), 0.0)
    d = (tl.exp(v - s) - (col.to(tl.int64) == lb).to(tl.float32)) * gy
    tl.store(out + x, d.to(out.dtype.element_ty), mask=mask)


@triton.jit
def span_scalar(lg, lse, lab, g, out, N, J, R, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lane = tl.arange(0, BLOCK)
    x = pid * BLOCK + lane
    mask = x < N
    r0 = (pid * BLOCK) // J
    hi = lane >= (r0 + 1) * J - pid * BLOCK
    col = x - (r0 + hi.to(tl.int32)) * J
    more = r0 + 1 < R
    s = tl.where(hi, tl.load(lse + r0 + 1, mask=more), tl.load(lse + r0))
    lb = tl.where(hi, tl.load(lab + r0 + 1, mask=more), tl.load(lab + r0))
    v = tl.load(lg + x, mask=mask).to(tl.float32)
    gy = tl.where(lb != -100, tl.load(g), 0.0)
    d = (tl.exp(v - s) - (col.to(tl.int64) == lb).to(tl.float32)) * gy
    tl.store(out + x, d.to(out.dtype.element_ty), mask=mask)
'''


def loss_backward(R, V, dt):
    """The cross-entropy backward from saved statistics: softmax minus the one-hot of
    the label, times the mean's scale where the label is not ignored."""
    with FusionDefinition() as fd:
        lg = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
        lse = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
        lab = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Int)
        g = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        p = fd.ops.exp(fd.ops.sub(fd.ops.cast(lg, DataType.Float), lse))
        col = fd.ops.broadcast_in_dim(fd.ops.iota(V, 0, 1, DataType.Int), shape=[R, V], broadcast_dims=[1])
        oh = fd.ops.cast(fd.ops.eq(col, lab), DataType.Float)
        keep = fd.ops.ne(lab, fd.define_scalar(-100, DataType.Int))
        gy = fd.ops.where(keep, g, fd.define_scalar(0.0, DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.sub(p, oh), gy), dt))
    return fd


def zoo_loss_backward(B, S, V):
    """GPT-2's cross-entropy backward as the backend builds it (the labels a strided
    view of the shifted ones, the saved max and log-sum separately)."""
    R = B * S
    with FusionDefinition() as fd:
        T0 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        T1 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        T2 = fd.define_tensor(shape=[B, S], contiguity=[False, True], dtype=DataType.Int)
        T3 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        T4 = fd.define_tensor(shape=[B, S, V], contiguity=[True, True, True], dtype=DataType.BFloat16)
        T5 = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Float)
        T6 = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Float)
        T8 = fd.ops.truediv(fd.ops.neg(T0), T1)
        T11 = fd.ops.broadcast_in_dim(fd.ops.reshape(fd.ops.set(T2), new_shape=[R]), shape=[R, 1], broadcast_dims=[0])
        T14 = fd.ops.iota(V, fd.define_scalar(0, dtype=DataType.Int), fd.define_scalar(1, dtype=DataType.Int),
                          dtype=DataType.Int)
        T16 = fd.ops.eq(fd.ops.broadcast_in_dim(T14, shape=[1, V], broadcast_dims=[1]), T11)
        T18 = fd.ops.ne(T11, fd.define_scalar(-100, dtype=DataType.Int))
        T20 = fd.ops.where(fd.ops.bitwise_and(T16, T18), T8, T3)
        T22 = fd.ops.reshape(fd.ops.cast(T4, dtype=DataType.Float), new_shape=[R, V])
        T25 = fd.ops.exp(fd.ops.sub(fd.ops.sub(T22, T5), T6))
        T30 = fd.ops.bitwise_and(fd.ops.ge(T11, fd.define_scalar(0, dtype=DataType.Int)),
                                 fd.ops.lt(T11, fd.define_scalar(V, dtype=DataType.Int)))
        T32 = fd.ops.where(fd.ops.bitwise_and(T30, T18), T8, T3)
        T35 = fd.ops.sub(T20, fd.ops.mul(T25, T32))
        fd.add_output(fd.ops.cast(fd.ops.reshape(T35, new_shape=[B, S, V]), dtype=DataType.BFloat16))
    return fd


def bert_loss_backward(B, S, V, to):
    """BERT's masked-LM loss backward as the backend builds it: the gradient the
    returned logits bring is added, and the sum padded for the decoder's GEMMs."""
    R = B * S
    with FusionDefinition() as fd:
        T0 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        T1 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        T2 = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Int)
        T3 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        T4 = fd.define_tensor(shape=[R, V], contiguity=[True, True], dtype=DataType.Half)
        T5 = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Float)
        T6 = fd.define_tensor(shape=[R, 1], contiguity=[True, None], dtype=DataType.Float)
        T7 = fd.define_tensor(shape=[B, S, V], contiguity=[True, True, True], dtype=DataType.Half)
        T9 = fd.ops.truediv(fd.ops.neg(T0), T1)
        T13 = fd.ops.broadcast_in_dim(fd.ops.iota(V, fd.define_scalar(0, dtype=DataType.Int),
                                                  fd.define_scalar(1, dtype=DataType.Int), dtype=DataType.Int),
                                      shape=[1, V], broadcast_dims=[1])
        T16 = fd.ops.ne(T2, fd.define_scalar(-100, dtype=DataType.Int))
        T18 = fd.ops.where(fd.ops.bitwise_and(fd.ops.eq(T13, T2), T16), T9, T3)
        T22 = fd.ops.exp(fd.ops.sub(fd.ops.sub(fd.ops.cast(T4, dtype=DataType.Float), T5), T6))
        T27 = fd.ops.bitwise_and(fd.ops.ge(T2, fd.define_scalar(0, dtype=DataType.Int)),
                                 fd.ops.lt(T2, fd.define_scalar(V, dtype=DataType.Int)))
        T29 = fd.ops.where(fd.ops.bitwise_and(T27, T16), T9, T3)
        T33 = fd.ops.cast(fd.ops.sub(T18, fd.ops.mul(T22, T29)), dtype=DataType.Half)
        T35 = fd.ops.add(T7, fd.ops.reshape(T33, new_shape=[B, S, V]))
        T36 = fd.ops.reshape(T35, new_shape=[R, V])
        fd.add_output(fd.ops.pad(T36, pad_widths=[0, to - V, 0, 0], value=fd.define_scalar(0.0, dtype=DataType.Double)))
    return fd


def zoo_pad(B, S, V, to):
    """The gradient of GPT-2's logits, padded for the decoder's GEMMs."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[B, S, V], contiguity=[True, True, True], dtype=DataType.BFloat16)
        r = fd.ops.reshape(x, new_shape=[B * S, V])
        fd.add_output(fd.ops.pad(r, [0, to - V], fd.define_scalar(0.0, DataType.Float)))
    return fd


def pad_rows(V, to, dt):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
        fd.add_output(fd.ops.pad(x, [0, to - V], fd.define_scalar(0.0, DataType.Float)))
    return fd


VARIANTS = (("as planned", {}), ("as planned again", {}), ("8 rows of 256", dict(block_outer=8)),
            ("4 rows of 512", dict(block_outer=4)), ("2 rows of 1024", dict(block_outer=2)),
            ("1 row of 2048", dict(block_outer=1)), ("1 row of 1024", dict(block_outer=1, block=1024)),
            ("2 rows of 512", dict(block_outer=2, block=1024)),
            ("1 row of 2048, 8 warps", dict(block_outer=1, num_warps=8)), ("flat walk", dict(outer=())))


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=400, return_mode="median")


def measure(rows, name, label, run, want, mb):
    """Time ``run`` and check its result against ``want``, the caching allocator's
    block for the result filled with NaN first (an unwritten element fails)."""
    poison = torch.full_like(want, float("nan"))
    del poison
    err = (run().float() - want.float()).abs().max().item()
    rows.append((name, label, bench(run), mb, err))


def bert_zoo_inputs():
    """BERT's padded loss backward as the backend builds it: (fusion, args, expected, MB moved)."""
    B, S, V, to = 64, 128, 30522, 30528
    R = B * S
    gen = torch.Generator(device="cuda").manual_seed(2)
    logits = torch.randn(R, V, device="cuda", generator=gen).half()
    x = logits.float()
    mx = x.amax(1, keepdim=True)
    ls = torch.log(torch.exp(x - mx).sum(1, keepdim=True))
    lab = torch.randint(0, V, (R, 1), device="cuda", generator=gen)
    lab[::5] = -100
    back = (torch.randn(B, S, V, device="cuda", generator=gen) * 1e-4).half()
    g, count, zero = torch.tensor(1.0, device="cuda"), (lab != -100).sum().float(), torch.tensor(0.0, device="cuda")
    grad = (torch.where((torch.arange(V, device="cuda") == lab) & (lab != -100), -g / count, zero)
            - torch.exp(x - mx - ls) * torch.where((lab >= 0) & (lab < V) & (lab != -100), -g / count, zero)).half()
    want = torch.nn.functional.pad((back + grad.view(B, S, V)).view(R, V), (0, to - V))
    args = [g, count, lab, zero, logits, mx, ls, back]
    return bert_loss_backward(B, S, V, to), args, want, (3 * R * V + R * to) * 2 / 1e6


def gpt2_zoo_inputs():
    """GPT-2's loss backward as the backend builds it: (fusion, args, expected, MB moved)."""
    B, S, V = 8, 1024, 50257
    gen = torch.Generator(device="cuda").manual_seed(1)
    logits = torch.randn(B, S, V, device="cuda", generator=gen).to(torch.bfloat16)
    x = logits.float().view(B * S, V)
    mx = x.amax(1, keepdim=True)
    ls = torch.log(torch.exp(x - mx).sum(1, keepdim=True))
    lab = torch.randint(0, V, (B, S + 1), device="cuda", generator=gen)[:, 1:]
    lab[:, -1] = -100
    g, count, zero = torch.tensor(1.0, device="cuda"), (lab != -100).sum().float(), torch.tensor(0.0, device="cuda")
    fl = lab.reshape(-1, 1)
    want = (torch.where((torch.arange(V, device="cuda") == fl) & (fl != -100), -g / count, zero)
            - torch.exp(x - mx - ls) * torch.where((fl >= 0) & (fl < V) & (fl != -100), -g / count, zero))
    want = want.view(B, S, V).to(torch.bfloat16)
    args = [g, count, lab, zero, logits, mx, ls]
    return zoo_loss_backward(B, S, V), args, want, 2 * logits.numel() * 2 / 1e6


def bert_zoo(rows):
    fb, args, want, mb = bert_zoo_inputs()
    for label, choices in VARIANTS:
        with Choices(**choices):
            measure(rows, "BERT", "zoo loss bwd + pad " + label, lambda: fb.execute(args)[0], want, mb)


def main():
    if sys.argv[1:] == ["--bert-zoo"]:
        rows = []
        bert_zoo(rows)
        return report(rows)
    k = module_from_source("odd_rows_kernels", KERNELS)
    rows = []
    for name, R, V, tdt, dt in (("GPT-2", 8192, 50257, torch.bfloat16, DataType.BFloat16),
                                ("BERT", 8192, 30522, torch.float16, DataType.Half)):
        gen = torch.Generator(device="cuda").manual_seed(0)
        lg = torch.randn(R, V, device="cuda", generator=gen).to(tdt)
        lse = torch.logsumexp(lg.float(), 1, keepdim=True)
        lab = torch.randint(0, V, (R, 1), device="cuda", generator=gen)
        lab[::7] = -100
        g = torch.tensor(1.0 / R, device="cuda")
        want = ((torch.softmax(lg.float(), 1) - torch.nn.functional.one_hot(lab.clamp(min=0)[:, 0], V).float())
                * torch.where(lab != -100, g, 0.0)).to(tdt)
        mb = 2 * lg.numel() * lg.element_size() / 1e6
        copy_out = torch.empty_like(lg)
        rows.append((name, "copy (read + write)", bench(lambda: copy_out.copy_(lg)), mb, 0.0))
        fd = loss_backward(R, V, dt)
        for label, choices in VARIANTS:
            with Choices(**choices):
                measure(rows, name, label, lambda: fd.execute([lg, lse, lab, g])[0], want, mb)
        out = torch.full_like(lg, float("nan"))
        n, block = lg.numel(), 2048
        grid = (triton.cdiv(n, block),)
        measure(rows, name, "span, gathered row values",
                lambda: (k.span_gather[grid](lg, lse, lab, g, out, n, V, BLOCK=block), out)[1], want, mb)
        out.fill_(float("nan"))
        measure(rows, name, "span, two scalar row values",
                lambda: (k.span_scalar[grid](lg, lse, lab, g, out, n, V, R, BLOCK=block), out)[1], want, mb)
        to = -(-V // 64) * 64
        pf = pad_rows(V, to, dt)
        measure(rows, name, f"pad to {to} as planned", lambda: pf.execute([lg])[0],
                torch.nn.functional.pad(lg, (0, to - V)), (lg.numel() + R * to) * lg.element_size() / 1e6)
    fz, args, want, mb = gpt2_zoo_inputs()
    for label, choices in VARIANTS:
        with Choices(**choices):
            measure(rows, "GPT-2", "zoo loss bwd " + label, lambda: fz.execute(args)[0], want, mb)
    logits = args[4]
    B, S, V = logits.shape
    to = 50304
    zp = zoo_pad(B, S, V, to)
    measure(rows, "GPT-2", "zoo pad as planned", lambda: zp.execute([logits])[0],
            torch.nn.functional.pad(logits.view(B * S, V), (0, to - V)), (logits.numel() + B * S * to) * 2 / 1e6)
    bert_zoo(rows)
    report(rows)


def report(rows):
    print(f"{'model':6} {'variant':36} {'ms':>7} {'MB':>7} {'GB/s':>6} {'max err':>9}")
    for name, label, ms, mb, err in rows:
        print(f"{name:6} {label:36} {ms:7.3f} {mb:7.0f} {mb / ms:6.0f} {err:9.2e}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
