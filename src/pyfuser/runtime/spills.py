"""Reject kernels that spill registers, on the GPU, before they ever run.

The heuristics choose a configuration from a register budget, which is an estimate.
The compiler has the last word: after building a kernel for a CUDA segment, we
compile it ahead of the first launch (``JITFunction.warmup`` with the real
arguments, so the compiled kernel is the one the launch will use), read its spill
count, and when it spills move on to the scheduler's next candidate
(``fallbacks(seg, params)``, e.g. a persistent row becomes a multi-pass one).  The
decision is cached per segment and parameters, so the check runs once.
"""
from __future__ import annotations

import torch


def compiled_spills(src, fn, args, grid, kw) -> int | None:
    """Spill count of the kernel the launch would run, or None if it cannot be read."""
    try:
        k = fn.warmup(*args, grid=grid, **kw)
        init = getattr(k, "_init_handles", None)
        if init is not None:
            init()
        return int(getattr(k, "n_spills", 0) or 0)
    except Exception:  # the launch itself will report a real problem
        return None


def choose_params(rt, seg, sched, params, b, inputs, arg_builder):
    """The first of ``params`` and the scheduler's fallbacks whose kernel does not spill
    (or the last candidate, if all do).  Returns (params, src, fn)."""
    key = (sched.NAME, tuple(o.index for o in seg.outputs), rt._current_sig, params)
    chosen = rt.spill_choice.get(key)
    if chosen is not None:
        src, fn = rt.build(seg, sched, chosen)
        return chosen, src, fn
    fallbacks = getattr(sched, "fallbacks", lambda s, p: [])
    candidates = [params] + list(fallbacks(seg, params))
    for i, p in enumerate(candidates):
        src, fn = rt.build(seg, sched, p)
        if i == len(candidates) - 1:
            break
        args, grid, kw = arg_builder(src, p)
        spills = compiled_spills(src, fn, args, grid, kw)
        if not spills:
            break
        rt.events.append(f"{src.name} ({sched.NAME}): {p!r} spills {spills} registers; trying the next configuration")
    rt.spill_choice[key] = p
    return p, src, fn


def scratch_outputs(src, b):
    return {o: torch.empty(b.shapes[o], dtype=o.dtype.torch, device=b.device) for o in src.outputs}
