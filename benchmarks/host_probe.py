"""Where a BERT training step's host time goes, pyfuser against torch.compile (GPU machine).

    PYTHONPATH=src python benchmarks/host_probe.py [BATCHxSEQ]

Both models compiled and warmed up in one process, then 8 steps each, twice in turn:
the host's time in the forward + backward (``model_step``) and in the optimizer step
(no synchronization between them, as in a training loop), and for pyfuser the time
spent inside its fused-region calls (``step_probe.region_calls_timed``, in place).  Then
cProfile of 3 steps of each, by own time.
"""
import statistics, sys, time
import torch

from step_probe import own_time_profile, region_calls_timed, warmed_pair

steps, (ids, labels) = warmed_pair(sys.argv)

rows = []
for rnd in range(2):
    for impl, st in steps.items():
        m, o, r = [], [], []
        for _ in range(8):
            with region_calls_timed() as inside:
                t0 = time.perf_counter()
                st.model_step(ids, labels)
                t1 = time.perf_counter()
                st.optimizer_step()
                t2 = time.perf_counter()
            m.append((t1 - t0) * 1e3); o.append((t2 - t1) * 1e3); r.append((inside[0] * 1e3, inside[1]))
        torch.cuda.synchronize()
        rr = statistics.median(x for x, _ in r)
        rows.append(f"| {rnd} | {impl} | {statistics.median(m):.2f} | {statistics.median(o):.2f} | {rr:.2f} | {r[0][1]} |")
print("| round | impl | model_step host ms | optimizer host ms | in region calls ms | region calls |")
print("|---|---|---|---|---|---|")
print("\n".join(rows))
for impl, st in steps.items():
    def three_steps():
        for _ in range(3):
            st.model_step(ids, labels)
            st.optimizer_step()

    print(f"==== {impl}: cProfile of 3 steps, by own time")
    print(own_time_profile(three_steps, rows=32, width=160))
