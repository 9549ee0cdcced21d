"""Run the "training_ops" cases (``training_ops.py``): forward + backward of eager,
torch.compile (Inductor), torch.compile(backend="pyfuser") and Liger Kernel.

Per case: the inputs once, the fp32 reference (the closure on fp32 copies of the bf16
inputs, backward with the same output gradients); then per implementation, one after
the other (each on its own copies of the inputs, since Liger writes gradients into its
inputs' storage): build (compile: the first forward + backward, timed as
``<impl>_compile_s``), check outputs and gradients against the reference, time
``forward + torch.autograd.grad`` with ``harness.median_ms``.  The timed repetitions
of an implementation that writes into its inputs run on what the previous one left,
which does not change what a memory-bound kernel costs.
"""
from __future__ import annotations

import time
import traceback

import torch

from . import training_ops as ops
from .harness import Options, error_text, free_memory, log, median_ms

IMPLS = ("eager", "inductor", "pyfuser", "liger")
# |out - ref| <= RTOL * |ref| + ATOL * max|ref|, elementwise, for bf16 results against
# the fp32 reference: a few bf16 roundings (2^-8 each) of the value, plus an absolute
# part at the scale of the tensor's largest terms for the sums that cancel (a norm's
# dx, softmax's backward): their error follows the terms, not the small result.
RTOL, ATOL = 2e-2, 1.5e-2


def _sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def copies(tensors):
    """Fresh leaves with the same values, layout and requires_grad."""
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def fp32_copies(tensors):
    return [t.detach().float().requires_grad_(t.requires_grad) if t.is_floating_point() else t for t in tensors]


def output_grads(outs, gen):
    """The backward's seed per output: 1.0 for a scalar loss, random bf16 values otherwise
    (the fp32 reference gets the same values)."""
    return [torch.ones_like(o) if o.dim() == 0 else
            (torch.randn(o.shape, device=o.device, generator=gen) * 0.5).to(ops.BF16) for o in outs]


def fwd_bwd(fn, tensors, grads):
    """(outputs, gradients of the inputs that require grad)."""
    outs = fn(*tensors)
    leaves = [t for t in tensors if t.requires_grad]
    seeds = [g.to(o.dtype) for o, g in zip(outs, grads)]
    return tuple(outs), torch.autograd.grad(outs, leaves, seeds)


def compare(results, refs) -> tuple[bool, str]:
    """Outputs then gradients against the fp32 reference: shapes exactly, values within
    RTOL/ATOL; the text gives each result's worst error as a fraction of its bound."""
    names = [f"out{i}" for i in range(len(refs[0]))] + [f"grad{i}" for i in range(len(refs[1]))]
    got, want = list(results[0]) + list(results[1]), list(refs[0]) + list(refs[1])
    if len(got) != len(want):
        return False, f"{len(got)} results, the reference has {len(want)}"
    ok, notes = True, []
    for name, o, r in zip(names, got, want):
        if o.shape != r.shape:
            ok = False
            notes.append(f"{name}: shape {tuple(o.shape)} vs {tuple(r.shape)}")
            continue
        of, rf = o.detach().float(), r.detach().float()
        scale = float(rf.abs().max().item()) if rf.numel() else 0.0
        bound = RTOL * rf.abs() + ATOL * scale
        ratio = float(((of - rf).abs() / bound.clamp_min(1e-30)).nan_to_num(float("inf")).max().item()) if of.numel() else 0.0
        if ratio > 1.0:
            ok = False
            notes.append(f"{name} {str(o.dtype).replace('torch.', '')}: error {ratio:.3g}x the tolerance")
        else:
            notes.append(f"{name} {ratio:.2f}")
        del of, rf, bound
    return ok, ", ".join(notes)


def _implementation(impl, case, opts):
    """The function to run for ``impl``, or (None, why not)."""
    if impl == "eager":
        return case.eager, ""
    if impl == "inductor":
        return torch.compile(case.eager), ""
    if impl == "pyfuser":
        import pyfuser.dynamo  # noqa: F401  registers the backend

        return torch.compile(case.eager, backend="pyfuser"), ""
    if case.liger is None:
        return None, f"n/a ({case.note or 'no Liger op'})"
    if not str(opts.device).startswith("cuda"):
        return None, "n/a (needs CUDA)"
    if isinstance(ops.liger_ops(), str):
        return None, f"n/a ({ops.liger_ops()})"
    return case.liger, ""


def _run_impl(impl, case, opts, base, grads, refs, row):
    """Build, check and (with ``opts.timing``) time one implementation; fills the row."""
    fn, why = _implementation(impl, case, opts)
    if fn is None:
        row["checks"][impl] = why
        return
    if impl in ("inductor", "pyfuser"):
        torch.compiler.reset()
    stats0 = _pyfuser_stats() if impl == "pyfuser" else None
    tensors = copies(base)
    try:
        t0 = time.perf_counter()
        results = fwd_bwd(fn, tensors, grads)
        _sync(opts.device)
        if impl != "eager":
            row[f"{impl}_compile_s"] = round(time.perf_counter() - t0, 2)
        ok, detail = compare(results, refs)
        row["checks"][impl] = ("ok " if ok else "FAIL ") + detail
        del results
        tensors = copies(base)  # Liger wrote into the checked copies
        if opts.timing:
            row[f"{impl}_ms"] = median_ms(lambda: fwd_bwd(fn, tensors, grads), opts)
        if stats0 is not None:
            after = _pyfuser_stats()
            row["pyfuser_regions"] = after.get("regions", 0) - stats0.get("regions", 0)
            row["pyfuser_fallbacks"] = after.get("fallbacks", 0) - stats0.get("fallbacks", 0)
    except Exception as e:
        row["errors"][impl] = error_text(e)
        row["checks"][impl] = "ERROR " + error_text(e)
        log(f"        {impl} FAILED: {error_text(e)}")
        traceback.print_exc(limit=-6)
    finally:
        del tensors, fn
        if impl in ("inductor", "pyfuser"):
            torch.compiler.reset()
        free_memory(opts.device)


def _pyfuser_stats():
    import pyfuser.dynamo as pd

    return pd.stats()


def _row(case, sizes):
    row = {"case": case.name, "group": case.group, "shape": case.describe(sizes), "sizes": list(sizes),
           "bytes": case.bytes(sizes), "checks": {}, "errors": {}, "check": "ERROR", "check_detail": "",
           "kernels": None, "regs": [], "spills": [], "note": case.note}
    for impl in IMPLS:
        row.update({f"{impl}_ms": None, f"{impl}_gbps": None, f"{impl}_pct_of_copy": None})
    for impl in IMPLS[1:]:
        row[f"{impl}_compile_s"] = None
    row.update(speedup_vs_inductor=None, speedup_vs_liger=None, speedup_vs_eager=None)
    return row


def run_case(case, opts: Options, copy_gbps, skip_compile_reason=""):
    sizes = case.sizes(opts.scale)
    row = _row(case, sizes)
    gen = torch.Generator(device=opts.device).manual_seed(opts.seed)
    base = case.make_inputs(sizes, opts.device, gen)
    ins32 = fp32_copies(base)
    outs32 = case.eager(*ins32)
    grads = output_grads(outs32, gen)
    refs = (tuple(o.detach() for o in outs32),
            torch.autograd.grad(outs32, [t for t in ins32 if t.requires_grad], [g.to(o.dtype) for o, g in zip(outs32, grads)]))
    del ins32, outs32
    for impl in IMPLS:
        if impl == "inductor" and (not opts.compile or skip_compile_reason):
            row["checks"][impl] = f"skipped ({skip_compile_reason or 'no torch.compile'})"
            continue
        _run_impl(impl, case, opts, base, grads, refs, row)
    del base, refs, grads
    failed = [i for i, c in row["checks"].items() if c.startswith("FAIL")]
    row["check"] = "ERROR" if "pyfuser" in row["errors"] or "eager" in row["errors"] else (
        "FAIL" if failed else "ok")
    row["check_detail"] = "; ".join(f"{i}: {c}" for i, c in row["checks"].items())
    log(f"        check {row['check']}: {row['check_detail'][:400]}")
    if opts.timing:
        fill_derived(row, copy_gbps)
        log("        " + " | ".join(f"{i} {row[f'{i}_ms']} ms" for i in IMPLS if row[f"{i}_ms"] is not None))
    return row


def fill_derived(row, copy_gbps):
    nbytes = row["bytes"]
    for impl in IMPLS:
        ms = row[f"{impl}_ms"]
        if ms:
            row[f"{impl}_ms"] = float(f"{ms:.5g}")
            row[f"{impl}_gbps"] = round(nbytes / ms / 1e6, 1)
            row[f"{impl}_pct_of_copy"] = round(100.0 * nbytes / ms / 1e6 / copy_gbps, 1) if copy_gbps else None
    p = row["pyfuser_ms"]
    for impl in ("inductor", "liger", "eager"):
        if p and row[f"{impl}_ms"]:
            row[f"speedup_vs_{impl}"] = round(row[f"{impl}_ms"] / p, 3)
