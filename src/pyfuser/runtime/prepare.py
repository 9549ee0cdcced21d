"""Building a ``Program`` (``prepare``): the steps of a plan at one input fingerprint
with symbolic references to pool slots, then the pool's layout (see ``program``'s
module docstring for the pool and a worked example).  Every step of every plan has
a form here: a kernel, a host segment's torch calls, or a reference step (the
reference executor's exprs for outputs no scheduler took) as host calls.
"""
from __future__ import annotations

import torch

from ..ir.concretize import Binding
from ..ir.extents import ScalarProgram
from ..ir.shapes import contiguous_strides
from ..ir.values import ScalarVal, TensorVal
from ..segment.aliases import broadcast_chain
from ..segment.subfusion import bind_sub, needed_exprs
from .args import arg_value, launch_kw, random_exprs, warmup_args
from .phases import timed
from .plan import KernelKey
from .probe import LaunchMeta
from .program import HostRun, Launch, Program, finish_outputs
from .spills import choose_params


@timed("prepare")
def prepare(fd, rt, plan, b: Binding, inputs):
    """The Program of ``plan`` for the inputs bound in ``b``, and each step's params
    (None for a host or reference step), for the scheduler_params dump.  Heuristics
    run, and kernels are built (on CUDA through the spill check, ``choose_params``),
    once per fingerprint."""
    builder = _Builder(fd.ir, b, inputs)
    chosen = []
    for i, step in enumerate(plan.steps):
        if step.is_host:
            builder.host(i, step)
            chosen.append(None)
        elif step.scheduler is None:
            builder.reference(i, step)
            chosen.append(None)
        else:
            chosen.append(builder.kernel(rt, step, plan.signature))
    return builder.finish(rt, plan), chosen


def checks_spills(device) -> bool:
    """Whether kernels are compiled ahead of their first launch and checked for
    register spills (``spills.choose_params``): on the GPU."""
    return device.type == "cuda"


def _built(rt, seg, sched, params, sig, b):
    """(params, source, kernel) for ``params``: on CUDA the spill check may move to the
    scheduler's next candidate."""
    if checks_spills(b.device):
        return choose_params(rt, seg, sched, params, sig, b, None, lambda s, p: warmup_args(s, p, sched, seg, b))
    return (params, *rt.build(seg, sched, params, sig))


class _Builder:
    """Collects the steps of a Program with symbolic references to pool slots
    (``("input", position)``, ``("made", n)``: the n-th value a step appends,
    ``("val", scalar)``, ``("const", n)``, ``("empty", n)``, ``("rng", op, word)``), then
    ``finish`` lays out the pool and turns them into indices."""

    def __init__(self, ir, b: Binding, inputs):
        self.ir, self.b = ir, b
        self.pos = {v: i for i, v in enumerate(ir.inputs)}
        scalar_pos = {v: p for v, p in self.pos.items() if isinstance(v, ScalarVal)}
        # Scalar inputs given as Python numbers go to kernels as they are; the other
        # scalars steps read (0-d tensor inputs, arithmetic on scalar inputs) come from
        # the ScalarProgram, or are constants.
        self.as_tensor = {p for p in scalar_pos.values() if isinstance(inputs[p], torch.Tensor)}
        self.as_given = {v for v, p in scalar_pos.items() if p not in self.as_tensor}
        self.input_types = [type(x) for x in inputs]
        self.rank = {id(e): k for k, e in enumerate(random_exprs(ir))}
        self.env = _Placeholders(b)
        self.made: dict = {}  # Val -> n: the n-th value appended to the pool (the last writer wins)
        self.made_vals: list = []
        self.consts, self.empties = [], {}
        self.kernels, self.program = [], []

    def ref(self, v):
        p = self.pos.get(v)
        if p is not None and (isinstance(v, TensorVal) or v in self.as_given):
            return ("input", p)
        if not isinstance(v, TensorVal):
            return ("val", v)
        if v in self.made:
            return ("made", self.made[v])
        return ("empty", self.empties.setdefault(v, len(self.empties)))  # zero-size: no step writes it

    def const(self, x):
        self.consts.append(x)
        return ("const", len(self.consts) - 1)

    def append(self, v):
        self.made[v] = len(self.made_vals)
        self.made_vals.append(v)

    def host(self, index, step):
        self._calls(index, step.host)

    def reference(self, index, step):
        """A step no scheduler took: the reference executor's exprs that compute its
        outputs from what is known by then (inputs, scalars, earlier steps' results),
        random ones drawing the run's (seed, offset) as a kernel would."""
        known = set(self.b.values) | set(self.made)
        self._calls(index, needed_exprs(step.outputs, known))

    def _calls(self, index, exprs):
        calls = []
        for e in exprs:
            calls.append((e, [self.ref(v) for v in e.inputs], self.rank.get(id(e))))
            for o in e.outputs:
                self.append(o)
        self.program.append((index, calls, tuple(o for e in exprs for o in e.outputs)))

    def kernel(self, rt, step, sig):
        b, sf, sched = self.b, step.sub, step.scheduler
        if sf is None:
            sb, seg = b, rt.segment(b, step.outputs)
            orig = rexpr = lambda x: x  # noqa: E731
        else:
            sb = bind_sub(sf, b, self.env)
            # the subfusion's copies of scalar arithmetic: the values binding evaluated
            sb.values.update((c, b.values[o]) for c, o in sf.orig.items()
                             if isinstance(c, ScalarVal) and c not in sb.values)
            seg, orig = rt.sub_segment(b, sf), sf.orig.__getitem__
            rexpr = lambda e: sf.exprs[id(e)]  # noqa: E731
        params = sched.settle(seg, sched.heuristics(seg), rt.constants_met.setdefault(KernelKey.of(sched, seg, sig),
                                                                                          set()))
        params, src, fn = _built(rt, seg, sched, params, sig, sb)
        first = len(self.made_vals)
        refs = []
        for a in src.args:
            kind = a.source[0]
            if kind in ("tensor", "scalar"):
                refs.append(self.ref(orig(a.source[1])))
            elif kind == "output":
                refs.append(("made", first + src.outputs.index(a.source[1])))
            elif kind == "rng":
                refs.append(("rng", self.rank[id(rexpr(a.source[1]))], a.source[2]))
            else:  # sizes, strides, element counts, scratch buffers: fixed by the fingerprint
                refs.append(self.const(arg_value(a, sb, sb.values, {}, {})))
        for o in src.outputs:
            self.append(orig(o))
        kw = launch_kw(src, params, b.device.type == "cuda")
        alloc = tuple((sb.shapes[o], contiguous_strides(sb.shapes[o]), o.dtype.torch) for o in src.outputs)
        self.kernels.append((src, fn, sched.grid(seg, params), kw, alloc, refs, params))
        self.program.append(len(self.kernels) - 1)
        return params

    def finish(self, rt, plan) -> Program:
        ir, b = self.ir, self.b
        results, views = [], []
        for k, o in enumerate(ir.outputs):
            kind = plan.aliases.get(k)
            if kind == "view":
                views.append((k, o, ()))
            if kind == "expand":
                x, chain = broadcast_chain(o)
                views.append((k, o, tuple(chain)))
                results.append(("input", self.pos[x]) if x in ir.inputs else self.ref(x))
            else:
                results.append(("input", 0) if kind == "view" else
                               ("input", self.pos[o]) if kind == "input" else self.ref(o))
        hosts = [step for step in self.program if not isinstance(step, int)]
        every = [r for k in self.kernels for r in k[5]] + [r for h in hosts for _, refs, _ in h[1] for r in refs]
        every += results
        scalars = ScalarProgram(ir, [r[1] for r in every if r[0] == "val"], b.values, self.as_tensor)
        index = self._layout(scalars, every)
        launches, direct_ok = [], []
        for src, fn, grid, kw, alloc, refs, params in self.kernels:
            idx = tuple(index(r) for r in refs)
            rng = tuple((j, r[1], r[2]) for j, r in enumerate(refs) if r[0] == "rng")
            reads = tuple(sorted({i for a, i in zip(src.args, idx) if a.kind == "ptr" and a.source[0] == "tensor"}))
            launches.append(Launch(src, fn, grid, kw, alloc, idx, rng, params,
                                   LaunchMeta(rt.kernel_info[src.name], reads)))
            direct_ok.append(all(self._runtime_type(r, scalars) in (float, bool) for r in refs))
        program = tuple(step if isinstance(step, int) else
                        HostRun(step[0], tuple((e, tuple(map(index, refs)), rank) for e, refs, rank in step[1]),
                                step[2])
                        for step in self.program)
        binding = Binding({}, b.shapes, b.device)  # not the first execute's values: they are not kept alive
        binding.input_pos = self.pos
        slots = ([v.name for v in ir.inputs], [v.name for v in scalars.targets], list(map(_const_label, self.consts)),
                 [f"{v.name}(empty)" for v in self.empties], [v.name for v in self.made_vals])
        return Program(device=b.device, n_random=len(self.rank), scalars=scalars,
                        consts=self.consts, empties=tuple((b.shapes[v], v.dtype.torch) for v in self.empties),
                        launches=launches, program=program, results=tuple(map(index, results)), views=views,
                        binding=binding, direct_ok=direct_ok, slots=slots, finish=finish_outputs(ir))

    def _layout(self, scalars, refs):
        """The pool index of a symbolic reference: ``[*inputs, *runtime scalars,
        *constants, *empty tensors, *what steps append]``.  A scalar that no
        ScalarProgram target gives (a constant, an extent, arithmetic on those) becomes
        a constant first, so the layout is final."""
        slot = {v: k for k, v in enumerate(scalars.targets)}
        fixed = {}
        for r in refs:
            if r[0] == "val" and r[1] not in slot and r[1] not in fixed:
                fixed[r[1]] = self.const(self.b.values[r[1]])[1]
        n_in, n_sc = len(self.ir.inputs), len(slot)
        start = {"input": 0, "scalar": n_in, "const": n_in + n_sc, "empty": n_in + n_sc + len(self.consts)}
        start["made"] = start["empty"] + len(self.empties)

        def index(r):
            kind, k = r[0], r[1]
            if kind == "val":
                kind, k = ("scalar", slot[k]) if k in slot else ("const", fixed[k])
            return start[kind] + k if kind != "rng" else 0  # a random word: patched in per execute

        return index

    def _runtime_type(self, r, scalars):
        """The Python type of an argument that can change between executes (float for
        tensors and for anything fixed)."""
        if r[0] == "input":
            t = self.input_types[r[1]]
            return float if issubclass(t, torch.Tensor) else t
        if r[0] == "val" and r[1] in scalars.targets:
            return type(self.b.values[r[1]])
        return float


def _const_label(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"scratch{list(x.shape)}"
    return repr(x)


class _Placeholders(dict):
    """A fusion's values while its Program is built: the binding's, and for each
    intermediate a tensor of its shape and dtype with no memory (a zero-stride view of
    one element).  Subfusion bindings and the compiler's warm-up read only their
    shapes, dtypes and alignment (intermediates are contiguous: no strides are read)."""

    def __init__(self, b: Binding):
        super().__init__(b.values)
        self.b = b

    def __missing__(self, v):
        t = torch.empty((), dtype=v.dtype.torch, device=self.b.device).expand(self.b.shapes[v])
        self[v] = t
        return t
