"""Whether kernels compiled ahead, in another process, make a first execute a Triton cache hit (GPU only).

    PYTHONPATH=src python scripts/compile_ahead_probe.py driver [case,case,...]

The question behind compiling a graph's kernels in parallel before its first step
(issue 53): a kernel compiled by ``compat.compile_offline`` for the device's arch, in
a worker process writing to the same ``TRITON_CACHE_DIR``, must have the cache key the
runtime's own first launch computes (same source and name, specialization, options,
ptxas), or the work is wasted.  The driver runs, each in fresh cache directories:

* control: a fresh process executes the bench cases (first execute, timed);
* ahead:   a process plans the same cases offline (``bench.offline.check_case``: the
           spill check's candidates in the runtime's order, so the kernel names
           match) and compiles them, then a fresh process executes them.

It prints the first-execute seconds of each and the cache entries each process left:
"ahead" adding no entries and executing faster answers yes.  Delete this script once
docs/TUNING.md holds the answer.
"""
import json, os, subprocess, sys, tempfile, time

mode = sys.argv[1]
names = sys.argv[2].split(",") if len(sys.argv) > 2 else ["softmax_4096_bf16", "layer_norm_1024_bf16", "bias_gelu_tanh_fp16"]


def case_of(name):
    from pyfuser.bench import cases
    return [c for c in cases.CASES if c.name == name][0]


if mode == "driver":
    results = {}
    for label, pre in (("control", False), ("ahead", True)):
        d = tempfile.mkdtemp()
        env = dict(os.environ, TRITON_CACHE_DIR=d + "/triton", PYFUSER_CACHE_DIR=d + "/pyf")
        t = {}
        if pre:
            t0 = time.time()
            r = subprocess.run([sys.executable, __file__, "offline", ",".join(names)], env=env, capture_output=True, text=True)
            t["offline_s"] = round(time.time() - t0, 2)
            t["offline_out"] = (r.stdout.strip().splitlines() or [""])[-1] + r.stderr[-300:]
            t["entries_after_offline"] = len(os.listdir(d + "/triton")) if os.path.isdir(d + "/triton") else 0
        r = subprocess.run([sys.executable, __file__, "run", ",".join(names)], env=env, capture_output=True, text=True)
        t["run"] = (r.stdout.strip().splitlines() or [""])[-1] + r.stderr[-300:]
        t["entries_after_run"] = len(os.listdir(d + "/triton")) if os.path.isdir(d + "/triton") else 0
        results[label] = t
    print(json.dumps(results, indent=1))
elif mode == "offline":
    from pyfuser.bench import offline
    from pyfuser.runtime.toolchain import triton_ptxas
    n = 0
    with triton_ptxas():
        for name in names:
            rows = offline.check_case(case_of(name), arch=90, log=lambda *a: None)
            n += sum(len(r["tried"]) for r in rows)
    print(json.dumps({"compiled_offline": n}))
elif mode == "run":
    import torch
    out = {}
    for name in names:
        case = case_of(name)
        sizes = case.sizes(1.0)
        fd = case.define(sizes)
        inputs = case.make_inputs(sizes, "cuda", torch.Generator(device="cuda").manual_seed(0))
        torch.cuda.synchronize()
        t0 = time.time()
        fd.execute(inputs)
        torch.cuda.synchronize()
        out[name] = round(time.time() - t0, 3)
    print(json.dumps(out))
