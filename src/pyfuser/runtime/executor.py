"""execute(): bind inputs, pick or build the kernels, allocate outputs, launch.

Per FusionDefinition an ``ExecutorCache`` maps an input *signature* (device kind,
which dims are size 1, which inputs are contiguous, 16-byte alignment, index width,
normalised slice bounds) to a ``Plan``: which outputs alias inputs, and the
segments with their schedulers.  Sizes are not in the signature: they are kernel
arguments, and each execute re-runs the (cheap, pure) heuristics, so a new size
compiles a new kernel only when the heuristics choose different parameters.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch

from ..codegen.lower import Unsupported
from ..errors import CompileError
from ..ir.concretize import Binding, bind
from ..ir.ops import OPS
from ..ir.shapes import slice_shape
from ..ir.values import ScalarVal, TensorVal
from ..reference import run_expr, run_reference
from ..schedulers import SCHEDULERS, Segment
from ..schedulers.base import _OVERRIDES
from . import dump
from .cache import COUNTERS, load_kernel
from .rng_state import draw_seed_offset

VIEW_OPS = ("reshape", "squeeze", "permute")
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


@dataclass
class Step:
    """One segment of a plan: a scheduler module and the outputs it computes."""

    outputs: list
    scheduler: object  # a schedulers.* module, or None for a host (reference) step
    reason: str = ""
    kernels: dict = field(default_factory=dict)  # params -> (KernelSource, launchable)


@dataclass
class Plan:
    aliases: dict  # output position -> "input" | "view"
    steps: list


class ExecutorCache:
    def __init__(self, fd):
        self.fd = fd
        self.plans: dict = {}
        self.kernel_counter = 0
        self.fresh: set = set()
        self.prepared: dict = {}  # input fingerprint -> Prepared
        self.kernels: dict = {}  # (scheduler, outputs, signature, params) -> (KernelSource, kernel)

    # -- signature -------------------------------------------------------------------
    def signature(self, b: Binding, live):
        parts = [b.device.type]
        for v in self.fd.ir.inputs:
            if isinstance(v, TensorVal):
                x = b.values[v]
                parts.append((is_contiguous(x), x.data_ptr() % 16 == 0))
        for e in live:
            for o in e.outputs:
                if isinstance(o, TensorVal):
                    parts.append(tuple(s == 1 for s in b.shapes[o]))
            if e.op == "slice":
                parts.append(tuple(slice_shape(e.op, b.shapes[e.inputs[0]], e.attrs["starts"], e.attrs["ends"],
                                               e.attrs["steps"])[1]))
        for v in self.fd.ir.inputs:
            if isinstance(v, TensorVal):
                parts.append(tuple(s == 1 for s in b.shapes[v]))
        parts.append(any(math.prod(s) > 2**30 for s in b.shapes.values()))
        return tuple(parts)

    def segment(self, b: Binding, outputs) -> Segment:
        info = {v: {"contiguous": is_contiguous(b.values[v])} for v in self.fd.ir.inputs if isinstance(v, TensorVal)}
        return Segment(list(outputs), b.shapes, info, b.device.type)

    # -- planning ----------------------------------------------------------------------
    def make_plan(self, b: Binding) -> Plan:
        ir = self.fd.ir
        aliases = {}
        rest = []
        for pos, o in enumerate(ir.outputs):
            if o in ir.inputs:
                aliases[pos] = "input"
            elif _is_view_of_input(o, ir):
                aliases[pos] = "view"
            elif o not in rest:
                rest.append(o)
        steps = self.split(b, [o for o in rest if math.prod(b.shapes[o]) > 0])
        return Plan(aliases, steps)

    def try_schedule(self, b, outputs):
        seg = self.segment(b, outputs)
        reasons = []
        for sched in SCHEDULERS:
            rej = sched.can_schedule(seg)
            if rej is not None:
                reasons.append(f"{sched.NAME}: {rej}")
                continue
            params = sched.heuristics(seg)
            try:
                self.build(seg, sched, params)
            except Unsupported as err:
                reasons.append(f"{sched.NAME}: {err}")
                continue
            return Step(list(outputs), sched, "; ".join(reasons)), reasons
        return None, reasons

    def split(self, b, outputs):
        if not outputs:
            return []
        step, reasons = self.try_schedule(b, outputs)
        if step is not None:
            return [step]
        if len(outputs) == 1:
            return [Step(list(outputs), None, "; ".join(reasons))]
        groups: dict = {}
        for o in outputs:
            groups.setdefault(b.shapes[o], []).append(o)
        if len(groups) > 1:
            return [s for g in groups.values() for s in self.split(b, g)]
        return [s for o in outputs for s in self.split(b, [o])]

    # -- kernels -----------------------------------------------------------------------
    def build(self, seg, sched, params):
        key = (sched.NAME, tuple(o.index for o in seg.outputs), self._current_sig, params)
        hit = self.kernels.get(key)
        if hit is not None:
            if key in self.fresh:  # built while planning this very execute
                self.fresh.discard(key)
            else:
                COUNTERS["hits"] += 1
            return hit
        COUNTERS["misses"] += 1
        self.fresh.add(key)
        self.kernel_counter += 1
        name = f"pyfuser_f{self.fd.id}_k{self.kernel_counter}"
        src = sched.emit(seg, params, name)
        if dump.dumping("kernel_code"):
            dump.emit(f"===== kernel {name} ({sched.NAME}) =====\n{src.source}")
        try:
            fn = load_kernel(name, src.source, seg.device_type)
        except Exception as err:  # a generated kernel that does not import is our bug
            raise CompileError(f"pyfuser: generated kernel {name} failed to load: {err}") from err
        COUNTERS["kernels_compiled"] += 1
        self.kernels[key] = (src, fn)
        return src, fn


def is_contiguous(x: torch.Tensor) -> bool:
    expected = 1
    for d in reversed(range(x.dim())):
        if x.shape[d] == 1:
            continue
        if x.stride(d) != expected:
            return False
        expected *= x.shape[d]
    return True


def _is_view_of_input(o, ir) -> bool:
    v = o
    while v.definition is not None:
        if v.definition.op not in VIEW_OPS:
            return False
        v = v.definition.inputs[0]
    return v in ir.inputs and v is not o


def fingerprint(inputs, device):
    """Everything about the inputs that decides the kernels and their constant arguments."""
    parts = [device, tuple(sorted(_OVERRIDES.items()))]
    for x in inputs:
        if isinstance(x, torch.Tensor):
            parts.append((x.dtype, x.shape, x.stride(), x.device, x.data_ptr() % 16 == 0))
        else:
            parts.append(type(x))
    return tuple(parts)


class Prepared:
    """The launches of one plan at one set of input sizes and strides, with every
    argument that does not change between executes computed once.  ``run`` is the
    whole of a cached execute: draw random state, allocate outputs, launch."""

    def __init__(self, fd, plan, b: Binding, launches):
        ir = fd.ir
        self.device = b.device
        pos = {v: i for i, v in enumerate(ir.inputs)}
        self.rexprs = random_exprs(ir)
        self.launches = []
        for src, fn, sched, seg, params in launches:
            builders = []
            for a in src.args:
                kind = a.source[0]
                if kind == "tensor":
                    builders.append(("input", pos[a.source[1]]))
                elif kind == "output":
                    builders.append(("output", a.source[1]))
                elif kind == "scalar" and a.source[1] in pos:
                    builders.append(("input", pos[a.source[1]]))
                elif kind == "rng":
                    builders.append(("rng", id(a.source[1]), a.source[2]))
                else:
                    builders.append(("const", arg_value(a, b, b.values, {}, {})))
            kw = dict(src.constexprs)
            if b.device.type == "cuda":
                kw["num_warps"] = params.num_warps
            outs = [(o, b.shapes[o], o.dtype.torch) for o in src.outputs]
            self.launches.append((src, fn, sched.grid(seg, params), builders, kw, outs, params))
        self.result_spec = []
        for p, o in enumerate(ir.outputs):
            kind = plan.aliases.get(p)
            if kind is not None:
                self.result_spec.append((kind, o))
            else:
                self.result_spec.append(("kernel", o))
        self.binding = b

    def run(self, inputs):
        table = {}
        if self.rexprs:
            seed, base = draw_seed_offset(self.device, len(self.rexprs))
            table = {id(e): (seed, base + 4 * k) for k, e in enumerate(self.rexprs)}
        results = {}
        for src, fn, grid, builders, kw, outs, params in self.launches:
            out_tensors = {}
            for o, shape, dtype in outs:
                t = torch.empty(shape, dtype=dtype, device=self.device)
                if POISON_OUTPUTS:
                    _poison(t)
                out_tensors[o] = t
            args = []
            for bld in builders:
                k = bld[0]
                if k == "const":
                    args.append(bld[1])
                elif k == "input":
                    args.append(inputs[bld[1]])
                elif k == "output":
                    args.append(out_tensors[bld[1]])
                else:
                    args.append(_rng_word(table[bld[1]], bld[2]))
            if dump.dumping("launch_params"):
                dump.emit(f"{src.name}: grid={grid} num_warps={params.num_warps} {src.constexprs}")
            fn[grid](*args, **kw)
            COUNTERS["launches"] += 1
            if RECORD_LAUNCHES is not None:
                RECORD_LAUNCHES.append((fn, grid, args, kw))
            results.update(out_tensors)
        b = self.binding
        outs = []
        for kind, o in self.result_spec:
            if kind == "input":
                outs.append(inputs[b_index(b, o)])
            elif kind == "view":
                outs.append(_view(o, b, inputs))
            elif o in results:
                outs.append(results[o])
            else:  # a zero-size output: no kernel writes it
                outs.append(torch.empty(b.shapes[o], dtype=o.dtype.torch, device=self.device))
        return outs


def b_index(b: Binding, v):
    return b.input_pos[v]


def _rng_word(seed_offset, i):
    seed, offset = seed_offset
    word = (seed, seed, seed >> 32, seed >> 32, offset, offset, offset >> 32, offset >> 32)[i]
    return (word >> 16) & 0xFFFF if i % 2 == 0 else word & 0xFFFF


def execute(fd, inputs, device=None, profile=False):
    ir = fd.ir
    if not ir.outputs:
        return []
    if fd._runtime is None:
        fd._runtime = ExecutorCache(fd)
    rt: ExecutorCache = fd._runtime
    if isinstance(inputs, (list, tuple)):
        fp = fingerprint(inputs, device)
        prep = rt.prepared.get(fp)
        if prep is not None:
            for _ in prep.launches:
                COUNTERS["hits"] += 1
            return prep.run(inputs)
    b = bind(ir, inputs, device)
    b.input_pos = {v: i for i, v in enumerate(ir.inputs)}
    live = ir.live_exprs()
    sig = rt.signature(b, live)
    rt._current_sig = sig
    plan = rt.plans.get(sig)
    if plan is None:
        plan = rt.make_plan(b)
        rt.plans[sig] = plan
        if dump.dumping("segmented_fusion"):
            dump.emit(describe_plan(plan, ir))
    host_scalars = [e for e in live if all(isinstance(o, ScalarVal) for o in e.outputs)]
    host_steps = [s for s in plan.steps if s.scheduler is None]
    if host_scalars or host_steps:  # rare: run the general path every time
        return _execute_general(fd, rt, plan, b, live, inputs)
    launches = []
    for step in plan.steps:
        seg = rt.segment(b, step.outputs)
        params = step.scheduler.heuristics(seg)
        src, fn = rt.build(seg, step.scheduler, params)
        launches.append((src, fn, step.scheduler, seg, params))
    prep = Prepared(fd, plan, b, launches)
    rt.prepared[fingerprint(inputs, device)] = prep
    return prep.run(list(inputs))


def _execute_general(fd, rt, plan, b, live, inputs):
    ir = fd.ir
    rng_state, rng_table = make_rng_state(ir, b.device)
    env = dict(b.values)
    for e in live:  # scalar arithmetic runs on the host
        if all(isinstance(o, ScalarVal) for o in e.outputs):
            outs = run_expr(e, [env[v] for v in e.inputs], b)
            env.update(zip(e.outputs, outs))
    results = {}
    for step in plan.steps:
        if step.scheduler is None:
            results.update(_host_step(ir, step, b, env, rng_state))
            continue
        seg = rt.segment(b, step.outputs)
        params = step.scheduler.heuristics(seg)
        src, fn = rt.build(seg, step.scheduler, params)
        results.update(launch(src, fn, step.scheduler, seg, params, b, env, rng_table))
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


def launch(src, fn, sched, seg, params, b: Binding, env, rng_table):
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
    if dump.dumping("launch_params"):
        dump.emit(f"{src.name}: grid={grid} num_warps={params.num_warps} {src.constexprs}")
    fn[grid](*args, **kw)
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
    raise AssertionError(kind)


def describe_plan(plan: Plan, ir) -> str:
    lines = [f"segmented fusion: {len(plan.steps)} segment(s)"]
    for pos, kind in sorted(plan.aliases.items()):
        lines.append(f"  output {pos} ({ir.outputs[pos].name}): {kind} alias, no kernel")
    for i, s in enumerate(plan.steps):
        name = s.scheduler.NAME if s.scheduler else "host (reference torch ops)"
        lines.append(f"  segment {i}: {name}; outputs {', '.join(o.name for o in s.outputs)}")
        if s.reason:
            lines.append(f"    declined: {s.reason}")
    return "\n".join(lines)
