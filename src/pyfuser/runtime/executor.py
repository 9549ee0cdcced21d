"""execute(): bind inputs, pick or build the kernels, allocate outputs, launch.

Planning (signature -> ``Plan``, kernels) lives in ``plan.ExecutorCache``.  Sizes
are not in the signature: they are kernel arguments, and each new set of input
sizes re-runs the (cheap, pure) heuristics, so a new size compiles a new kernel
only when the heuristics choose different parameters.  A ``Prepared`` then holds
the launches for one input fingerprint: a cached execute is ``Prepared.run``.
Dumps and the profiler hook in through a ``probe.Probe``, built only when one is on.
"""
from __future__ import annotations

import math
import os
import time

import torch

from ..errors import CompileError
from ..ir.concretize import Binding, bind
from ..ir.extents import ScalarProgram
from ..ir.ops import OPS
from ..ir.values import ScalarVal
from ..reference import run_expr, run_reference
from ..schedulers.base import _OVERRIDES
from . import dump, profiler
from .cache import COUNTERS
from .spills import choose_params, scratch_outputs
from .plan import ExecutorCache, is_contiguous
from .subfusion import bind_sub
from .probe import LaunchMeta, Probe, input_positions, scheduler_decisions
from .rng_state import draw_seed_offset

POISON_OUTPUTS = os.environ.get("PYFUSER_POISON_OUTPUTS", "") == "1"
# When a list, every launch appends (kernel, grid, args, kwargs): benchmarks replay
# them to time the kernels without the host-side work of execute().
RECORD_LAUNCHES: list | None = None


def random_exprs(ir):
    return [e for e in ir.live_exprs() if OPS[e.op].kind == "random" and not e.attrs["has_seed"]]


def make_rng_state(ir, device):
    rexprs = random_exprs(ir)
    if not rexprs:
        return None, {}
    seed, base = draw_seed_offset(device, len(rexprs))
    table = {id(e): (seed, base + 4 * k) for k, e in enumerate(rexprs)}
    return (lambda e: table[id(e)]), table


def _warmup_args(src, params, sched, seg, b):
    """Arguments for compiling ``src`` ahead of its launch: the real inputs, scratch
    outputs, zero random state (only types and alignment matter to the compiler)."""
    outs = scratch_outputs(src, b)
    args = [arg_value(a, b, b.values, outs, {id(a.source[1]): (0, 0)} if a.kind == "rng" else {}) for a in src.args]
    kw = dict(src.constexprs)
    kw["num_warps"] = params.num_warps
    return args, sched.grid(seg, params), kw


def fingerprint(inputs, device, shape_scalars=()):
    """Everything about the inputs that decides the kernels and their constant arguments:
    ``shape_scalars`` are the positions of scalar inputs that shapes depend on
    (``FusionIR.shape_scalar_inputs``), whose values decide sizes."""
    parts = [device, tuple(sorted(_OVERRIDES.items())) if _OVERRIDES else ()]
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


class Prepared:
    """The launches of one plan at one set of input sizes and strides, with every
    argument that does not change between executes computed once.  ``run`` is the
    whole of a cached execute: draw random state, compute the runtime scalars
    (``ScalarProgram``: scalar arithmetic on scalar inputs), allocate outputs, launch."""

    def __init__(self, fd, plan, b: Binding, launches, inputs):
        ir = fd.ir
        self.device = b.device
        pos = {v: i for i, v in enumerate(ir.inputs)}
        self.rexprs = random_exprs(ir)
        # Scalar inputs given as Python numbers go to kernels as they are; the other
        # scalars kernels read (0-d tensor inputs, arithmetic on scalar inputs) are
        # computed by ``self.scalars`` on every run.
        scalar_pos = {v: p for v, p in pos.items() if isinstance(v, ScalarVal)}
        as_tensor = {p for p in scalar_pos.values() if isinstance(inputs[p], torch.Tensor)}
        as_given = {v for v, p in scalar_pos.items() if p not in as_tensor}
        wanted = [a.source[1] for la in launches for a in la[0].args
                  if a.source[0] == "scalar" and a.source[1] not in as_given]
        self.scalars = ScalarProgram(ir, wanted, b.values, as_tensor)
        scalar_k = {v: k for k, v in enumerate(self.scalars.targets)}
        self.launches = []
        for src, fn, sched, seg, params in launches:
            builders = []
            for a in src.args:
                kind = a.source[0]
                if kind == "tensor":
                    builders.append(("input", pos[a.source[1]]))
                elif kind == "output":
                    builders.append(("output", a.source[1]))
                elif kind == "scalar" and a.source[1] in as_given:
                    builders.append(("input", pos[a.source[1]]))
                elif kind == "scalar" and a.source[1] in scalar_k:
                    builders.append(("scalar", scalar_k[a.source[1]]))
                elif kind == "rng":
                    builders.append(("rng", id(a.source[1]), a.source[2]))
                else:
                    builders.append(("const", arg_value(a, b, b.values, {}, {})))
            kw = dict(src.constexprs)
            if b.device.type == "cuda":
                kw["num_warps"] = params.num_warps
            outs = [(o, b.shapes[o], o.dtype.torch) for o in src.outputs]
            meta = LaunchMeta(fd._runtime.kernel_info[src.name], input_positions(src, pos))
            self.launches.append((src, fn, sched.grid(seg, params), builders, kw, outs, params, meta))
        self.result_spec = []
        for p, o in enumerate(ir.outputs):
            kind = plan.aliases.get(p)
            if kind is not None:
                self.result_spec.append((kind, o))
            else:
                self.result_spec.append(("kernel", o))
        self.binding = b
        # Launch straight through the compiled kernel once it exists (see direct_launcher)
        # when every runtime scalar argument is a float or a bool: Triton passes those as
        # fp32 and i1 whatever the value (and a fingerprint fixes each input's Python
        # type, the IR each computed scalar's).  An int is i32 or i64 by its value, which
        # only Triton's per-call binding reads.
        scalar_types = {("scalar", k): type(b.values[v]) for k, v in enumerate(self.scalars.targets)}
        scalar_types.update({("input", scalar_pos[v]): type(inputs[scalar_pos[v]]) for v in as_given})
        self.direct_ok = [all(scalar_types.get(bld[:2], float) in (float, bool) for bld in la[3])
                          for la in self.launches]  # the other arguments are fixed or 16-bit random words
        self.direct: dict = {}
        self._compile_run_plan(len(ir.inputs))

    def _compile_run_plan(self, n_inputs):
        """Index tables for ``run``: every output of every launch is allocated into one
        flat list, and each launch's arguments are picked by index from the pool
        ``[*inputs, *outputs, *runtime scalars, *constants]`` (random words patched in
        afterwards)."""
        alloc, flat, consts = [], {}, []
        rank = {id(e): k for k, e in enumerate(self.rexprs)}  # random op k: offset base + 4 * k
        for la in self.launches:
            for o, shape, dtype in la[5]:
                flat[o] = len(alloc)  # a value written by two launches: the last one wins
                alloc.append((shape, dtype))
        n_out = len(alloc)
        n_scalars = len(self.scalars.targets)
        self._alloc = tuple(alloc)
        self._argplans = []
        k = 0
        for la in self.launches:
            outs_here = {}
            for o, _, _ in la[5]:
                outs_here[o] = k
                k += 1
            idx, rng = [], []
            for j, bld in enumerate(la[3]):
                kind = bld[0]
                if kind == "input":
                    idx.append(bld[1])
                elif kind == "output":
                    idx.append(n_inputs + outs_here[bld[1]])
                elif kind == "scalar":
                    idx.append(n_inputs + n_out + bld[1])
                elif kind == "const":
                    idx.append(n_inputs + n_out + n_scalars + len(consts))
                    consts.append(bld[1])
                else:
                    idx.append(0)  # replaced by the random word
                    rng.append((j, rank[bld[1]], bld[2]))
            self._argplans.append((len(self._argplans), tuple(idx), tuple(rng)))
        self._consts = consts
        self._scalar_run = self.scalars.run if n_scalars else None
        self._n_inputs = n_inputs
        spec = []
        for kind, o in self.result_spec:
            if kind in ("input", "view"):
                spec.append((kind, o))
            elif o in flat:
                spec.append(("flat", flat[o]))
            else:
                spec.append(("empty", o))
        self._result_flat = (tuple(k for _, k in spec) if all(kind == "flat" for kind, _ in spec) else None)
        self._result_plan = spec

    def run(self, inputs, probe: Probe | None = None):
        seed = base = 0
        if self.rexprs:
            seed, base = draw_seed_offset(self.device, len(self.rexprs))
        device = self.device
        flat = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self._alloc]
        if POISON_OUTPUTS:
            for t in flat:
                _poison(t)
        if self._scalar_run is None:
            pool = [*inputs, *flat, *self._consts]
        else:
            pool = [*inputs, *flat, *self._scalar_run(inputs), *self._consts]
        k = 0  # the first output of this launch in flat
        direct_map = self.direct
        for la, (i, idx, rng) in zip(self.launches, self._argplans):
            args = [pool[j] for j in idx]
            for j, r, w in rng:
                args[j] = _rng_word((seed, base + 4 * r), w)
            try:
                if probe is None:
                    direct = direct_map.get(i, _UNTRIED)
                    if direct:
                        direct[0](*args, *direct[1])
                    else:
                        la[1][la[2]](*args, **la[4])
                        # None (no compiled kernel to be had) is remembered, not retried
                        if direct is _UNTRIED and device.type == "cuda" and self.direct_ok[i]:
                            direct_map[i] = direct_launcher(la[0], la[1], la[2], args, la[4])
                else:
                    out_tensors = {o: flat[k + n] for n, (o, _, _) in enumerate(la[5])}
                    probe.launch(la[7], la[1], la[2], args, la[4], inputs, out_tensors)
            except Exception as err:
                raise launch_error(la[0], err) from err
            k += len(la[5])
            COUNTERS["launches"] += 1
            if RECORD_LAUNCHES is not None:
                RECORD_LAUNCHES.append((la[1], la[2], args, la[4]))
        if self._result_flat is not None:
            return [flat[j] for j in self._result_flat]
        b = self.binding
        results = []
        for kind, o in self._result_plan:
            if kind == "flat":
                results.append(flat[o])
            elif kind == "input":
                results.append(inputs[b_index(b, o)])
            elif kind == "view":
                results.append(_view(o, b, inputs))
            else:  # a zero-size output: no kernel writes it
                results.append(torch.empty(b.shapes[o], dtype=o.dtype.torch, device=device))
        return results


_UNTRIED = ()  # falsy: no direct launcher tried yet for this launch


def direct_launcher(src, fn, grid, args, kw):
    """(runner, constexpr values) that launch the kernel Triton compiled for these
    arguments without its per-call argument binding and cache lookup (about half of a
    small launch's host time).  Safe because a Prepared is specific to its inputs'
    dtypes, shapes, strides and 16-byte alignment, its integer arguments are
    constants, and outputs come fresh from torch's allocator (aligned).  None if the
    compiled kernel cannot be had; the JIT path is used then."""
    try:
        k = fn.run(*args, grid=grid, warmup=True, **kw)
        runner = k[tuple(grid) + (1,) * (3 - len(grid))]
        return runner, [kw[name] for name in src.constexprs]
    except Exception:
        return None


def b_index(b: Binding, v):
    return b.input_pos[v]


def _rng_word(seed_offset, i):
    seed, offset = seed_offset
    word = (seed, seed, seed >> 32, seed >> 32, offset, offset, offset >> 32, offset >> 32)[i]
    return (word >> 16) & 0xFFFF if i % 2 == 0 else word & 0xFFFF


def launch_error(src, err) -> CompileError:
    if isinstance(err, CompileError):
        return err
    return CompileError(f"pyfuser: kernel {src.name} failed to compile or run: {type(err).__name__}: {err}")


def execute(fd, inputs, device=None, profile=False):
    """Run the fusion.  ``profile=True`` (or ``PYFUSER_PROF=print``) records a
    ``FusionProfile`` in ``fd.last_profile``; ``PYFUSER_DUMP`` names what to print."""
    ir = fd.ir
    if not ir.outputs:
        return []
    if fd._runtime is None:
        fd._runtime = ExecutorCache(fd)
    rt: ExecutorCache = fd._runtime
    active = dump.enabled_dumps()
    profile = profile or profiler.printing()
    try:
        if isinstance(inputs, (list, tuple)):
            prep = rt.prepared.get(fingerprint(inputs, device, ir.shape_scalar_inputs()))
            if prep is not None:
                COUNTERS["hits"] += len(prep.launches)
                if not (active or profile):
                    return prep.run(inputs)
                probe = Probe(fd, rt, active, profile, prep.device)
                rt.events.clear()
                rt.last_metas = [launch[-1] for launch in prep.launches]
                outs = prep.run(inputs, probe)
                probe.finish(inputs, outs)
                return outs
        return _execute_slow(fd, rt, inputs, device, active, profile)
    except CompileError as err:
        from .repro import with_repro

        raise with_repro(fd, inputs, device, err) from (err.__cause__ or err)


def _execute_slow(fd, rt, inputs, device, active, profile):
    ir = fd.ir
    rt.events.clear()
    b = bind(ir, inputs, device)
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
    if plan.general:  # host segments or kernels on intermediates: the general path every time
        outs = _execute_general(fd, rt, plan, b, inputs, probe)
    else:
        launches = []
        for step in plan.steps:
            seg = rt.segment(b, step.outputs)
            params = step.scheduler.heuristics(seg)
            if b.device.type == "cuda":
                params, src, fn = choose_params(rt, seg, step.scheduler, params, b, inputs,
                                                lambda src, p, _seg=seg, _s=step.scheduler: _warmup_args(src, p, _s, _seg, b))
            else:
                src, fn = rt.build(seg, step.scheduler, params)
            launches.append((src, fn, step.scheduler, seg, params))
        if "scheduler_params" in active:
            dump.emit(dump.scheduler_params(fd.id, scheduler_decisions(rt, plan, b, [la[4] for la in launches])))
        prep = Prepared(fd, plan, b, launches, inputs)
        rt.prepared[fingerprint(inputs, device, ir.shape_scalar_inputs())] = prep
        if probe is None and b.device.type == "cuda":  # the first launches compile: time that for profiles
            probe = Probe(fd, rt, frozenset(), False, b.device)
        rt.last_metas = [launch[-1] for launch in prep.launches]
        outs = prep.run(inputs, probe)
    if probe is not None:
        probe.finish(inputs, outs)
    return outs


def _execute_general(fd, rt, plan, b, inputs, probe=None):
    ir = fd.ir
    if rt.events and rt.events[0].startswith("new input sizes"):
        rt.events[0] = ("host segments or kernels on intermediates: this fusion takes the general path on every "
                        "execute")
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
                host = _host_step(ir, step, b, env, rng_state)
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
        dump.emit(dump.scheduler_params(fd.id, scheduler_decisions(rt, plan, b, chosen)))
    outs = []
    for pos, o in enumerate(ir.outputs):
        kind = plan.aliases.get(pos)
        if kind == "input":
            outs.append(b.values[o])
        elif kind == "view":
            outs.append(_view(o, b, inputs))
        elif o in results:
            outs.append(results[o])
        else:
            outs.append(torch.empty(b.shapes[o], dtype=o.dtype.torch, device=b.device))
    return outs


def _view(o, b, inputs):
    chain = []
    v = o
    while v.definition is not None:
        chain.append(v.definition)
        v = v.definition.inputs[0]
    x = inputs[b.input_pos[v]]
    for e in reversed(chain):
        if e.op == "reshape":
            x = x.view(b.shapes[e.outputs[0]]) if is_contiguous(x) or x.is_contiguous() else x.reshape(b.shapes[e.outputs[0]])
        elif e.op == "squeeze":
            x = x.squeeze(e.attrs["dims"]) if e.attrs["dims"] else x
        else:
            x = x.permute(e.attrs["dims"])
    return x


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


def _host_step(ir, step, b, env, rng_state):
    refs = run_reference(ir, None, rng_state=rng_state, binding=b)
    return {o: r.contiguous() for o, r in zip(ir.outputs, refs) if o in step.outputs}


def _poison(t: torch.Tensor):
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max)


def launch(src, fn, sched, seg, params, b: Binding, env, rng_table, probe=None, inputs=()):
    out_tensors = {}
    for o in src.outputs:
        t = torch.empty(b.shapes[o], dtype=o.dtype.torch, device=b.device)
        if POISON_OUTPUTS:
            _poison(t)
        out_tensors[o] = t
    args = [arg_value(a, b, env, out_tensors, rng_table) for a in src.args]
    grid = sched.grid(seg, params)
    kw = dict(src.constexprs)
    if b.device.type == "cuda":
        kw["num_warps"] = params.num_warps
    try:
        if probe is None:
            fn[grid](*args, **kw)
        else:
            meta = LaunchMeta(probe.rt.kernel_info[src.name], input_positions(src, b.input_pos))
            probe.launch(meta, fn, grid, args, kw, inputs, out_tensors)
    except Exception as err:
        raise launch_error(src, err) from err
    COUNTERS["launches"] += 1
    if RECORD_LAUNCHES is not None:
        RECORD_LAUNCHES.append((fn, grid, args, kw))
    return out_tensors


def arg_value(a, b: Binding, env, outs, rng_table):
    kind = a.source[0]
    if kind == "tensor":
        return b.values[a.source[1]]
    if kind == "output":
        return outs[a.source[1]]
    if kind == "size":
        return b.shapes[a.source[1]][a.source[2]]
    if kind == "stride":
        return b.values[a.source[1]].stride(a.source[2])
    if kind == "numel":
        v, dims = a.source[1], a.source[2]
        shape = b.shapes[v]
        return math.prod(shape if dims is None else [shape[d] for d in dims])
    if kind == "scalar":
        return env[a.source[1]]
    if kind == "rng":
        return _rng_word(rng_table[id(a.source[1])], a.source[2])
    if kind == "scratch":
        return scratch_buffer(a, b)
    raise AssertionError(kind)


def scratch_buffer(a, b: Binding) -> torch.Tensor:
    """A kernel's working memory (a split reduction's partials and counters):
    ``factor * ceil(numel of dims / divisor)`` elements, zeroed when the kernel needs
    zeros.  A ``Prepared`` takes it once, as a constant argument, and the kernel
    leaves its counters at zero again after each launch; every other path gets a
    fresh buffer per launch."""
    _, factor, v, dims, divisor, dtype, zero = a.source
    shape = b.shapes[v]
    n = factor * -(-math.prod(shape[d] for d in dims) // divisor)
    make = torch.zeros if zero else torch.empty
    return make(max(n, 1), dtype=getattr(torch, dtype), device=b.device)


# -- a caller-checked cached execute (the torch.compile backend's regions) -------------------
def fast_path_allowed() -> bool:
    """Whether ``run_prepared`` may stand in for ``execute``: no dump, no profile and no
    scheduler override (overrides are part of the fingerprint) are on."""
    return not _OVERRIDES and not dump.enabled_dumps() and not profiler.printing()


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
    COUNTERS["hits"] += len(prep.launches)
    try:
        return prep.run(inputs)
    except CompileError as err:
        from .repro import with_repro

        raise with_repro(fd, inputs, device, err) from (err.__cause__ or err)
