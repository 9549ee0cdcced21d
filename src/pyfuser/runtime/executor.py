"""execute(): bind, find or build the program, run it.

The steps, each one call: **bind** the inputs (``ir.concretize.bind``), take their
**signature** (``plan.ExecutorCache.signature``: what decides a plan beyond sizes), find
or make the **plan** for it (``ExecutorCache.make_plan``; its kernels are built on the
way), **prepare** the plan's ``program.Program`` for the inputs' fingerprint (sizes,
strides, dtypes: ``prepare.prepare`` runs the heuristics and builds the kernels), and
**run** it (``Program.run``).  A cached execute is the fingerprint and ``run``; the
torch.compile backend's regions take the same program (``program_for``) and call the
same ``run``.  Sizes are not in the signature: they are kernel arguments, and each new
set of input sizes re-runs the (cheap, pure) heuristics, so a new size compiles a new
kernel only when the heuristics choose different parameters.  Dumps, the profiler,
poisoned outputs and recorded launches are hooks of ``run`` (``probe.Probe``), built
only when one is on.

Threads: any number of threads may execute one fusion, or each their own.  A cached
execute reads ``rt.programs`` and runs a ``Program``, whose per-execute state is
local to the call, so it takes no lock beyond the counters' (once per execute);
whatever plans, builds or prepares holds the fusion's ``ExecutorCache.lock``.  The
interpreter runs one launch at a time (``interpreter.INTERPRETER_LOCK``), and a
first execute on the GPU takes that lock too once the process has used the
interpreter: Triton's interpreter rebinds ``triton.language`` while it runs, which a
kernel compiling at that moment would see.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

import torch

from ..errors import CompileError, InputError
from ..ir.concretize import bind, cpu_scalars_on_device
from ..schedulers.base import current_choices
from ..schedulers.device_model import model_override
from ..settings import OVERRIDES, read
from . import dump, profiler, story
from .phases import phase, timed
from .plan import ExecutorCache, Explanation, KernelKey, explain_plan
from .prepare import prepare
from .probe import Probe
from .program import Program
from .toolchain import triton_ptxas

POISON_OUTPUTS = read("poison_outputs")
# When a list, every launch appends (kernel, grid, args, kwargs): benchmarks replay
# them to time the kernels without the host-side work of execute().
RECORD_LAUNCHES: list | None = None


def fingerprint(inputs, device, shape_scalars=()):
    """Everything about the inputs that decides the kernels and their constant arguments:
    ``shape_scalars`` are the positions of scalar inputs that shapes depend on
    (``FusionIR.shape_scalar_inputs``), whose values decide sizes.  The device model
    is the inputs' devices' (cached per device index, ``schedulers.device_model``)
    unless a ``device_model`` block overrides it: only the override is read here."""
    parts = [device, current_choices().key, model_override()]
    for x in inputs:
        if isinstance(x, torch.Tensor):
            parts.append((x.dtype, x.shape, x.stride(), x.device, not x.data_ptr() & 15))
        else:
            parts.append(type(x))
    for i in shape_scalars:
        if i < len(inputs):
            x = inputs[i]
            parts.append(x.item() if isinstance(x, torch.Tensor) else x)
    return tuple(parts)


def execute(fd, inputs, device=None, profile=False):
    """Run the fusion.  ``profile=True`` (or ``PYFUSER_PROF=print``) records a
    ``FusionProfile`` in ``fd.last_profile``; ``PYFUSER_DUMP`` names what to print.
    Outputs aliased to an input (``add_output(out, alias)``) are computed like any
    other, then written into their inputs (``program.finish_outputs``)."""
    ir = fd.ir
    if not ir.outputs:
        return []
    rt: ExecutorCache = fd._runtime or _new_runtime(fd)  # runtime_of inline: one call fewer per cached execute
    active = dump.enabled_dumps()
    profile = profile or profiler.printing() or profiler.capturing()
    try:
        if isinstance(inputs, (list, tuple)):
            inputs = cpu_scalars_on_device(ir, inputs)
            prog = rt.programs.get(fingerprint(inputs, device, ir.shape_scalar_inputs()))
            if prog is not None:
                prog.used = True  # spares it at the next eviction (``ExecutorCache.remember``)
                if not (active or profile or POISON_OUTPUTS or RECORD_LAUNCHES is not None):
                    return prog.run(inputs)
                with rt.lock:
                    probe = _hooks(fd, rt, active, profile, prog.device)
                    outs = prog.run(inputs, probe)
                    probe.finish(inputs, outs)
                return outs
        with rt.lock, triton_ptxas():  # what compiles here compiles with Triton's ptxas (``toolchain``)
            return _execute_slow(fd, rt, inputs, device, active, profile)
    except CompileError as err:
        from .repro import with_repro

        raise with_repro(fd, inputs, device, err) from (err.__cause__ or err)


def _hooks(fd, rt, active, profile, device, first=False, told=()) -> Probe:
    return Probe(fd, rt, active, profile, device, poison=POISON_OUTPUTS, record=RECORD_LAUNCHES, first=first,
                 story=told)


_RUNTIME_LOCK = threading.Lock()


def runtime_of(fd) -> ExecutorCache:
    """``fd``'s runtime cache (plans, kernels, programs), made on first use."""
    return fd._runtime or _new_runtime(fd)


def _new_runtime(fd) -> ExecutorCache:
    with _RUNTIME_LOCK:
        if fd._runtime is None:
            fd._runtime = ExecutorCache(fd)
        return fd._runtime


def explain(fd, inputs, device=None) -> Explanation:
    """``fd.explain(inputs)``: plan the fusion for ``inputs`` as ``execute`` would (the
    plan's kernels are built, nothing is launched) and say, per segment, which
    scheduler took it and why the others declined."""
    rt = runtime_of(fd)
    with rt.lock:
        b = bind(fd.ir, inputs, device)
        b.input_pos = {v: i for i, v in enumerate(fd.ir.inputs)}
        sig = rt.signature(b, fd.ir.live_exprs())
        plan = rt.plans.get(sig) or rt.make_plan(b, sig)
        params = []
        for step in plan.steps:
            seg = rt.step_segment(b, step)
            if seg is None or step.scheduler is None:
                params.append(None)
                continue
            heur = step.scheduler.heuristics(seg)
            params.append(rt.spill_choice.get(KernelKey.of(step.scheduler, seg, sig, heur), heur))
        return explain_plan(rt, plan, b, params)


def kernel_sources(fd) -> list:
    """(name, scheduler NAME, Triton source) of every kernel ``fd`` has built so far, in
    the order they were built (the ``PYFUSER_DUMP=kernel_code`` text, kept)."""
    rt = fd._runtime
    if rt is None:
        return []
    with rt.lock:
        built = sorted(((rt.kernel_info[src.name], src) for src, _ in rt.kernels.values()
                        if src.name in rt.kernel_info), key=lambda p: p[0].number)
    return [(info.name, info.scheduler, src.source) for info, src in built]


@timed("planning")
def _execute_slow(fd, rt, inputs, device, active, profile):
    ir = fd.ir
    b = bind(ir, inputs, device)
    if b.device.type not in ("cpu", "cuda"):
        raise InputError(f"execute: inputs on device {b.device} cannot run (pyfuser runs CUDA tensors as kernels, "
                         f"CPU tensors under Triton's interpreter); got {_on_device(ir, inputs, b.device)}")
    with _interpreter_guard(b.device), story.telling() as told:
        return _execute_bound(fd, rt, b, inputs, device, active, profile, told)


def _interpreter_guard(device):
    """The interpreter's lock for a first execute on the GPU once interpreted kernels
    have run in this process (see the module's docstring), else no lock.  The
    interpreter module (and numpy with it) is imported by CPU launches only."""
    interpreter = sys.modules.get(__package__ + ".interpreter")
    if device.type == "cuda" and interpreter is not None and interpreter.used():
        return interpreter.INTERPRETER_LOCK
    return contextlib.nullcontext()


def _execute_bound(fd, rt, b, inputs, device, active, profile, told):
    ir = fd.ir
    b.input_pos = {v: i for i, v in enumerate(ir.inputs)}
    sig = rt.signature(b, ir.live_exprs())
    plan = rt.plans.get(sig)
    if plan is None:
        story.note(rt.explain_signature(sig))
        plan = rt.make_plan(b, sig)
        rt.plans[sig] = plan
        if "segmented_fusion" in active:
            dump.emit(dump.segmented_fusion(fd.id, plan, ir, b.shapes))
    else:
        story.note("new input sizes, strides or parameter overrides (signature known: plan reused, heuristics "
                         "re-run)")
    inputs = list(inputs)
    prog, chosen = prepare(fd, rt, plan, b, inputs)
    if "scheduler_params" in active:
        dump.emit(dump.scheduler_params(fd.id, explain_plan(rt, plan, b, chosen)))
    rt.remember(fingerprint(inputs, device, ir.shape_scalar_inputs()), prog)
    # the first run's launches compile on CUDA: the probe times that for profiles
    probe = _hooks(fd, rt, active, profile, b.device, first=True, told=told)
    with phase("first_launch"):
        outs = prog.run(inputs, probe)
    probe.finish(inputs, outs)
    return outs


def _on_device(ir, inputs, device) -> str:
    found = [f"input {i} ({v.name})" for i, (v, x) in enumerate(zip(ir.inputs, inputs))
             if isinstance(x, torch.Tensor) and x.device == device]
    return ", ".join(found) if found else f"device={device}"


# -- a caller-checked cached execute (the torch.compile backend's regions) -------------------
def fast_path_allowed() -> bool:
    """Whether a caller holding a ``Program`` (``program_for``) may run it without
    hooks in place of ``execute``: no dump, no profile (nor an open
    ``PythonProfiler``), no poisoned outputs, no recorded launches, no scheduler
    override and no ``device_model`` block (overrides are part of the fingerprint) are on.

    The torch.compile backend asks at every region call, between ATen ops whose work
    evicts the host's caches: there, the general check (``dump.enabled_dumps`` and
    ``profiler.printing``, four functions and as many modules' dicts) cost many times
    what it costs in a loop (docs/TUNING.md#region-call-host).  This one reads the two
    variables' raw values straight from the environment's dict: set to anything but
    "" (and ``profiler.OFF`` for PYFUSER_PROF), the call takes ``execute``, which
    validates them."""
    if current_choices() or model_override() is not None or profiler._CAPTURING or POISON_OUTPUTS or RECORD_LAUNCHES is not None:
        return False
    if OVERRIDES or _ENV_DATA is None:
        return not dump.enabled_dumps() and not profiler.printing()
    prof = _ENV_DATA.get(_PROF_KEY)
    return not _ENV_DATA.get(_DUMP_KEY) and (prof is None or prof in _PROF_OFF)


_ENV_DATA = dump._ENV_DATA
_DUMP_KEY, _PROF_KEY = (os.environ.encodekey(name) for name in ("PYFUSER_DUMP", "PYFUSER_PROF"))
_PROF_OFF = tuple(os.environ.encodevalue(v) for v in profiler.OFF)


def program_for(fd, inputs, device=None) -> Program | None:
    """The ``Program`` a cached ``execute(fd, inputs, device)`` would run, or None.  A
    caller that keeps it (the torch.compile backend's regions) runs it with
    ``program.run(inputs)`` for inputs of the same dtypes, shapes, strides, devices
    and 16-byte alignment, while ``fast_path_allowed()``."""
    rt = fd._runtime
    if rt is None:
        return None
    return rt.programs.get(fingerprint(inputs, device, fd.ir.shape_scalar_inputs()))
