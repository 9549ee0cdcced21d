"""Where a BERT training step's time goes on the host, per implementation (GPU machine):

    PYTHONPATH=src python benchmarks/step_probe.py [BATCHxSEQ] [IMPL ...]

For each implementation (pyfuser, inductor by default), after a warm-up:

* ``sync``: the synchronizing CUDA calls of one step (``torch.cuda.set_sync_debug_mode``),
  with the Python line that made each;
* ``free``: steps back to back, as ``bert_bench`` times them: the host's time in
  ``step()`` (no synchronization) and the GPU's time between events around it;
* ``drained``: the same after ``torch.cuda.synchronize()`` before each step, so the
  host time is the step's own and the GPU's is its kernels plus the gaps the host
  leaves;
* ``nogc``: ``free`` with Python's garbage collector off;
* for pyfuser, the host time of a fused-region call measured in place (inside the
  free steps, between the ATen ops around it) and the same calls replayed back to
  back: on the CPU machine a region call took 52.7 us in place and 8.0 us replayed
  (``dynamo/README.md``, host cost), the difference being caches the step's other
  work evicted.
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import sys
import time
import warnings

import torch

from pyfuser.dynamo import bert_bench as bb


def warmed_step(impl, batch, seq):
    """(training step, batches) of BERT under ``impl`` ("pyfuser", "inductor", "eager"),
    compiled and run for three steps; batches[3] is left for probing."""
    config = bb._bert_config(True, None)
    torch.manual_seed(0)
    model = bb._new_model(config).cuda().train()
    batches = bb._batches(config, batch, seq, 4, "cuda", 1)
    if impl == "pyfuser":
        model = torch.compile(model, backend="pyfuser", dynamic=False)
    elif impl == "inductor":
        model = torch.compile(model, dynamic=False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    step = bb.training_step(model, opt, "cuda", torch.float16)
    for ids, labels in batches[:3]:
        step(ids, labels)
    torch.cuda.synchronize()
    return step, batches


def warmed_pair(argv):
    """``(steps, (ids, labels))``: pyfuser's and torch.compile's warmed-up steps
    (``steps["pyfuser"]``, ``steps["inductor"]``) at the BATCHxSEQ of ``argv[1]``
    (default 64x128), and the batch left for probing; garbage collected after."""
    batch, seq = (int(x) for x in (argv[1] if len(argv) > 1 else "64x128").split("x"))
    steps = {}
    for impl in ("pyfuser", "inductor"):
        steps[impl], batches = warmed_step(impl, batch, seq)
    gc.collect()
    return steps, batches[3]


def own_time_profile(fn, rows=40, width=170) -> str:
    """cProfile of ``fn()`` (the GPU drained before the profile stops), its ``rows``
    functions of most own time, lines cut at ``width``."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    fn()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(rows)
    return "\n".join(line[:width] for line in out.getvalue().splitlines()[:rows + 22])


@contextlib.contextmanager
def region_calls_timed(record=None, keep=200):
    """pyfuser's fused-region calls timed in place while the block runs: yields
    ``[seconds, calls]``; ``record`` (a list) gets (region, args) of the first ``keep``."""
    from pyfuser.dynamo import region as R

    total = [0.0, 0]
    plain = R.FusedRegion.__call__

    def in_place(self, *args):
        t0 = time.perf_counter()
        try:
            return plain(self, *args)
        finally:
            total[0] += time.perf_counter() - t0
            total[1] += 1
            if record is not None and len(record) < keep:
                record.append((self, args))

    R.FusedRegion.__call__ = in_place
    try:
        yield total
    finally:
        R.FusedRegion.__call__ = plain


def probe(impl, batch, seq, steps=10):
    step, batches = warmed_step(impl, batch, seq)
    gc.collect()
    ids, labels = batches[3]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode(1)
        try:
            step(ids, labels)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    syncs: dict = {}
    for w in caught:
        k = f"{w.filename}:{w.lineno}: {str(w.message)[:80]}"
        syncs[k] = syncs.get(k, 0) + 1

    def timed(drain):
        host, dev = [], []
        for _ in range(steps):
            if drain:
                torch.cuda.synchronize()
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            t0 = time.perf_counter()
            step(ids, labels)
            host.append((time.perf_counter() - t0) * 1e3)
            b.record()
            dev.append((a, b))
        torch.cuda.synchronize()
        return statistics.median(host), statistics.median(x.elapsed_time(y) for x, y in dev)

    region_us = None
    if impl == "pyfuser":
        recorded = []
        with region_calls_timed(recorded) as spent:
            timed(False)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            for r, args in recorded:
                r(*args)
        replayed = (time.perf_counter() - t0) / (5 * len(recorded))
        torch.cuda.synchronize()
        region_us = (spent[0] / spent[1] * 1e6, replayed * 1e6)
    out = {"sync": syncs, "free": timed(False), "drained": timed(True), "region_us": region_us}
    gc.disable()
    try:
        out["nogc"] = timed(False)
    finally:
        gc.enable()
    torch._dynamo.reset()
    return out


def main():
    shape = next((a for a in sys.argv[1:] if "x" in a), "64x128")
    impls = [a for a in sys.argv[1:] if "x" not in a] or ["pyfuser", "inductor"]
    batch, seq = (int(x) for x in shape.split("x"))
    rows = []
    for impl in impls:
        r = probe(impl, batch, seq)
        print(f"{impl}: synchronizing calls in one step: {sum(r['sync'].values())}")
        for k, n in r["sync"].items():
            print(f"  {n} x {k}")
        if r["region_us"]:
            print(f"  host time per region call: {r['region_us'][0]:.1f} us in place, "
                  f"{r['region_us'][1]:.1f} us replayed back to back")
        rows.append((impl, r))
    print(f"\nBERT {shape}: median ms per step (host = time in step(), gpu = events around it)")
    print("| impl | free host | free gpu | drained host | drained gpu | nogc host | nogc gpu |")
    print("|---|---|---|---|---|---|---|")
    for impl, r in rows:
        print(f"| {impl} | " + " | ".join(f"{r[k][0]:.2f} | {r[k][1]:.2f}" for k in ("free", "drained", "nogc")) + " |")


if __name__ == "__main__":
    main()
