"""What the padded width of a vocabulary GEMM costs around it (GPU): GPT-2's head,
its 50257 words padded to a multiple of 8 (50264, rows 16-byte aligned) or of 64
(50304, rows 128-byte aligned), and BERT's 30522 (30528, which is both).

    PYTHONPATH=src:benchmarks python benchmarks/pad_widths.py

For each width: pyfuser's pad of the logits' gradient to that width (the backward's
input to both GEMMs), its contiguous copy of the padded GEMM's sliced result (the
logits a model returns), both against the device-to-device copy of the same bytes,
and the three GEMMs of the head (forward, the gradients of the hidden states and of
the weight) through ``torch.mm`` as the padded graph calls them
(docs/TUNING.md#pad-matmuls).
"""
import sys

import torch
import triton

from pyfuser import DataType, FusionDefinition


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=400, return_mode="median")


def pad_rows(V, to, dt):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
        fd.add_output(fd.ops.pad(x, [0, to - V], fd.define_scalar(0.0, DataType.Float)))
    return fd


def copy_rows(dt):
    """A contiguous copy of a [rows, V] view whose rows start every ``to`` elements."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], dtype=dt)
        fd.add_output(fd.ops.set(x))
    return fd


def widths(rows, name, R, V, H, tos, tdt, dt, dev="cuda"):
    gen = torch.Generator(device=dev).manual_seed(0)
    g = torch.randn(R, V, device=dev, generator=gen).to(tdt)
    h = torch.randn(R, H, device=dev, generator=gen).to(tdt)
    w = torch.randn(V, H, device=dev, generator=gen).to(tdt) / H ** 0.5
    out = torch.empty_like(g)
    rows.append((name, f"copy [{R}, {V}]", bench(lambda: out.copy_(g)), 2 * g.numel() * g.element_size() / 1e6, 0.0))
    for to in tos:
        mb = (R * V + R * to) * g.element_size() / 1e6
        fp = pad_rows(V, to, dt)
        want = torch.nn.functional.pad(g, (0, to - V))
        rows.append((name, f"pad to {to}", *_timed(lambda: fp.execute([g])[0], want), mb, ""))
        view = want[:, :V]
        fc = copy_rows(dt)
        rows.append((name, f"copy of the view, rows every {to}", *_timed(lambda: fc.execute([view])[0], g),
                     2 * g.numel() * g.element_size() / 1e6, ""))
        wp = torch.nn.functional.pad(w, (0, 0, 0, to - V))
        gp, hT, wpT = want, h.t(), wp.t()
        flops = 2 * R * to * H
        rows.append((name, f"GEMM forward h @ w.T, N={to}", bench(lambda: torch.mm(h, wpT)), 0.0, flops))
        rows.append((name, f"GEMM grad h: g @ w, K={to}", bench(lambda: torch.mm(gp, wp)), 0.0, flops))
        rows.append((name, f"GEMM grad w: g.T @ h, M={to}", bench(lambda: torch.mm(gp.t(), h)), 0.0, flops))
        del hT


def _timed(run, want):
    """(ms, max error) of ``run``, its result checked against ``want`` after the
    caching allocator's block for it was filled with NaN (an unwritten element fails)."""
    poison = torch.full_like(want, float("nan"))
    del poison
    err = (run().float() - want.float()).abs().max().item()
    return bench(run), err


def main():
    rows = []
    widths(rows, "GPT-2", 8192, 50257, 768, (50257, 50264, 50304), torch.bfloat16, DataType.BFloat16)
    widths(rows, "BERT", 8192, 30522, 768, (30528, 30592), torch.float16, DataType.Half)
    print(f"{'model':6} {'variant':40} {'ms':>7} {'MB':>7} {'GB/s':>6} {'TFLOP/s':>8} {'max err':>9}")
    for name, label, ms, *rest in rows:
        if len(rest) == 3:  # a kernel: (err, MB, "")
            err, mb, _ = rest
            print(f"{name:6} {label:40} {ms:7.3f} {mb:7.0f} {mb / ms:6.0f} {'':>8} {err:9.2e}")
        else:
            mb, flops = rest
            if flops:
                print(f"{name:6} {label:40} {ms:7.3f} {'':>7} {'':>6} {flops / ms / 1e9:8.0f}")
            else:
                print(f"{name:6} {label:40} {ms:7.3f} {mb:7.0f} {mb / ms:6.0f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
