"""What the padded width of a vocabulary GEMM costs around it (GPU): GPT-2's head,
its 50257 words padded to a multiple of 8 (50264, rows 16-byte aligned) or of 64
(50304, rows 128-byte aligned), and BERT's 30522 (30528, which is both).

    PYTHONPATH=src:benchmarks python benchmarks/pad_widths.py

For each width: pyfuser's pad of the logits' gradient to that width (the backward's
input to both GEMMs) and its contiguous copy of the padded GEMM's sliced result (the
logits a model returns), against the device-to-device copy of the same bytes; then
the three GEMMs of the head (forward, the gradients of the hidden states and of the
weight) through ``torch.mm`` as the padded graph calls them
(docs/TUNING.md#pad-matmuls).
"""
import torch

from pyfuser import DataType, FusionDefinition

from odd_rows import bench, measure, pad_rows, report


def copy_rows(dt):
    """A contiguous copy of a [rows, V] view whose rows start further apart."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], dtype=dt)
        fd.add_output(fd.ops.set(x))
    return fd


def widths(rows, gemms, name, R, V, H, tos, tdt, dt, dev="cuda"):
    """Kernel rows (``odd_rows.measure``) and GEMM rows (name, label, ms, TFLOP) of
    [R, V] logits of hidden size H at each padded width in ``tos``."""
    gen = torch.Generator(device=dev).manual_seed(0)
    g = torch.randn(R, V, device=dev, generator=gen).to(tdt)
    h = torch.randn(R, H, device=dev, generator=gen).to(tdt)
    w = torch.randn(V, H, device=dev, generator=gen).to(tdt) / H ** 0.5
    mb = 2 * g.numel() * g.element_size() / 1e6
    out = torch.empty_like(g)
    rows.append((name, f"copy [{R}, {V}]", bench(lambda: out.copy_(g)), mb, 0.0))
    for to in tos:
        fp, fc = pad_rows(V, to, dt), copy_rows(dt)
        padded = torch.nn.functional.pad(g, (0, to - V))
        measure(rows, name, f"pad to {to}", lambda: fp.execute([g])[0], padded,
                (R * V + R * to) * g.element_size() / 1e6)
        measure(rows, name, f"copy of the view, rows every {to}", lambda: fc.execute([padded[:, :V]])[0], g, mb)
        wp = torch.nn.functional.pad(w, (0, 0, 0, to - V))
        tflop = 2 * R * to * H / 1e12
        for label, run in ((f"forward h @ w.T, N={to}", lambda: torch.mm(h, wp.t())),
                           (f"grad h: g @ w, K={to}", lambda: torch.mm(padded, wp)),
                           (f"grad w: g.T @ h, M={to}", lambda: torch.mm(padded.t(), h))):
            gemms.append((name, label, bench(run), tflop))


def main():
    rows, gemms = [], []
    widths(rows, gemms, "GPT-2", 8192, 50257, 768, (50257, 50264, 50304), torch.bfloat16, DataType.BFloat16)
    widths(rows, gemms, "BERT", 8192, 30522, 768, (30528, 30592), torch.float16, DataType.Half)
    report(rows)
    print(f"{'model':6} {'GEMM':36} {'ms':>7} {'TFLOP/s':>8}")
    for name, label, ms, tflop in gemms:
        print(f"{name:6} {label:36} {ms:7.3f} {tflop / ms * 1e3:8.0f}")


if __name__ == "__main__":
    main()
