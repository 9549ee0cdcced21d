"""Where the host time of a BERT forward + backward goes, pyfuser against torch.compile
(GPU machine):

    PYTHONPATH=src:benchmarks python benchmarks/host_split.py [BATCHxSEQ]

Both models compiled and warmed up in one process (``step_probe.warmed_step``), then:

1. ``torch.profiler`` (CPU and CUDA runtime events) of two forward + backward
   steps each: per ATen op or CUDA runtime call, how many per step and their own
   host time per step, side by side;
2. cProfile of three steps each, by own time (Python functions);
3. pyfuser's region calls of one step replayed back to back: as they are, with the
   kernel launches replaced by no-ops (the difference is the launches' host cost),
   and the output allocations alone.
"""
import sys, time
import torch

from step_probe import own_time_profile, region_calls_timed, warmed_pair

steps, (ids, labels) = warmed_pair(sys.argv)

# 1. ATen ops and CUDA runtime calls per step
tables = {}
for impl, st in steps.items():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            st.model_step(ids, labels)
        torch.cuda.synchronize()
    tables[impl] = {e.key: (e.count / 2, e.self_cpu_time_total / 2) for e in prof.key_averages()}
    dev = sum(getattr(e, "self_device_time_total", 0) for e in prof.key_averages()) / 2
    print(f"{impl}: GPU time per forward + backward step {dev / 1e3:.2f} ms")
names = sorted(set(tables["pyfuser"]) | set(tables["inductor"]),
               key=lambda k: -max(tables["pyfuser"].get(k, (0, 0))[1], tables["inductor"].get(k, (0, 0))[1]))
print("## host events per forward + backward step (torch.profiler; own CPU us per step)")
print("| event | pyfuser calls | pyfuser us | inductor calls | inductor us |")
print("|---|---|---|---|---|")
for k in names[:45]:
    p, i = tables["pyfuser"].get(k, (0, 0)), tables["inductor"].get(k, (0, 0))
    print(f"| {k[:60]} | {p[0]:.0f} | {p[1]:.0f} | {i[0]:.0f} | {i[1]:.0f} |")
for impl, t in tables.items():
    print(f"{impl}: {sum(c for c, _ in t.values()):.0f} events, {sum(u for _, u in t.values()) / 1e3:.2f} ms own time per step")

# 2. Python functions
for impl, st in steps.items():
    print(f"\n## {impl}: cProfile of 3 forward + backward steps, by own time")
    print(own_time_profile(lambda: [st.model_step(ids, labels) for _ in range(3)]))

# 3. pyfuser's region calls replayed
from pyfuser.dynamo.host_bench import prepared_programs, stub_launches

recorded = []
st = steps["pyfuser"]
for _ in range(3):
    with region_calls_timed(recorded if not recorded else None, keep=10000) as inside:
        t0 = time.perf_counter()
        st.model_step(ids, labels)
        host = time.perf_counter() - t0
    torch.cuda.synchronize()
    print(f"\nin place: step host {host * 1e3:.2f} ms, {inside[1]} region calls, {inside[0] * 1e3:.2f} ms in them")


def replay(n=5):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        for r, a in recorded:
            r(*a)
    dt = (time.perf_counter() - t0) / (n * len(recorded))
    torch.cuda.synchronize()
    return dt * 1e6


allocs = [a for p in prepared_programs() for la in p.launches for a in la.alloc]
full = replay()
from pyfuser.runtime.launch import allocator
empty = allocator(torch.device("cuda"))
shapes = allocs[:50]
t0 = time.perf_counter()
for _ in range(200):
    for shape, strides, dtype in shapes:
        empty(shape, strides, dtype)
alloc_us = (time.perf_counter() - t0) / (200 * len(shapes)) * 1e6

stub_launches()
for r, a in recorded:
    r(*a)
stubbed = replay()
print(f"region call replayed back to back: {full:.1f} us; launches stubbed {stubbed:.1f} us; "
      f"one output allocation {alloc_us:.2f} us ({len(recorded)} calls)")
