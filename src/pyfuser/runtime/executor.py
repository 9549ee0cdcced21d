"""execute(): bind inputs, pick or build the kernels, allocate outputs, launch.

Planning (signature -> ``Plan``, kernels) lives in ``plan.ExecutorCache``.  Sizes
are not in the signature: they are kernel arguments, and each new set of input
sizes re-runs the (cheap, pure) heuristics, so a new size compiles a new kernel
only when the heuristics choose different parameters.  A ``prepared.Prepared`` then
holds the steps of the plan for one input fingerprint, host steps and kernels on
intermediates included: a cached execute is ``Prepared.run``.  Plans with a
reference step, and every plan with host steps or kernels on intermediates while a
dump or the profiler is on, run ``_execute_general`` instead, which re-binds and
re-runs the heuristics of every step.  Dumps and the profiler hook in through a
``probe.Probe``, built only when one is on.

Threads: any number of threads may execute one fusion, or each their own.  A cached
execute reads ``rt.prepared`` and runs a ``Prepared``, whose per-execute state is
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
import time

import torch

from ..errors import CompileError, InputError
from ..ir.concretize import Binding, bind, cpu_scalars_on_device
from ..ir.values import ScalarVal
from ..reference import run_expr, run_reference, write_aliases
from ..schedulers.base import current_choices
from ..segment.aliases import broadcast_chain
from ..segment.subfusion import bind_sub, needed_exprs
from ..settings import OVERRIDES, read
from . import dump, profiler
from .cache import count
from .plan import ExecutorCache, Explanation, explain_plan
from .args import arg_value, launch_kw, random_exprs
from .launch import launch_error, poison_tensor
from .prepared import Prepared, expand_output, view_of_input
from .probe import LaunchMeta, Probe, input_positions
from .program import cacheable, prepare
from .rng_state import draw_seed_offset
from .toolchain import triton_ptxas

POISON_OUTPUTS = read("poison_outputs")
# When a list, every launch appends (kernel, grid, args, kwargs): benchmarks replay
# them to time the kernels without the host-side work of execute().
RECORD_LAUNCHES: list | None = None


def make_rng_state(ir, device):
    rexprs = random_exprs(ir)
    if not rexprs:
        return None, {}
    seed, base = draw_seed_offset(device, len(rexprs))
    table = {id(e): (seed, base + k) for k, e in enumerate(rexprs)}
    return (lambda e: table[id(e)]), table


def fingerprint(inputs, device, shape_scalars=()):
    """Everything about the inputs that decides the kernels and their constant arguments:
    ``shape_scalars`` are the positions of scalar inputs that shapes depend on
    (``FusionIR.shape_scalar_inputs``), whose values decide sizes."""
    parts = [device, current_choices().key]
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
    other, then written into their inputs (``reference.write_aliases``)."""
    outs = _execute(fd, inputs, device, profile)
    outs = write_aliases(fd.ir, inputs, outs) if fd.ir.output_aliases else outs
    return _lay_out(fd.ir, outs) if fd.ir.output_layouts else outs


def _lay_out(ir, outs):
    """Outputs of ``fd.ops.stride_order`` in the memory layout it asks for (kernels
    write row-major): a copy whose dim of stride rank r is the r-th innermost."""
    returned = [o for pos, o in enumerate(ir.outputs) if pos not in ir.output_aliases]
    outs = list(outs)
    for k, (o, x) in enumerate(zip(returned, outs)):
        order = ir.output_layouts.get(o)
        if order is None or x.dim() != len(order):
            continue
        outer_first = sorted(range(x.dim()), key=lambda d: -order[d])
        inverse = sorted(range(x.dim()), key=lambda d: outer_first[d])
        outs[k] = x.permute(outer_first).contiguous().permute(inverse)
    return outs


def _execute(fd, inputs, device, profile):
    ir = fd.ir
    if not ir.outputs:
        return []
    rt: ExecutorCache = fd._runtime or _new_runtime(fd)
    active = dump.enabled_dumps()
    profile = profile or profiler.printing() or profiler.capturing()
    try:
        if isinstance(inputs, (list, tuple)):
            inputs = cpu_scalars_on_device(ir, inputs)
            key = fingerprint(inputs, device, ir.shape_scalar_inputs())
            prep = rt.prepared.get(key)
            if prep is not None:
                prep.used = True  # spares it at the next eviction (``ExecutorCache.remember``)
                if not (active or profile):
                    return prep.run(inputs, None, POISON_OUTPUTS, RECORD_LAUNCHES)
                if not prep.general:
                    with rt.lock:  # the probe writes the cache's story (events, metas)
                        probe = Probe(fd, rt, active, profile, prep.device)
                        rt.events.clear()
                        rt.last_metas = [launch[-1] for launch in prep.launches]
                        outs = prep.run(inputs, probe, POISON_OUTPUTS, RECORD_LAUNCHES)
                        probe.finish(inputs, outs)
                    return outs
        with rt.lock, triton_ptxas():  # what compiles here compiles with Triton's ptxas (``toolchain``)
            return _execute_slow(fd, rt, inputs, device, active, profile)
    except CompileError as err:
        from .repro import with_repro

        raise with_repro(fd, inputs, device, err) from (err.__cause__ or err)


_RUNTIME_LOCK = threading.Lock()


def _new_runtime(fd) -> ExecutorCache:
    with _RUNTIME_LOCK:
        if fd._runtime is None:
            fd._runtime = ExecutorCache(fd)
        return fd._runtime


def explain(fd, inputs, device=None) -> Explanation:
    """``fd.explain(inputs)``: plan the fusion for ``inputs`` as ``execute`` would (the
    plan's kernels are built, nothing is launched) and say, per segment, which
    scheduler took it and why the others declined."""
    rt = fd._runtime or _new_runtime(fd)
    with rt.lock:
        b = bind(fd.ir, inputs, device)
        b.input_pos = {v: i for i, v in enumerate(fd.ir.inputs)}
        sig = rt.signature(b, fd.ir.live_exprs())
        rt._current_sig = sig
        plan = rt.plans.get(sig) or rt.make_plan(b)
        params = []
        for step in plan.steps:
            seg = rt.step_segment(b, step)
            if seg is None or step.scheduler is None:
                params.append(None)
                continue
            heur = step.scheduler.heuristics(seg)
            key = (step.scheduler.NAME, tuple(o.index for o in seg.outputs), sig, heur)
            params.append(rt.spill_choice.get(key, heur))
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


def _execute_slow(fd, rt, inputs, device, active, profile):
    ir = fd.ir
    rt.events.clear()
    b = bind(ir, inputs, device)
    if b.device.type not in ("cpu", "cuda"):
        raise InputError(f"execute: inputs on device {b.device} cannot run (pyfuser runs CUDA tensors as kernels, "
                         f"CPU tensors under Triton's interpreter); got {_on_device(ir, inputs, b.device)}")
    guard = _interpreter_guard(b.device)
    with guard:
        return _execute_bound(fd, rt, b, inputs, device, active, profile)


def _interpreter_guard(device):
    """The interpreter's lock for a first execute on the GPU once interpreted kernels
    have run in this process (see the module's docstring), else no lock.  The
    interpreter module (and numpy with it) is imported by CPU launches only."""
    interpreter = sys.modules.get(__package__ + ".interpreter")
    if device.type == "cuda" and interpreter is not None and interpreter.used():
        return interpreter.INTERPRETER_LOCK
    return contextlib.nullcontext()


def _execute_bound(fd, rt, b, inputs, device, active, profile):
    ir = fd.ir
    b.input_pos = {v: i for i, v in enumerate(ir.inputs)}
    probe = Probe(fd, rt, active, profile, b.device) if active or profile else None
    live = ir.live_exprs()
    sig = rt.signature(b, live)
    rt._current_sig = sig
    plan = rt.plans.get(sig)
    if plan is None:
        rt.events.append(rt.explain_signature(sig))
        plan = rt.make_plan(b)
        rt.plans[sig] = plan
        if "segmented_fusion" in active:
            dump.emit(dump.segmented_fusion(fd.id, plan, ir, b.shapes))
    else:
        rt.events.append("new input sizes, strides or parameter overrides (signature known: plan reused, heuristics "
                         "re-run)")
    inputs = list(inputs)
    if plan.general and (probe is not None or not cacheable(plan)):
        outs = _execute_general(fd, rt, plan, b, inputs, probe)
    else:
        prep, chosen = prepare(fd, rt, plan, b, inputs)
        if "scheduler_params" in active:
            dump.emit(dump.scheduler_params(fd.id, explain_plan(rt, plan, b, chosen)))
        rt.remember(fingerprint(inputs, device, ir.shape_scalar_inputs()), prep)
        if probe is None and b.device.type == "cuda":  # the first launches compile: time that for profiles
            probe = Probe(fd, rt, frozenset(), False, b.device)
        rt.last_metas = [launch[-1] for launch in prep.launches]
        outs = prep.run(inputs, probe, POISON_OUTPUTS, RECORD_LAUNCHES, hit=False)
    if probe is not None:
        probe.finish(inputs, outs)
    return outs


def _on_device(ir, inputs, device) -> str:
    found = [f"input {i} ({v.name})" for i, (v, x) in enumerate(zip(ir.inputs, inputs))
             if isinstance(x, torch.Tensor) and x.device == device]
    return ", ".join(found) if found else f"device={device}"


def _execute_general(fd, rt, plan, b, inputs, probe=None):
    ir = fd.ir
    if rt.events and rt.events[0].startswith("new input sizes"):
        rt.events[0] = ("host segments or kernels on intermediates: while a dump or the profiler is on, this fusion "
                        "takes the general path on every execute")
    rng_state, rng_table = make_rng_state(ir, b.device)
    env = dict(b.values)  # with the scalar arithmetic, evaluated by binding
    results = env  # intermediates, host results and outputs, by original Val
    chosen = []
    for i, step in enumerate(plan.steps):
        if step.scheduler is None:
            t0 = time.perf_counter()
            if step.is_host:
                host = _host_ops(step, b, env)
            else:
                host = _host_step(step, b, env, rng_state)
            if probe is not None:
                probe.host_step(i, host, (time.perf_counter() - t0) * 1e3, inputs)
            results.update(host)
            chosen.append(None)
            continue
        if step.sub is None:
            seg = rt.segment(b, step.outputs)
            params = step.scheduler.heuristics(seg)
            chosen.append(params)
            src, fn = rt.build(seg, step.scheduler, params)
            results.update(launch(src, fn, step.scheduler, seg, params, b, env, rng_table, probe, inputs))
            continue
        sf = step.sub
        sb = bind_sub(sf, b, _with_empties(env, sf, b))
        # the subfusion's copies of scalar arithmetic: the values binding evaluated
        sb.values.update((c, b.values[o]) for c, o in sf.orig.items()
                         if isinstance(c, ScalarVal) and c not in sb.values)
        seg = rt.sub_segment(b, sf)
        params = step.scheduler.heuristics(seg)
        chosen.append(params)
        src, fn = rt.build(seg, step.scheduler, params)
        sub_rng = {se_id: rng_table[id(e)] for se_id, e in sf.exprs.items() if id(e) in rng_table}
        sub_inputs = [sb.values[v] for v in sf.ir.inputs]
        outs = launch(src, fn, step.scheduler, seg, params, sb, sb.values, sub_rng, probe, sub_inputs)
        results.update({sf.orig[o]: t for o, t in outs.items()})
    if probe is not None and "scheduler_params" in probe.active:
        dump.emit(dump.scheduler_params(fd.id, explain_plan(rt, plan, b, chosen)))
    outs = []
    for pos, o in enumerate(ir.outputs):
        kind = plan.aliases.get(pos)
        if kind == "input":
            outs.append(b.values[o])
        elif kind == "view":
            outs.append(view_of_input(o, b, inputs))
        elif kind == "expand":
            x, chain = broadcast_chain(o)
            outs.append(expand_output(chain, b.values[x] if x in ir.inputs else results[x], b))
        elif o in results:
            outs.append(results[o])
        else:
            outs.append(torch.empty(b.shapes[o], dtype=o.dtype.torch, device=b.device))
    return outs


def _with_empties(env, sf, b):
    """Zero-size intermediates have no kernel: give their readers empty tensors."""
    missing = [o for c, o in sf.orig.items() if c in sf.ir.inputs and o not in env]
    if not missing:
        return env
    env = dict(env)
    for o in missing:
        env[o] = torch.empty(b.shapes[o], dtype=o.dtype.torch, device=b.device)
    return env


def _host_ops(step, b, env):
    """A host segment: torch calls (a matmul, a gather, the casts replayed before it)."""
    out = {}
    for e in step.host:
        args = []
        for v in e.inputs:
            x = out[v] if v in out else env.get(v)
            if x is None:  # a zero-size intermediate: no kernel wrote it
                x = torch.empty(b.shapes[v], dtype=v.dtype.torch, device=b.device)
            args.append(x)
        for o, r in zip(e.outputs, run_expr(e, args, b)):
            out[o] = r.contiguous()
    return out


def _host_step(step, b, env, rng_state):
    """A reference step: the reference executor's exprs that compute the step's outputs
    from what is already known (inputs, earlier steps' results).  Every output comes
    back, the intermediates later steps load as well as the fusion's outputs."""
    vals = dict(env)
    for e in needed_exprs(step.outputs, vals):
        for o, r in zip(e.outputs, run_expr(e, [vals[v] for v in e.inputs], b, rng_state)):
            vals[o] = r
    return {o: _as_tensor(vals[o], o, b).contiguous() for o in step.outputs}


def _as_tensor(x, v, b):
    return x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=v.dtype.torch, device=b.device)


def launch(src, fn, sched, seg, params, b: Binding, env, rng_table, probe=None, inputs=()):
    out_tensors = {}
    for o in src.outputs:
        t = torch.empty(b.shapes[o], dtype=o.dtype.torch, device=b.device)
        if POISON_OUTPUTS:
            poison_tensor(t)
        out_tensors[o] = t
    args = [arg_value(a, b, env, out_tensors, rng_table) for a in src.args]
    grid = sched.grid(seg, params)
    kw = launch_kw(src, params, b.device.type == "cuda")
    try:
        if probe is None:
            fn[grid](*args, **kw)
        else:
            meta = LaunchMeta(probe.rt.kernel_info[src.name], input_positions(src, b.input_pos))
            probe.launch(meta, fn, grid, args, kw, inputs, out_tensors)
    except Exception as err:
        raise launch_error(src, err) from err
    count(launches=1)
    if RECORD_LAUNCHES is not None:
        RECORD_LAUNCHES.append((fn, grid, args, kw))
    return out_tensors


# -- a caller-checked cached execute (the torch.compile backend's regions) -------------------
def fast_path_allowed() -> bool:
    """Whether ``run_prepared`` may stand in for ``execute``: no dump, no profile (nor an
    open ``PythonProfiler``) and no scheduler override (overrides are part of the fingerprint) are on.

    The torch.compile backend asks at every region call, between ATen ops whose work
    evicts the host's caches: there, the general check (``dump.enabled_dumps`` and
    ``profiler.printing``, four functions and as many modules' dicts) cost many times
    what it costs in a loop (docs/TUNING.md#region-call-host).  This one reads the two
    variables' raw values straight from the environment's dict: set to anything but
    "" (and ``profiler.OFF`` for PYFUSER_PROF), the call takes ``execute``, which
    validates them."""
    if current_choices() or profiler._CAPTURING:
        return False
    if OVERRIDES or _ENV_DATA is None:
        return not dump.enabled_dumps() and not profiler.printing()
    prof = _ENV_DATA.get(_PROF_KEY)
    return not _ENV_DATA.get(_DUMP_KEY) and (prof is None or prof in _PROF_OFF)


_ENV_DATA = dump._ENV_DATA
_DUMP_KEY, _PROF_KEY = (os.environ.encodekey(name) for name in ("PYFUSER_DUMP", "PYFUSER_PROF"))
_PROF_OFF = tuple(os.environ.encodevalue(v) for v in profiler.OFF)


def prepared_for(fd, inputs, device=None):
    """The ``Prepared`` a cached ``execute(fd, inputs, device)`` would run, or None."""
    rt = fd._runtime
    if rt is None:
        return None
    return rt.prepared.get(fingerprint(inputs, device, fd.ir.shape_scalar_inputs()))


def run_prepared(fd, prep: Prepared, inputs, device=None):
    """``execute``'s cached path without the fingerprint: the caller has checked that
    ``inputs`` have the dtypes, shapes, strides, devices and 16-byte alignment ``prep``
    was prepared for, and ``fast_path_allowed()``."""
    try:
        outs = prep.run(inputs, None, POISON_OUTPUTS, RECORD_LAUNCHES)
        return write_aliases(fd.ir, inputs, outs) if fd.ir.output_aliases else outs
    except CompileError as err:
        from .repro import with_repro

        raise with_repro(fd, inputs, device, err) from (err.__cause__ or err)
