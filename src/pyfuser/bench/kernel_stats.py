"""What the kernels of one ``fd.execute`` were: its launches recorded, and for each
compiled kernel its registers, spills (ptxas's count where the driver reports local
memory), shared memory and warps.

The compiled kernels are reached through ``pyfuser.compat`` (Triton's JIT caches and
compiled-kernel handles are private).  On CPU tensors (the interpreter) no compiled
kernel exists and the counts stay None.
"""
from __future__ import annotations

import torch

from ..compat import compile_for, compiled_kernels, load_handles
from ..runtime import executor
from ..runtime.cache import COUNTERS


def execute_recorded(fd, inputs):
    """One ``fd.execute`` recording its launches: (outputs, [(fn, grid, args, kwargs)], launches)."""
    rec: list = []
    had = hasattr(executor, "RECORD_LAUNCHES")
    old = getattr(executor, "RECORD_LAUNCHES", None)
    executor.RECORD_LAUNCHES = rec
    before = COUNTERS["launches"]
    try:
        outs = fd.execute(inputs)
    finally:
        if had:
            executor.RECORD_LAUNCHES = old
        else:
            del executor.RECORD_LAUNCHES
    launches = COUNTERS["launches"] - before
    return outs, (rec if had else []), launches


def host_segments(fd) -> int:
    """Segments of the plan that run as torch ops on the host (not a generated kernel)."""
    plans = getattr(getattr(fd, "_runtime", None), "plans", None) or {}
    if not plans:
        return 0
    plan = list(plans.values())[-1]
    return sum(1 for s in getattr(plan, "steps", []) if getattr(s, "scheduler", "x") is None)


def _compiled_kernel(fn, grid, args, kw):
    """The triton CompiledKernel that ``fn[grid](*args, **kw)`` launched.

    ``compat.compile_for`` looks the kernel up in its cache for these arguments
    (compiling only on a miss) and returns it without launching.  Failing that, take
    the newest of ``compat.compiled_kernels`` on the current device.
    """
    k = None
    try:
        k = compile_for(fn, grid, args, kw)
    except Exception:
        k = None
    if k is None:
        try:
            entries = compiled_kernels(fn, torch.cuda.current_device())
            k = entries[-1] if entries else None
        except Exception:
            k = None
    if k is not None and hasattr(k, "result") and not hasattr(k, "n_regs"):
        k = k.result()
    if k is not None and getattr(k, "n_regs", None) is None:
        try:
            load_handles(k)
        except Exception:
            pass
    return k


def kernel_stats(records) -> list[dict]:
    out = []
    for fn, grid, args, kw in records:
        inner = getattr(fn, "fn", None)
        info = {"name": getattr(inner, "__name__", None) or getattr(fn, "__name__", "?"),
                "grid": [int(g) for g in grid] if isinstance(grid, (tuple, list)) else str(grid),
                "num_warps": kw.get("num_warps"), "regs": None, "spills": None, "local": None, "shared": None}
        if hasattr(fn, "device_caches"):  # a compiled (CUDA) JITFunction, not the interpreter
            k = _compiled_kernel(fn, grid, args, kw)
            if k is not None:
                info["regs"] = getattr(k, "n_regs", None)
                info["spills"] = info["local"] = getattr(k, "n_spills", None)
                if info["local"]:  # local memory is not only spills (spills.ptxas_usage): ask ptxas
                    try:
                        info["spills"] = ptxas_usage(k).spills
                    except Exception:
                        pass
                md = getattr(k, "metadata", None)
                info["shared"] = getattr(md, "shared", None)
                info["num_warps"] = getattr(md, "num_warps", info["num_warps"])
        out.append(info)
    return out


def ptxas_usage(k):
    from ..runtime.spills import ptxas_usage as usage

    return usage(k)


def fallback_kernel_stats(fd) -> list[dict]:
    """Without RECORD_LAUNCHES: every kernel this definition built (fd._runtime.kernels)."""
    out = []
    prefix = f"pyfuser_f{fd.id}_"
    table = getattr(getattr(fd, "_runtime", None), "kernels", None) or {}
    for src, fn in list(table.values()):
        if not getattr(src, "name", "").startswith(prefix):
            continue
        info = {"name": src.name, "regs": None, "spills": None}
        try:
            entries = compiled_kernels(fn, torch.cuda.current_device())
            regs = [getattr(k, "n_regs", None) for k in entries]
            spills = [getattr(k, "n_spills", None) for k in entries]
            info["regs"] = max((r for r in regs if r is not None), default=None)
            info["spills"] = max((s for s in spills if s is not None), default=None)
        except Exception:
            pass
        out.append(info)
    return out
