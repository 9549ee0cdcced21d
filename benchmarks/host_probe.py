"""Where a BERT training step's host time goes, pyfuser against torch.compile (GPU machine).

    PYTHONPATH=src python benchmarks/host_probe.py [BATCHxSEQ]

Both models compiled and warmed up in one process, then 8 steps each, twice in turn:
the host's time in the forward + backward (``model_step``) and in the optimizer step
(no synchronization between them, as in a training loop), and for pyfuser the time
spent inside its fused-region calls (``FusedRegion.forward``, timed in place).  Then
cProfile of 3 steps of each, by own time.
"""
import cProfile, io, pstats, statistics, sys, time, gc
import torch
from pyfuser.dynamo import bert_bench as bb
from pyfuser.dynamo import region as R

B, S = (int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "64x128").split("x"))
config = bb._bert_config(True, None)
batches = bb._batches(config, B, S, 4, "cuda", 1)
ids, labels = batches[3]
steps = {}
for impl in ("pyfuser", "inductor"):
    torch.manual_seed(0)
    model = bb._new_model(config).cuda().train()
    model = torch.compile(model, backend="pyfuser" if impl == "pyfuser" else "inductor", dynamic=False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    st = bb.training_step(model, opt, "cuda", torch.float16)
    for i, l in batches[:3]:
        st(i, l)
    torch.cuda.synchronize()
    steps[impl] = st
gc.collect()

inside = [0.0, 0]
fwd = R.FusedRegion.forward
def timed_forward(self, *a):
    t0 = time.perf_counter()
    try:
        return fwd(self, *a)
    finally:
        inside[0] += time.perf_counter() - t0
        inside[1] += 1

rows = []
for rnd in range(2):
    for impl, st in steps.items():
        m, o, r = [], [], []
        for _ in range(8):
            if impl == "pyfuser":
                R.FusedRegion.forward = timed_forward
            inside[:] = [0.0, 0]
            t0 = time.perf_counter()
            st.model_step(ids, labels)
            t1 = time.perf_counter()
            st.optimizer_step()
            t2 = time.perf_counter()
            R.FusedRegion.forward = fwd
            m.append((t1 - t0) * 1e3); o.append((t2 - t1) * 1e3); r.append((inside[0] * 1e3, inside[1]))
        torch.cuda.synchronize()
        rr = statistics.median(x for x, _ in r)
        rows.append(f"| {rnd} | {impl} | {statistics.median(m):.2f} | {statistics.median(o):.2f} | {rr:.2f} | {r[0][1]} |")
print("| round | impl | model_step host ms | optimizer host ms | in region calls ms | region calls |")
print("|---|---|---|---|---|---|")
print("\n".join(rows))
for impl, st in steps.items():
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3):
        st.model_step(ids, labels)
        st.optimizer_step()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(32)
    print(f"==== {impl}: cProfile of 3 steps, by own time")
    print("\n".join(l[:160] for l in out.getvalue().splitlines()[:60]))
