"""What limits the cross-entropy backward over long rows (GPT-2's 50257 words as the
backend builds it, BERT's padded one): the generated kernel as planned and in other
blocks, and a hand-written form whose programs walk several column blocks of one row,
the row's values (label, statistics, scale) computed once before the walk, with the
label compared in 32 bits and the exponential flushing denormals or not.  Each against
the device-to-device copy of the same bytes.

    PYTHONPATH=src:benchmarks python benchmarks/loss_ideas.py
"""
import torch
import triton

from pyfuser.schedulers.base import Choices

from jit_source import module_from_source
from odd_rows import bench, bert_zoo_inputs, gpt2_zoo_inputs, measure, report

KERNELS = '''import triton
import triton.language as tl


@triton.jit
def row_walk(lg, mx, ls, lab, lab_st0, lab_st1, S, g_ptr, cnt_ptr, zero_ptr, out, J,
             NB: tl.constexpr, I32: tl.constexpr, FTZ: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(1)
    c = tl.program_id(0)
    b = r // S
    lb = tl.load(lab + b * lab_st0 + (r - b * S) * lab_st1)
    gy = tl.div_rn(-tl.load(g_ptr), tl.load(cnt_ptr))
    z = tl.load(zero_ptr)
    keep = lb != -100
    w = tl.where((lb >= 0) & (lb < J) & keep, gy, z)
    m = tl.load(mx + r)
    l = tl.load(ls + r)
    lbn = tl.where((lb >= 0) & (lb < 2147483647), lb, -1).to(tl.int32)
    base = r * J
    for i in range(NB):
        j = (c * NB + i) * BLOCK + tl.arange(0, BLOCK)
        mask = j < J
        x = tl.load(lg + base + j, mask=mask).to(tl.float32)
        a = x - m - l
        if FTZ:
            e = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [a * 1.4426950408889634],
                                          dtype=tl.float32, is_pure=True, pack=1)
        else:
            e = tl.exp(a)
        if I32:
            hit = j == lbn
        else:
            hit = j.to(tl.int64) == lb
        d = tl.where(hit & keep, gy, z) - e * w
        tl.store(out + base + j, d.to(out.dtype.element_ty), mask=mask)
'''


def gpt2(rows, k):
    fz, args, want, mb = gpt2_zoo_inputs()
    g, count, lab, zero, logits, mx, ls = args
    B, S, V = logits.shape
    copy_out = torch.empty_like(logits)
    rows.append(("GPT-2", "copy (read + write)", bench(lambda: copy_out.copy_(logits)), mb, 0.0))
    measure(rows, "GPT-2", "as planned", lambda: fz.execute(args)[0], want, mb)
    for label, choice in (("blocks of 2048", dict(block=2048)), ("blocks of 2048, 8 warps", dict(block=2048,
                                                                                                 num_warps=8))):
        with Choices(**choice):
            measure(rows, "GPT-2", label, lambda: fz.execute(args)[0], want, mb)
    out = torch.empty_like(logits)
    block = 1024
    nblk = triton.cdiv(V, block)
    for nb in (1, 2, 4, 8, nblk):
        for i32, ftz in ((0, 0), (1, 0), (0, 1), (1, 1)):
            grid = (triton.cdiv(nblk, nb), B * S)
            out.fill_(float("nan"))
            measure(rows, "GPT-2", f"row walk, {nb} blocks, i32 {i32} ftz {ftz}",
                    lambda: (k.row_walk[grid](logits, mx, ls, lab, lab.stride(0), lab.stride(1), S, g, count, zero,
                                              out, V, NB=nb, I32=i32, FTZ=ftz, BLOCK=block, num_warps=4), out)[1],
                    want, mb)


def bert(rows):
    fb, args, want, mb = bert_zoo_inputs()
    measure(rows, "BERT", "loss bwd + pad as planned", lambda: fb.execute(args)[0], want, mb)


def main():
    k = module_from_source("loss_ideas_kernels", KERNELS)
    rows = []
    gpt2(rows, k)
    bert(rows)
    report(rows)


if __name__ == "__main__":
    main()
