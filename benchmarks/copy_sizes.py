"""Device-to-device copy bandwidth by size, timed as the bench times (``do_bench``,
L2 flushed before each call, median).  The bench's "% of copy" divides by the copy
of 2 GB moved (1 GB read, 1 GB written); a kernel moving 268 MB pays the same launch
and ramp per call over a quarter of the bytes, so this shows the ceiling a case of
that size can reach.

    PYTHONPATH=src python benchmarks/copy_sizes.py
"""
import torch
import triton


def main():
    print("| bytes moved (read + write) | copy us | GB/s | % of the 2 GB copy |")
    print("|---|---|---|---|")
    rows = []
    for mb in (2048, 1024, 536, 402, 268, 134, 67):
        n = mb * 2**20 // 8  # fp32 elements per tensor: half the bytes read, half written
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        ms = min(triton.testing.do_bench(lambda: y.copy_(x), return_mode="median") for _ in range(2))
        rows.append((mb, ms, 2 * n * 4 / ms / 1e6))
        del x, y
    for mb, ms, gbps in rows:
        print(f"| {mb} MB | {ms * 1e3:.1f} | {gbps:.0f} | {100 * gbps / rows[0][2]:.1f} |")


if __name__ == "__main__":
    main()
