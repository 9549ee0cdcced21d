"""Reject kernels that spill registers, on the GPU, before they ever run.

The heuristics choose a configuration from a register budget, which is an estimate.
The compiler has the last word: after building a kernel for a CUDA segment, we
compile it ahead of the first launch (``JITFunction.warmup`` with the real
arguments, so the compiled kernel is the one the launch will use), read its spill
count (ptxas's; the driver's counts all local memory), and when it spills move on
to the scheduler's next candidate (``fallbacks(seg, params)``, e.g. a persistent
row becomes a multi-pass one; each passes the scheduler's run-time check before it is
built).  A scheduler also sets a register budget (``max_registers``, None for none):
the pointwise one moves a kernel that needs many registers to fewer elements per
thread.  Each rejected configuration is recorded as a ``Reject`` (code ``spills`` or
``register_budget``) that ``fd.explain`` lists.  The decision is cached per segment and parameters, so
the check runs once.

The same walk runs without a GPU (``first_fit`` with ``offline_usage``): Triton
ships ``ptxas``, so a kernel can be compiled for sm_90 on any machine and its
registers read from ptxas's report.  ``benchmarks/regcheck.py`` does that for every
benchmark case.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import torch

from ..compat import compile_offline, load_handles, ptxas_command
from ..schedulers.base import Reject, current_choices
from .phases import phase, timed
from . import decisions, story
from .plan import KernelKey


def compiled_usage(src, fn, args, grid, kw, scheduler: str = "") -> tuple:
    """(registers, spills) of the kernel the launch would run; None where they cannot
    be read (``scheduler``: the NAME of the one that built it, for the phase report).  The driver's spill count is local memory, which also holds arrays the
    code declares (``ptxas_usage``); when it is not 0, ptxas says how much is spills."""
    try:
        with phase("triton_compile", src.name, scheduler):
            k = fn.warmup(*args, grid=grid, **kw)
        with phase("kernel_load"):
            load_handles(k)
        local = int(getattr(k, "n_spills", 0) or 0)
        regs = getattr(k, "n_regs", None)
    except Exception:  # the launch itself will report a real problem
        return None, None
    if not local:
        return regs, 0
    try:
        return regs, ptxas_usage(k).spills
    except Exception:
        return regs, local


def rejection(sched, seg, params, regs, spills) -> Reject | None:
    """Why a compiled candidate is rejected, or None: it spills, or it uses more
    registers than the scheduler's ``max_registers(seg, params)`` allows (None: no
    limit but the hardware's)."""
    why = refusal(regs, spills, sched.max_registers(seg, params))
    return None if why is None else Reject(*why, sched.NAME)


def refusal(regs, spills, budget) -> tuple | None:
    """``rejection``'s rule on its numbers alone, as (code, message), or None: what a
    compile worker (``ahead.compile_step``) applies, with the budget computed for it."""
    if spills:
        return "spills", f"spills {spills} registers"
    if budget is not None and regs is not None and regs > budget:
        return "register_budget", f"uses {regs} registers, over its budget of {budget}"
    return None


def candidates(sched, seg, params) -> list:
    """``params`` and then the scheduler's fallbacks that pass its run-time check: the
    order the spill check tries."""
    return [params] + [p for p in sched.fallbacks(seg, params) if sched.can_schedule_runtime(seg, p) is None]


def first_fit(cands, reject, on_reject=None):
    """The first of ``cands`` that ``reject(params)`` accepts (a spill count or a reason
    when rejected; 0, None or "" accept, None also standing for unknown), or the last
    one, which is not checked.  ``on_reject(params, why)`` hears about each rejected
    candidate."""
    for p in cands[:-1]:
        why = reject(p)
        if not why:
            return p
        if on_reject is not None:
            on_reject(p, why)
    return cands[-1]


@timed("spill_check")
def choose_params(rt, seg, sched, params, sig, b, inputs, arg_builder):
    """The first of ``params`` and the scheduler's fallbacks whose kernel does not spill
    and keeps to the scheduler's register budget (or the last candidate, if none
    does), for segment ``seg`` of a plan of signature ``sig``.  Returns (params, src,
    fn)."""
    if not current_choices().spill_check:
        src, fn = rt.build(seg, sched, params, sig)
        return params, src, fn
    key = KernelKey.of(sched, seg, sig, params)
    chosen = rt.spill_choice.get(key)
    if chosen is not None:
        src, fn = rt.build(seg, sched, chosen, sig)
        return chosen, src, fn
    built = {}

    def reject(p):
        src, fn = built[p] = rt.build(seg, sched, p, sig)
        args, grid, kw = arg_builder(src, p)
        return rejection(sched, seg, p, *compiled_usage(src, fn, args, grid, kw, sched.NAME))

    rejected = []

    def on_reject(p, why):
        rejected.append((p, why))
        story.note(f"{built[p][0].name} ({sched.NAME}): {p!r} {why.message}; trying the next configuration")

    chosen = first_fit(candidates(sched, seg, params), reject, on_reject)
    rt.spill_choice[key] = chosen
    rt.spill_rejections[key] = rejected
    src, fn = built[chosen] if chosen in built else rt.build(seg, sched, chosen, sig)
    return chosen, src, fn


def scratch_outputs(src, b):
    return {o: torch.empty(b.shapes[o], dtype=o.dtype.torch, device=b.device) for o in src.outputs}


# -- what ptxas reports ---------------------------------------------------------------------
H200 = 90  # compute capability of the benchmark GPU (sm_90)


@dataclass(frozen=True)
class Usage:
    regs: int  # registers per thread
    spills: int  # register spills: ptxas's spill-store bytes / 4
    local: int  # local memory per thread / 4: what the driver (CompiledKernel.n_spills) calls spills


def ptxas_usage(kernel) -> Usage:
    """Registers, spills and local memory of a compiled kernel, from ``ptxas -v`` run
    again on its PTX with the flags Triton's ``make_cubin`` used.

    The driver's ``n_spills`` is the kernel's local memory / 4, and local memory is
    not only spills: the accurate sin and cos keep a 28-byte table for the slow path of
    their argument reduction (huge arguments), so every kernel calling them reports
    8 "spills" (RoPE on the H200: 128 registers, 8 spills; ptxas: 0 bytes of spill
    stores, a 32-byte stack frame).

    A report is kept for later processes (``decisions``), keyed by the PTX, the
    command and the ptxas binary: a compile worker asks for every candidate it
    checks, and the training process then finds the answer instead of a subprocess."""
    text = kernel.asm["ptx"]
    command = ptxas_command(kernel, "k.ptx", "k.cubin")  # run in a fresh directory: the key's command as is
    key = {"ptx": hashlib.sha256(text.encode()).hexdigest(), "command": command, "ptxas": _identity(command[0])}
    kept = decisions.lookup("ptxas_usage", key)
    if kept is not None:
        return Usage(*kept)
    with phase("ptxas_report"), tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "k.ptx"), "w") as f:
            f.write(text)
        log = subprocess.run(command, cwd=d, capture_output=True, text=True, check=True).stderr
    usage = parse_ptxas_log(log)
    decisions.keep("ptxas_usage", key, [usage.regs, usage.spills, usage.local])
    return usage


def _identity(path: str) -> list:
    """A binary as its path, size and modification time (another ptxas, another answer)."""
    st = os.stat(path)
    return [path, st.st_size, st.st_mtime_ns]


def parse_ptxas_log(log: str) -> Usage:
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log)
    regs = re.search(r"Used (\d+) registers", log)
    if frame is None or regs is None:
        raise RuntimeError(f"ptxas -v: no register report in {log!r}")
    return Usage(int(regs.group(1)), int(frame.group(2)) // 4, int(frame.group(1)) // 4)


def offline_usage(fn, args, kw, arch: int = H200) -> Usage:
    """``ptxas_usage`` of the JIT function ``fn`` compiled for sm_<arch>, on a machine
    without a GPU (``compiled_offline``)."""
    return ptxas_usage(compiled_offline(fn, args, kw, arch))


def compiled_offline(fn, args, kw, arch: int = H200):
    """The JIT function ``fn`` compiled for sm_<arch> on a machine without a GPU (its
    ``asm`` holds the PTX).  ``args`` are specialised by Triton's launch binder, as a
    launch on that GPU would: tensors by dtype and 16-byte alignment of ``data_ptr()``
    (meta tensors: address 0, aligned), ints by width, divisibility by 16 and equality
    to 1.  ``kw``: constexprs and ``num_warps``."""
    return compile_offline(fn, args, kw, arch)
