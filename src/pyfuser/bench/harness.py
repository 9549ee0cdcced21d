"""Run benchmark cases: check pyfuser against eager, then time pyfuser, eager and
torch.compile (Inductor) with the L2 flushed, and read registers/spills of the
kernels pyfuser launched (``kernel_stats.py``).

Timing is ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")``: it
zeroes a 256 MB buffer before every repetition (the L2 flush) and times each call
with CUDA events.  Every implementation is timed in ``Options.rounds`` such rounds,
one after the other, and the lowest median counts: a round early in a process can
run slow as a whole (docs/TUNING.md#timing-rounds), and that one
implementation's bad round then decided a ratio.  pyfuser is timed through
``fd.execute(inputs)`` - the whole cached execute, host work included - and, for
reference, by replaying the very launches one execute made (``pyfuser_kernel_ms``,
kernels only).

Effective bandwidth = bytes / median time, where bytes = every tensor input and
every output once; an output that shares storage with an input (a view) moves 0
bytes.  The same byte count is used for all three implementations.
"""
from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass

import torch

from .cases import HOST_TARGET_US, SHORT, Case
from .kernel_stats import execute_recorded, fallback_kernel_stats, host_segments, kernel_stats

# (rtol, atol) per output dtype: about two units in the last place of the stored
# dtype for fp16/bf16 (pyfuser and eager may round a different fp32 value), fp32
# reductions summed in a different order.
TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.float16: (2e-3, 1e-4),
    torch.bfloat16: (1.6e-2, 1e-3),
    torch.float64: (1e-7, 1e-9),
}


@dataclass
class Options:
    device: str = "cuda"
    scale: float = 1.0
    timing: bool = True  # False: correctness only (dry run)
    compile: bool = True  # time torch.compile (Inductor)
    warmup: int = 25  # do_bench warmup, ms
    rep: int = 100  # do_bench repetitions, ms
    rounds: int = 2  # do_bench calls per implementation; the lowest median counts
    budget_s: float = 420.0  # past this, remaining cases skip torch.compile
    host_calls: int = 2000
    seed: int = 0


def log(msg: str):
    print(msg, flush=True)


def _sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def median_ms(fn, opts: Options) -> float:
    """Median ms.  CUDA: the lowest of ``opts.rounds`` do_bench medians (L2 flushed;
    module docstring).  CPU (--cpu-timing, a self-test of the harness only): median
    wall time of a few calls."""
    if not str(opts.device).startswith("cuda"):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return sorted(times)[1]
    import triton.testing

    return min(float(triton.testing.do_bench(fn, warmup=opts.warmup, rep=opts.rep, return_mode="median"))
               for _ in range(opts.rounds))


def copy_bandwidth(opts: Options) -> float:
    """Device-to-device copy of a 1 GiB tensor (16 MiB on CPU), bytes read + written, GB/s."""
    n = 2**28 if str(opts.device).startswith("cuda") else 2**22
    x = torch.empty(n, dtype=torch.float32, device=opts.device).fill_(1.0)
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), opts)
    gbps = 2 * x.numel() * x.element_size() / ms / 1e6
    x = y = None  # free before the next allocation
    free_memory(opts.device)
    return gbps


# --- bytes, checks ------------------------------------------------------------------------


def moved_bytes(inputs, outputs) -> int:
    """Every tensor input once, every output once unless it shares storage with an input
    (a view) or with an output already counted."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    total = sum(t.numel() * t.element_size() for t in tensors)
    seen = {t.untyped_storage().data_ptr() for t in tensors}
    for o in outputs:
        ptr = o.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        total += o.untyped_storage().nbytes()
    return total


def compare(case: Case, outs, refs) -> tuple[bool, str]:
    """pyfuser's outputs vs eager's: dtype and shape exactly, values at the output
    dtype's precision, bool outputs exactly."""
    if len(outs) != len(refs):
        return False, f"{len(outs)} outputs, eager has {len(refs)}"
    ok, notes = True, []
    for i, (o, r) in enumerate(zip(outs, refs)):
        if o.shape != r.shape or o.dtype != r.dtype:
            ok = False
            notes.append(f"out{i}: {tuple(o.shape)} {o.dtype} vs eager {tuple(r.shape)} {r.dtype}")
            continue
        if o.numel() == 0:
            continue
        if o.dtype == torch.bool or not o.dtype.is_floating_point:
            bad = int((o != r).sum().item())
            if bad:
                ok = False
                notes.append(f"out{i}: {bad} of {o.numel()} differ")
            continue
        rtol, atol = case.tol.get(o.dtype, TOLERANCES.get(o.dtype, (1e-5, 1e-6)))
        if o.device.type == "cpu":
            rtol, atol = case.cpu_tol.get(o.dtype, (rtol, atol))
        of, rf = o.float(), r.float()
        diff = (of - rf).abs()
        both_nan = of.isnan() & rf.isnan()
        excess = (diff - (atol + rtol * rf.abs())).masked_fill(both_nan, 0.0).nan_to_num(float("inf"))
        worst = float(excess.max().item())
        err = float(diff.masked_fill(both_nan, 0.0).nan_to_num(float("inf")).max().item())
        if worst > 0:
            ok = False
            n_bad = int((excess > 0).sum().item())
            notes.append(f"out{i} {SHORT.get(o.dtype, o.dtype)}: max err {err:.3g}, {n_bad} beyond tolerance")
        else:
            notes.append(f"out{i} max err {err:.3g}")
        del of, rf, diff, excess, both_nan
    if case.keep_output is not None:
        keep = outs[case.keep_output]
        n = keep.numel()
        frac = float(keep.float().mean().item())
        slack = 5.0 / math.sqrt(max(n, 1)) + 1e-3  # about 15 standard deviations of the mean
        if abs(frac - 0.9) > slack:
            ok = False
        notes.append(f"kept {frac:.4f} (expected 0.9)")
    return ok, "; ".join(notes)


# --- one case ------------------------------------------------------------------------------


def _list(xs) -> str:
    if not xs or all(x is None for x in xs):
        return "-"
    return "/".join("?" if x is None else str(x) for x in xs)


def error_text(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:300]


def _pct(gbps, copy):
    return 100.0 * gbps / copy if gbps and copy else None


def free_memory(device):
    import gc

    gc.collect()
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()


def _reset_compiled_state(dynamo: bool):
    if dynamo:
        try:
            torch.compiler.reset()
        except Exception:
            pass


def _compile_inductor(case: Case, tensors, sizes, device, row):
    """torch.compile (default mode) of the case's eager code, from a fresh dynamo
    state; the first call (compile + run) is recorded as ``inductor_compile_s``."""
    torch.compiler.reset()
    compiled = torch.compile(lambda *ts: case.eager(list(ts), sizes))
    t0 = time.perf_counter()
    compiled(*tensors)
    _sync(device)
    row["inductor_compile_s"] = round(time.perf_counter() - t0, 2)
    return compiled


def run_case(case: Case, opts: Options, copy_gbps: float | None, skip_compile_reason: str = "") -> dict:
    device = opts.device
    sizes = case.sizes(opts.scale)
    row = {"case": case.name, "group": case.group, "shape": case.describe(sizes), "sizes": _jsonable(sizes),
           "pyfuser_ms": None, "pyfuser_kernel_ms": None, "inductor_ms": None, "eager_ms": None,
           "bytes": None, "pyfuser_gbps": None, "inductor_gbps": None, "eager_gbps": None,
           "pyfuser_pct_of_copy": None, "inductor_pct_of_copy": None, "eager_pct_of_copy": None,
           "speedup_vs_inductor": None, "speedup_vs_eager": None,
           "kernels": None, "host_segments": None, "regs": [], "spills": [], "kernel_info": [],
           "check": "ERROR", "check_detail": "", "errors": {}, "inductor_compile_s": None,
           "pyfuser_first_execute_s": None}
    _reset_compiled_state(opts.timing and opts.compile)
    gen = torch.Generator(device=device).manual_seed(opts.seed)
    inputs = case.make_inputs(sizes, device, gen)
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]

    # -- pyfuser: build, first execute (compiles), check against eager --------------------
    fd = outs = None
    try:
        fd = case.define(sizes)
        t0 = time.perf_counter()
        outs = fd.execute(inputs)  # plans and compiles
        _sync(device)
        row["pyfuser_first_execute_s"] = round(time.perf_counter() - t0, 3)
        # a cached execute, as timed below: its launches give the kernel count, the
        # compiled kernels (registers, spills) and the kernels-only replay
        _, records, launches = execute_recorded(fd, inputs)
        row["kernels"] = launches
        row["host_segments"] = host_segments(fd)
        stats = kernel_stats(records) if records else fallback_kernel_stats(fd)
        row["kernel_info"] = stats
        row["regs"] = [s["regs"] for s in stats]
        row["spills"] = [s["spills"] for s in stats]
        row["bytes"] = moved_bytes(inputs, outs)
    except Exception as e:
        row["errors"]["pyfuser"] = error_text(e)
        row["check_detail"] = "pyfuser failed: " + error_text(e)
        log(f"        pyfuser FAILED: {error_text(e)}")
        traceback.print_exc(limit=-6)
        records = []
    if outs is not None:
        try:
            keep = outs[case.keep_output] if case.keep_output is not None else None
            refs = case.eager(tensors, sizes, keep=keep)
            ok, detail = compare(case, outs, refs)
            row["check"] = "ok" if ok else "FAIL"
            row["check_detail"] = detail
            del refs
        except Exception as e:
            row["errors"]["check"] = error_text(e)
            row["check_detail"] = "eager check failed: " + error_text(e)
    if row["bytes"] is None:  # pyfuser failed: count eager's outputs
        try:
            row["bytes"] = moved_bytes(inputs, case.eager(tensors, sizes))
        except Exception:
            pass
    regs, spills = _list(row["regs"]), _list(row["spills"])
    log(f"        pyfuser: first execute {row['pyfuser_first_execute_s']} s, kernels {row['kernels']}"
        f"{' + %d host' % row['host_segments'] if row['host_segments'] else ''}, regs {regs}, spills {spills}, "
        f"check {row['check']} ({row['check_detail'][:160]})")
    del outs

    if not opts.timing:
        return row

    if case.group == "host":
        _time_host_case(case, opts, row, fd, inputs, tensors, sizes, skip_compile_reason)
        return row

    # -- timing ------------------------------------------------------------------------------------
    nbytes = row["bytes"]
    if fd is not None and "pyfuser" not in row["errors"]:
        try:
            row["pyfuser_ms"] = median_ms(lambda: fd.execute(inputs), opts)
            if records:
                def replay():
                    for fn, grid, args, kw in records:
                        fn[grid](*args, **kw)

                row["pyfuser_kernel_ms"] = median_ms(replay, opts)
        except Exception as e:
            row["errors"]["pyfuser_timing"] = error_text(e)
    records = None
    free_memory(device)
    try:
        row["eager_ms"] = median_ms(lambda: case.eager(tensors, sizes), opts)
    except Exception as e:
        row["errors"]["eager"] = error_text(e)
    free_memory(device)
    if opts.compile and not skip_compile_reason:
        compiled = None
        try:
            compiled = _compile_inductor(case, tensors, sizes, device, row)
            row["inductor_ms"] = median_ms(lambda: compiled(*tensors), opts)
        except Exception as e:
            row["errors"]["inductor"] = error_text(e)
        del compiled
        try:
            torch.compiler.reset()
        except Exception:
            pass
        free_memory(device)
    elif skip_compile_reason:
        row["errors"]["inductor"] = f"skipped: {skip_compile_reason}"
    _fill_derived(row, nbytes, copy_gbps)
    log("        " + _timing_line(row))
    return row


def _fill_derived(row, nbytes, copy_gbps):
    for k in ("pyfuser_ms", "pyfuser_kernel_ms", "inductor_ms", "eager_ms"):
        if row.get(k) is not None:
            row[k] = float(f"{row[k]:.5g}")
    for impl in ("pyfuser", "inductor", "eager"):
        ms = row[f"{impl}_ms"]
        if ms and nbytes:
            row[f"{impl}_gbps"] = round(nbytes / ms / 1e6, 1)
            row[f"{impl}_pct_of_copy"] = _round(_pct(nbytes / ms / 1e6, copy_gbps), 1)
    if row["pyfuser_ms"] and row["inductor_ms"]:
        row["speedup_vs_inductor"] = round(row["inductor_ms"] / row["pyfuser_ms"], 3)
    if row["pyfuser_ms"] and row["eager_ms"]:
        row["speedup_vs_eager"] = round(row["eager_ms"] / row["pyfuser_ms"], 3)


def _round(x, n):
    return None if x is None else round(x, n)


def _timing_line(row) -> str:
    def ms(k):
        v = row[k]
        return "-" if v is None else f"{v:.4g} ms"

    def pct(k):
        v = row[k]
        return "" if v is None else f" ({v:.0f}% of copy)"

    s = (f"pyfuser {ms('pyfuser_ms')}{pct('pyfuser_pct_of_copy')} [kernels only {ms('pyfuser_kernel_ms')}] | "
         f"eager {ms('eager_ms')}{pct('eager_pct_of_copy')} | inductor {ms('inductor_ms')}{pct('inductor_pct_of_copy')}")
    if row["inductor_compile_s"] is not None:
        s += f" compile {row['inductor_compile_s']:.1f} s"
    if row["speedup_vs_inductor"]:
        s += f" | {row['speedup_vs_inductor']:.2f}x vs inductor"
    for k, v in row["errors"].items():
        s += f"\n        {k}: {v}"
    return s


def wall_per_call_us(fn, calls: int, device, warmup: int = 200) -> float:
    warmup = min(warmup, calls)
    for _ in range(warmup):
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / calls * 1e6


def _time_host_case(case, opts, row, fd, inputs, tensors, sizes, skip_compile_reason):
    """Host overhead: wall time per call of a cached execute on tiny tensors."""
    device = opts.device
    calls = opts.host_calls
    if fd is not None and "pyfuser" not in row["errors"]:
        try:
            us = wall_per_call_us(lambda: fd.execute(inputs), calls, device)
            row["pyfuser_ms"] = us / 1000
            row["host_us_per_call"] = round(us, 2)
        except Exception as e:
            row["errors"]["pyfuser_timing"] = error_text(e)
    try:
        row["eager_ms"] = wall_per_call_us(lambda: case.eager(tensors, sizes), calls, device) / 1000
    except Exception as e:
        row["errors"]["eager"] = error_text(e)
    if opts.compile and not skip_compile_reason:
        try:
            compiled = _compile_inductor(case, tensors, sizes, device, row)
            row["inductor_ms"] = wall_per_call_us(lambda: compiled(*tensors), calls, device) / 1000
            torch.compiler.reset()
        except Exception as e:
            row["errors"]["inductor"] = error_text(e)
    elif skip_compile_reason:
        row["errors"]["inductor"] = f"skipped: {skip_compile_reason}"
    _fill_derived(row, None, None)
    row["host_target_us"] = HOST_TARGET_US
    us = row.get("host_us_per_call")
    row["host_within_target"] = None if us is None else bool(us <= HOST_TARGET_US)
    row["timing_method"] = f"time.perf_counter over {calls} calls after 200 warmup calls (wall time per call)"
    fmt = lambda v: "-" if v is None else f"{v * 1000:.1f} us"  # noqa: E731
    log(f"        wall per call: pyfuser {fmt(row['pyfuser_ms'])} (target <= {HOST_TARGET_US:.0f} us) | "
        f"eager {fmt(row['eager_ms'])} | inductor {fmt(row['inductor_ms'])}"
        + "".join(f"\n        {k}: {v}" for k, v in row["errors"].items()))


def _jsonable(x):
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    return str(x)


def run_cases(cases, opts: Options, copy_gbps=None, on_row=None, run=None, t_start=None) -> list[dict]:
    """Every case's row, through ``run`` (default ``run_case``; the training-ops group
    passes its own), the time budget counted from ``t_start`` (default now)."""
    run = run or run_case
    rows = []
    t_start = time.perf_counter() if t_start is None else t_start
    for i, case in enumerate(cases):
        elapsed = time.perf_counter() - t_start
        skip = ""
        if opts.timing and opts.compile and opts.budget_s and elapsed > opts.budget_s:
            skip = f"time budget ({opts.budget_s:.0f} s) spent"
        log(f"[{i + 1:2d}/{len(cases)}] {case.name}  {case.describe(case.sizes(opts.scale))}  "
            f"(t={elapsed:.0f} s)")
        t0 = time.perf_counter()
        try:
            row = run(case, opts, copy_gbps, skip)
        except Exception as e:  # a harness bug or an out-of-memory: record it and go on
            traceback.print_exc()
            row = {"case": case.name, "group": case.group, "shape": "", "check": "ERROR",
                   "check_detail": error_text(e), "errors": {"harness": error_text(e)}}
        row["case_s"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        free_memory(opts.device)
        if on_row is not None:
            on_row(rows)
    return rows
