"""GPU exploration: cuBLAS at aligned vs misaligned sizes, per-kernel profiles of
pyfuser vs torch.compile, and an outer-reduction parameter sweep.

    PYTHONPATH=src python benchmarks/explore.py gemm profiles sweep
Writes explore.txt to $OUT (or .); results of 2026-11-30 in
benchmarks/results/2026-11-30-nvidia-h200-explore.txt.
"""
import os, sys, json, time, subprocess
import torch, triton
from torch.profiler import profile, ProfilerActivity

OUT = os.environ.get("OUT", ".")
bench = lambda f: triton.testing.do_bench(f, return_mode="median")
lines = []
def P(s):
    print(s, flush=True); lines.append(s)

def part_gemm():
    P("## GEMM alignment (fp16, 8192 tokens, hidden 768)")
    x = torch.randn(8192, 768, device="cuda", dtype=torch.half)
    for N in (30522, 30528):
        W = torch.randn(N, 768, device="cuda", dtype=torch.half); b = torch.randn(N, device="cuda", dtype=torch.half)
        G = torch.randn(8192, N, device="cuda", dtype=torch.half)
        f = 2 * 8192 * 768 * N / 1e9
        t1 = bench(lambda: torch.nn.functional.linear(x, W, b)); t1b = bench(lambda: torch.mm(x, W.t()))
        t2 = bench(lambda: torch.mm(G, W)); t3 = bench(lambda: torch.mm(G.t(), x))
        P(f"N={N}: addmm {t1:.3f} ms ({f/t1:.0f} TF/s) mm {t1b:.3f} | G@W {t2:.3f} ({f/t2:.0f}) | G^T@x {t3:.3f} ({f/t3:.0f})")
    # padded storage, logical 30522
    Gp = torch.randn(8192, 30528, device="cuda", dtype=torch.half)[:, :30522]
    W = torch.randn(30522, 768, device="cuda", dtype=torch.half)
    Wp = torch.zeros(30528, 768, device="cuda", dtype=torch.half); Wp[:30522] = W
    t2 = bench(lambda: torch.mm(Gp, W)); t3 = bench(lambda: torch.mm(Gp.t(), x))
    t4 = bench(lambda: torch.mm(x, Wp.t())[:, :30522])
    tpad = bench(lambda: torch.nn.functional.pad(W, (0, 0, 0, 6)))
    P(f"padded-stride G (K=30522): G@W {t2:.3f} | G^T@x {t3:.3f} | x@Wp^T sliced {t4:.3f} | pad W {tpad:.3f}")

def kernels(fn, n=20):
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    agg = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        c, t = agg.get(e.name, (0, 0.0)); agg[e.name] = (c + 1, t + e.time_range.elapsed_us())
    return [(k[:70], c / n, t / c) for k, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])]

def part_profiles():
    from pyfuser.bench import cases
    P("## per-kernel profile (us per call)")
    for name in ("layer_norm_backward_bf16", "dropout_residual_layer_norm_backward_bf16", "rms_norm_backward_bf16",
                 "bias_grad_sum_dim0_fp16", "rope_forward_bf16", "adam_step_fp32", "softmax_128_fp16"):
        c = cases.BY_NAME[name]; sizes = c.sizes(1.0)
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs = c.make_inputs(sizes, "cuda", gen)
        fd = c.define(sizes)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        torch._dynamo.reset()
        comp = torch.compile(lambda *ts: c.eager(list(ts), sizes))
        for impl, fn in (("pyfuser", lambda: fd.execute(inputs)), ("inductor", lambda: comp(*tensors))):
            try:
                for k, calls, us in kernels(fn)[:4]:
                    P(f"{name} | {impl} | {k} | {calls:.0f}x | {us:.1f}")
            except Exception as e:
                P(f"{name} | {impl} | ERROR {type(e).__name__}: {str(e)[:200]}")

def part_sweep():
    sys.path.insert(0, "benchmarks")
    from pyfuser import DataType
    from pyfuser.bench.training import tensor, up, bcast_rows
    from sweep import measure, stats
    P("## outer sweep | params | ms | GB/s | regs/spills")

    def run(name, build, variants):
        for ov in variants:
            ms, nbytes, rec = measure(build, ov)
            P(f"| {name} | {ov} | {ms:.4f} | {nbytes / ms / 1e6:.0f} | {stats(rec)} grid={[r[1] for r in rec]} |")

    def sum0(fd):
        x = tensor(fd, 2, DataType.Half)
        fd.add_output(fd.ops.sum(x, dims=[0]))
        return [torch.randn(16384, 4096, device="cuda", dtype=torch.float16)]
    def lncols(fd):
        R, N = 16384, 1024
        dy, x = tensor(fd, 2, DataType.BFloat16), tensor(fd, 2, DataType.BFloat16)
        mean, rstd = tensor(fd, 1), tensor(fd, 1)
        xhat = fd.ops.mul(fd.ops.sub(up(fd, x), bcast_rows(fd, mean, (R, N))), bcast_rows(fd, rstd, (R, N)))
        dyf = up(fd, dy)
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(dyf, xhat), dims=[0]), DataType.BFloat16))
        fd.add_output(fd.ops.cast(fd.ops.sum(dyf, dims=[0]), DataType.BFloat16))
        g = lambda *s: torch.randn(*s, device="cuda")
        return [g(R, N).bfloat16(), g(R, N).bfloat16(), g(R), g(R).abs() + 0.5]
    O = dict(persistent=False)
    V = [{}]
    for bk, bj, w, s in ((16, 512, 8, 16), (32, 256, 8, 32), (64, 128, 8, 32), (64, 128, 8, 64), (64, 64, 4, 64),
                         (128, 64, 8, 64), (32, 128, 4, 32), (64, 256, 16, 32)):
        V.append(dict(O, block_k=bk, block_j=bj, num_warps=w, split=s))
    run("sum0 [16384,4096] fp16", sum0, V)
    V = [{}]
    for bk, bj, w, s in ((16, 256, 8, 16), (32, 128, 8, 32), (64, 64, 8, 64), (64, 32, 4, 64), (32, 64, 4, 32),
                         (64, 128, 16, 32), (128, 32, 8, 64)):
        V.append(dict(O, block_k=bk, block_j=bj, num_warps=w, split=s))
    run("lncols [16384,1024] bf16", lncols, V)

def main():
    x = torch.empty(2**28, dtype=torch.float32, device="cuda"); y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x)); P(f"copy {2 * x.numel() * 4 / ms / 1e6:.0f} GB/s"); del x, y
    for part in sys.argv[1:]:
        t0 = time.time()
        try:
            globals()["part_" + part]()
        except Exception as e:
            import traceback; P(f"PART {part} FAILED: {traceback.format_exc()[-1500:]}")
        P(f"[{part}: {time.time() - t0:.0f} s]")
        open(os.path.join(OUT, "explore.txt"), "w").write("\n".join(lines) + "\n")

if __name__ == "__main__":
    main()
