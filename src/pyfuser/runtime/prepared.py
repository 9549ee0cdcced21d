"""The cached program of one plan at one input fingerprint: ``Prepared``.

The first execute of a fingerprint builds it (``prepare``): every kernel's
parameters (on the GPU through the spill check), its grid, and every argument that
does not change between executes (sizes, strides, scratch buffers) are computed
once.  Every later execute with that fingerprint is ``Prepared.run``, a short loop
over a *pool* of values::

    pool = [*inputs, *runtime scalars, *constants, *empty tensors]
    kernel step: allocate its outputs, append them to the pool, pick its arguments
                 from the pool by precomputed index, patch in the random words, launch
    host step:   run its torch calls (``run_expr``) on pool entries, append the results
    outputs:     pool entries (views of inputs are rebuilt from the inputs, expanded
                 outputs from their source's entry)

so a kernel reads an earlier kernel's stored intermediate, or a host step's
result, as it reads a fusion input: by index.  A one-kernel plan is the degenerate
case.  Worked example, ``linear(cast(x * x), w, bias)`` between two kernels, x of
[5, 12] (``linear_between_pointwise`` in ``tests/runtime/general_fusions.py``),
as its ``repr`` prints it (pool parts separated by ``|``; a kernel's arguments in
signature order, the tensors it writes last)::

    Prepared(cpu): pool [T0 T1 T2 S3 |  | 5 12 5 12 35 5 7 |  | T4 T9 T5 T6 T8]
      kernel pyfuser_f0_k1 (inner_normalization) <- 5 12 5 12 T0 T4 T9 -> T4 T9
      host linear: T5 = cast(T4); T6 = linear(T5, T1, T2)
      kernel pyfuser_f0_k2 (pointwise) <- 35 5 7 T6 S3 T8 -> T8
      outputs T8 T9

``T4`` (the fp16 ``x * x``) is stored at 16 bits and cast again on the host;
``S3``, a runtime scalar input, is read from the pool on every execute.  Random
ops get (seed, offset) per execute as the uncached path draws them: random op k
of the fusion uses offset ``base + k`` in whichever kernel computes it.

After the first run without probe, poison or record, a program without host steps
runs as one generated function instead of the loop (``straight_line``): the same
steps unrolled, with every index, shape, stride and dtype a constant and every
launch through the runner chosen for it.  A BERT step makes 152 such calls, and the
straight line takes about a third off each one's host time (``python -m
pyfuser.bench.host_bench``; docs/TUNING.md#host-time).
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple

import torch

from ..codegen.index import div_magic
from ..errors import CompileError
from ..ir.concretize import Binding
from ..ir.extents import ScalarProgram
from ..ir.ops import OPS
from ..ir.shapes import contiguous_strides
from ..ir.values import ScalarVal, TensorVal
from ..reference import run_expr
from .cache import count
from .plan import broadcast_chain, is_contiguous
from .probe import LaunchMeta, Probe
from .rng_state import draw_seed_offset
from .spills import choose_params, scratch_outputs
from .subfusion import bind_sub


class Launch(NamedTuple):
    """One kernel step of a Prepared: what stays fixed between executes."""

    src: object  # codegen KernelSource: name, arguments, constexprs, outputs
    fn: object  # the launchable kernel (Triton's JITFunction, or the interpreter's)
    grid: tuple
    kw: dict  # constexprs, and num_warps on CUDA
    alloc: tuple  # (shape, contiguous strides, dtype) of each output: allocated per execute, appended to the pool
    args: tuple  # pool index of each argument (0 for a random word, patched per execute)
    rng: tuple  # (argument position, random op number, word 0-7) of each random word
    params: object  # the scheduler's params (after the spill check)
    meta: LaunchMeta  # for dumps and profiles: its positions index the pool


class HostRun(NamedTuple):
    """A host step of a Prepared: torch calls on pool entries, each result appended."""

    step: int  # the step's position in the plan (profiles call it host<step>)
    calls: tuple  # (expr, pool index of each of its inputs), in order
    outputs: tuple  # the Vals the calls append, in order


class Prepared:
    """The launches and host calls of one plan at one input fingerprint (see the module
    docstring); built by ``prepare``.  ``launches`` are the kernel steps in order,
    ``program`` the steps (an int: ``launches[i]``; a ``HostRun``)."""

    def __init__(self, *, device, general, n_random, scalars, consts, empties, launches, program, results, views,
                 binding, direct_ok, slots):
        self.device = device
        self.general = general  # the plan reads intermediates or runs torch (dumps take the uncached path)
        self.n_random = n_random  # random ops drawing (seed, offset) per execute
        self.scalars = scalars  # ScalarProgram: the runtime scalars, recomputed per execute
        self._scalar_run = scalars.run if scalars.targets else None
        self._consts = consts
        self._empties = empties  # (shape, dtype) of zero-size values no step writes: fresh per execute
        self.launches = launches
        self.program = program
        self._results = results  # pool index of each output (0 where a view is rebuilt)
        # (output position, Val, broadcast chain) of outputs rebuilt per execute: views
        # of inputs (chain empty) and expands of a pool entry (``plan.broadcast_chain``)
        self._views = views
        self.binding = binding  # shapes, device and input positions (no values)
        # Launch straight through the compiled kernel once it exists (see direct_launcher)
        # when every runtime scalar argument is a float or a bool: Triton passes those as
        # fp32 and i1 whatever the value (and a fingerprint fixes each input's Python
        # type, the IR each computed scalar's).  An int is i32 or i64 by its value, which
        # only Triton's per-call binding reads.
        self.direct_ok = direct_ok
        self.direct: dict = {}  # launch number -> (runner, constexpr values), or None
        self._slots = slots  # names of the pool's slots, by part (inputs, scalars, ...), for repr
        # ``run`` without probe, poison or record, as one generated function (None until
        # built; ``False`` where the program has host steps)
        self._straight = None
        self.used = False  # executed since the cache last considered evicting it (``ExecutorCache.remember``)

    def run(self, inputs, probe: Probe | None = None, poison=False, record=None, hit=True):
        """One execute.  ``poison``: fill outputs with NaN (or the integer maximum)
        before the kernels write them; ``record``: a list each launch appends
        (fn, grid, args, kwargs) to.  Without those three, once every launch's way
        of launching is settled, the straight-line version (``straight_line``) runs.
        ``hit``: count the launches as cache hits (all but the run that prepared it).
        Safe to call from several threads at once: the pool is the call's own."""
        if self._straight and probe is None and not poison and record is None:
            return self._straight(inputs)
        out = self._run(inputs, probe, poison, record, hit)
        if self._straight is None and probe is None and not poison and record is None:
            try:
                self._straight = straight_line(self)
            except Exception:  # noqa: BLE001 - an optimization: the loop stays correct
                self._straight = False
        return out

    def _run(self, inputs, probe: Probe | None = None, poison=False, record=None, hit=True):
        done = [0]  # launches made, counted once per execute, failed ones too
        try:
            return self._steps(inputs, probe, poison, record, done)
        finally:
            count(len(self.launches) if hit else 0, done[0])

    def _steps(self, inputs, probe, poison, record, done):
        words = ()
        if self.n_random:  # random op k: offset base + k, its 8 words computed once
            seed, base = draw_seed_offset(self.device, self.n_random)
            words = [rng_words(seed, base + k) for k in range(self.n_random)]
        device = self.device
        if self._scalar_run is None:
            pool = [*inputs, *self._consts]
        else:
            pool = [*inputs, *self._scalar_run(inputs), *self._consts]
        if self._empties:
            pool += [self._empty(shape, dtype) for shape, dtype in self._empties]
        launches, direct_map = self.launches, self.direct
        empty = _allocator(device)
        for step in self.program:
            if step.__class__ is not int:
                self._host(step, pool, probe, inputs)
                continue
            src, fn, grid, kw, alloc, idx, rng, _, meta = launches[step]
            outs = [empty(shape, strides, dtype) for shape, strides, dtype in alloc]
            if poison:
                for t in outs:
                    poison_tensor(t)
            pool += outs
            args = [pool[j] for j in idx]
            for j, r, w in rng:
                args[j] = words[r][w]
            try:
                if probe is None:
                    direct = direct_map.get(step, _UNTRIED)
                    if direct:
                        direct[0](*args, *direct[1])
                    else:
                        fn[grid](*args, **kw)
                        # None (no compiled kernel to be had) is remembered, not retried
                        if direct is _UNTRIED and device.type == "cuda" and self.direct_ok[step]:
                            direct_map[step] = direct_launcher(src, fn, grid, args, kw)
                else:
                    probe.launch(meta, fn, grid, args, kw, pool, dict(zip(src.outputs, outs)))
            except Exception as err:
                raise launch_error(src, err) from err
            done[0] += 1
            if record is not None:
                record.append((fn, grid, args, kw))
        results = [pool[j] for j in self._results]
        self._rebuild_views(results, inputs)
        return results

    def forget_launchers(self):
        """Drop the direct launchers and the straight-line function, so the next run
        launches through each step's ``fn`` again (``bench.host_bench`` stubs them)."""
        self.direct, self._straight = {}, None

    def _rebuild_views(self, results, inputs):
        for k, o, chain in self._views:
            results[k] = (expand_output(chain, results[k], self.binding) if chain
                          else view_of_input(o, self.binding, inputs))

    def _empty(self, shape, dtype):
        return torch.empty(shape, dtype=dtype, device=self.device)

    def _host(self, step: HostRun, pool, probe, inputs):
        t0 = time.perf_counter()
        first = len(pool)
        b = self.binding
        for e, idx in step.calls:
            pool += [r.contiguous() for r in run_expr(e, [pool[j] for j in idx], b)]
        if probe is not None:
            probe.host_step(step.step, dict(zip(step.outputs, pool[first:])), (time.perf_counter() - t0) * 1e3,
                            inputs)

    def __repr__(self):
        names = [n for part in self._slots for n in part]
        lines = [f"Prepared({self.device}): pool [{' | '.join(' '.join(part) for part in self._slots)}]"]
        for step in self.program:
            if step.__class__ is int:
                src, _, _, _, _, idx, rng, _, meta = self.launches[step]
                words = {j for j, _, _ in rng}
                args = " ".join("rng" if j in words else names[i] for j, i in enumerate(idx))
                outs = " ".join(o.name for o in src.outputs)
                lines.append(f"  kernel {src.name} ({meta.info.scheduler}) <- {args} -> {outs}")
            else:
                calls = "; ".join(f"{', '.join(o.name for o in e.outputs)} = {e.op}({', '.join(names[i] for i in idx)})"
                                  for e, idx in step.calls)
                lines.append(f"  host {step.calls[-1][0].op}: {calls}")
        outs = [names[j] for j in self._results]
        for k, o, chain in self._views:
            outs[k] = f"{'expand' if chain else 'view'}({o.name})"
        lines.append(f"  outputs {' '.join(outs)}")
        return "\n".join(lines)


_UNTRIED = ()  # falsy: no direct launcher tried yet for this launch


def straight_line(prep: Prepared):
    """``prep.run(inputs)`` without probe, poison or record as one generated function,
    the loop over the program unrolled: each output allocated with its shape, strides
    and dtype bound as constants, each launch called with its arguments picked from
    the pool by constant index (random words in place), through its direct launcher
    where it has one (the module docstring says what it saves).  None while a
    launch's way of launching is not settled yet (a direct launcher not tried: after
    the first run on the GPU); ``False`` for a program with host steps (it keeps the
    loop)."""
    direct_map = prep.direct
    steps = list(prep.program)
    if any(step.__class__ is not int for step in steps):
        return False
    if prep.device.type == "cuda" and any(prep.direct_ok[s] and s not in direct_map for s in steps):
        return None
    env = {"ALLOC": _allocator, "DEV": prep.device, "COUNT": count, "launch_error": launch_error,
           "SR": prep._scalar_run, "CONSTS": tuple(prep._consts), "EMPTIES": prep._empties, "SELF": prep}
    lines = ["def straight(inputs):"]
    pool = f"[*inputs{', *SR(inputs)' if prep._scalar_run is not None else ''}{', *CONSTS' if prep._consts else ''}]"
    lines.append(f"    p = {pool}")
    if prep._empties:
        lines.append("    p += [SELF._empty(shape, dtype) for shape, dtype in EMPTIES]")
    if prep.n_random:
        env.update(DRAW=draw_seed_offset, WORDS=rng_words, NR=prep.n_random)
        lines.append("    seed, base = DRAW(DEV, NR)")
        lines.append("    w = [WORDS(seed, base + k) for k in range(NR)]")
    if prep.device.type == "cpu" and _FAST_EMPTY.get("cpu") is not None:
        env["EMPTY"] = _FAST_EMPTY["cpu"]
        lines.append("    empty = EMPTY")
    else:
        lines.append("    empty = ALLOC(DEV)")
    if steps:
        lines.append("    s = None")
        lines.append("    try:")
    srcs = []
    for n, step in enumerate(steps):
        src, fn, grid, kw, alloc, idx, rng, _, _ = prep.launches[step]
        srcs.append(src)
        lines.append(f"        s = {n}")
        for a, (shape, strides, dtype) in enumerate(alloc):
            env[f"A{n}_{a}"] = (tuple(shape), tuple(strides), dtype)
            lines.append(f"        p.append(empty(*A{n}_{a}))")
        args = [f"p[{j}]" for j in idx]
        for j, r, w in rng:
            args[j] = f"w[{r}][{w}]"
        direct = direct_map.get(step)
        if direct:
            env[f"L{n}"], env[f"K{n}"] = direct[0], tuple(direct[1])
            lines.append(f"        L{n}({', '.join(args)}{', ' if args else ''}*K{n})")
        else:
            env[f"F{n}"], env[f"KW{n}"] = fn[grid], dict(kw)
            lines.append(f"        F{n}({', '.join(args)}{', ' if args else ''}**KW{n})")
    env["SRCS"] = tuple(srcs)
    if steps:
        lines.append("    except Exception as err:")
        lines.append("        raise launch_error(SRCS[s], err) from err")
        lines.append(f"    COUNT({len(steps)}, {len(steps)})")
    lines.append(f"    out = [{', '.join(f'p[{j}]' for j in prep._results)}]")
    if prep._views:
        lines.append("    SELF._rebuild_views(out, inputs)")
    lines.append("    return out")
    exec("\n".join(lines), env)  # noqa: S102 - generated from the program's own numbers
    straight = env["straight"]
    straight.source = "\n".join(lines)
    return straight


# -- building --------------------------------------------------------------------------------
def prepare(fd, rt, plan, b: Binding, inputs):
    """The Prepared of ``plan`` for the inputs bound in ``b`` (the plan's steps are
    kernels and host steps only), and each step's params (None for a host step), for
    the scheduler_params dump.  Heuristics run, and kernels are built (on CUDA
    through the spill check, ``choose_params``), once per fingerprint."""
    builder = _Builder(fd.ir, b, inputs)
    chosen = []
    for i, step in enumerate(plan.steps):
        if step.is_host:
            builder.host(i, step)
            chosen.append(None)
        else:
            chosen.append(builder.kernel(rt, step))
    return builder.finish(rt, plan), chosen


def checks_spills(device) -> bool:
    """Whether kernels are compiled ahead of their first launch and checked for
    register spills (``spills.choose_params``): on the GPU."""
    return device.type == "cuda"


def cacheable(plan) -> bool:
    """Whether every step is a kernel or a host step (a reference step runs the whole
    reference executor: such plans take the uncached general path)."""
    return all(s.scheduler is not None or s.is_host for s in plan.steps)


class _Builder:
    """Collects the steps of a Prepared with symbolic references to pool slots
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
        calls = []
        for e in step.host:
            calls.append((e, [self.ref(v) for v in e.inputs]))
            for o in e.outputs:
                self.append(o)
        self.program.append((index, calls, tuple(o for e in step.host for o in e.outputs)))

    def kernel(self, rt, step):
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
        params = sched.heuristics(seg)
        if checks_spills(b.device):
            params, src, fn = choose_params(rt, seg, sched, params, sb, None,
                                            lambda s, p: warmup_args(s, p, sched, seg, sb))
        else:
            src, fn = rt.build(seg, sched, params)
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
        kw = dict(src.constexprs)
        if b.device.type == "cuda":
            kw["num_warps"] = params.num_warps
        alloc = tuple((sb.shapes[o], contiguous_strides(sb.shapes[o]), o.dtype.torch) for o in src.outputs)
        self.kernels.append((src, fn, sched.grid(seg, params), kw, alloc, refs, params))
        self.program.append(len(self.kernels) - 1)
        return params

    def finish(self, rt, plan) -> Prepared:
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
        every = [r for k in self.kernels for r in k[5]] + [r for h in hosts for _, refs in h[1] for r in refs]
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
                        HostRun(step[0], tuple((e, tuple(map(index, refs))) for e, refs in step[1]), step[2])
                        for step in self.program)
        binding = Binding({}, b.shapes, b.device)  # not the first execute's values: they are not kept alive
        binding.input_pos = self.pos
        slots = ([v.name for v in ir.inputs], [v.name for v in scalars.targets], list(map(_const_label, self.consts)),
                 [f"{v.name}(empty)" for v in self.empties], [v.name for v in self.made_vals])
        return Prepared(device=b.device, general=plan.general, n_random=len(self.rank), scalars=scalars,
                        consts=self.consts, empties=tuple((b.shapes[v], v.dtype.torch) for v in self.empties),
                        launches=launches, program=program, results=tuple(map(index, results)), views=views,
                        binding=binding, direct_ok=direct_ok, slots=slots)

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
    """A fusion's values while its Prepared is built: the binding's, and for each
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


# -- arguments ------------------------------------------------------------------------------
def random_exprs(ir):
    """The random ops that draw (seed, offset) per execute, in program order."""
    return [e for e in ir.live_exprs() if OPS[e.op].kind == "random" and not e.attrs["has_seed"]]


def arg_value(a, b: Binding, env, outs, rng_table):
    """The value of kernel argument ``a`` (a codegen KernelArg) from binding ``b``,
    ``env`` (Val -> value), the kernel's output tensors and the random state."""
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
    if kind == "divides":  # the tile's block divides the tensor's element count
        return math.prod(b.shapes[a.source[1]]) % a.source[2] == 0
    if kind == "scalar":
        return env[a.source[1]]
    if kind == "divmagic":
        return div_magic(math.prod(b.shapes[v][d] for v, d in a.source[1]))[a.source[2]]
    if kind == "rng":
        return rng_word(rng_table[id(a.source[1])], a.source[2])
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


def rng_word(seed_offset, i):
    """Word ``i`` of a random op's state (the kernel's ``rng<op>_<i>`` argument)."""
    return rng_words(*seed_offset)[i]


def rng_words(seed, offset) -> tuple:
    """A random op's state as the eight 16-bit words kernels take: the high and low
    halves of the seed's and the offset's low and high 32 bits."""
    words = (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF)
    return tuple(h for w in words for h in ((w >> 16) & 0xFFFF, w & 0xFFFF))


def warmup_args(src, params, sched, seg, b):
    """Arguments for compiling ``src`` ahead of its launch: the real inputs, scratch
    outputs, zero random state (only types and alignment matter to the compiler)."""
    outs = scratch_outputs(src, b)
    args = [arg_value(a, b, b.values, outs, {id(a.source[1]): (0, 0)} if a.kind == "rng" else {}) for a in src.args]
    kw = dict(src.constexprs)
    kw["num_warps"] = params.num_warps
    return args, sched.grid(seg, params), kw


def direct_launcher(src, fn, grid, args, kw):
    """(runner, constexpr values) that launch the kernel Triton compiled for these
    arguments without its per-call argument binding and cache lookup (about half of a
    small launch's host time).  Safe because a Prepared is specific to its inputs'
    dtypes, shapes, strides and 16-byte alignment, its integer arguments are
    constants, and outputs, intermediates and host results come fresh from torch's
    allocator (aligned).  None if the compiled kernel cannot be had; the JIT path is
    used then."""
    try:
        k = fn.run(*args, grid=grid, warmup=True, **kw)
        g = tuple(grid) + (1,) * (3 - len(grid))
        consts = [kw[name] for name in src.constexprs]
        launcher = k.run  # the CUDA launcher (loads the module on first use)
        if launcher.global_scratch_size or launcher.profile_scratch_size:
            return k[g], consts  # Triton's own runner allocates the scratch
        device = next((a.device.index for a in args if isinstance(a, torch.Tensor)), None)
        return _raw_launch(launcher, k, g, device), consts
    except Exception:
        return None


def _raw_launch(launcher, k, grid, device_index):
    """A launch of compiled kernel ``k`` on ``grid`` through Triton's C launcher with
    everything but the stream and the arguments fixed: Triton's runner looks up the
    device and the stream and builds launch metadata on every call (about 5 us of a
    launch's host time).  While a launch hook is installed (a profiler's), Triton's
    runner runs instead, so the hook sees every launch; a kernel needing global or
    profiling scratch keeps that runner (``direct_launcher``)."""
    from triton import knobs

    hooks = knobs.runtime
    slow = k[grid]
    launch, function, packed = launcher.launch, k.function, k.packed_metadata
    coop, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
    gx, gy, gz = grid
    stream_of = torch._C._cuda_getCurrentRawStream
    dev = torch.cuda.current_device() if device_index is None else device_index

    def run(*args):
        if not (_hook_set(hooks.launch_enter_hook) or _hook_set(hooks.launch_exit_hook)):
            launch(gx, gy, gz, stream_of(dev), function, coop, pdl, None, None, packed, None, None, None, *args)
        else:
            slow(*args)

    return run


def _hook_set(hook) -> bool:
    """Whether a Triton launch hook is installed: Triton 3.6 keeps each hook as a
    ``HookChain`` that is never None, empty until someone adds a hook (a check for
    None alone sent every launch through the slow runner)."""
    return hook is not None and bool(getattr(hook, "calls", True))


_GUARDS = getattr(torch._C, "_dynamo", None) and getattr(torch._C._dynamo, "guards", None)
_FAST_EMPTY = {kind: getattr(_GUARDS, f"_empty_strided_{kind}", None) for kind in ("cpu", "cuda")}


def _allocator(device):
    """``empty(shape, strides, dtype)`` for a run's outputs: the C++ entry point that
    Inductor's generated code allocates with, for the CPU and the current CUDA device
    (no Python argument parsing: 0.5 against 1.3 us per tensor on the CPU machine; a
    BERT step allocates about 760), else ``torch.empty_strided`` (itself about 1 us
    less than ``torch.empty``, which adds a memory-format step)."""
    fast = _FAST_EMPTY.get(device.type)
    if fast is not None and (device.type == "cpu" or device.index == _current_cuda_device()):
        return fast
    return lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype, device=device)


# The current CUDA device without ``torch.cuda.current_device``'s lazy-init check (a
# Prepared exists on a GPU only after CUDA ran there).
_current_cuda_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def launch_error(src, err) -> CompileError:
    if isinstance(err, CompileError):
        return err
    return CompileError(f"pyfuser: kernel {src.name} failed to compile or run: {type(err).__name__}: {err}")


def poison_tensor(t: torch.Tensor):
    """Fill an output before its kernel runs, so an element no kernel writes shows."""
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max)


def expand_output(chain, x, b: Binding):
    """The output the broadcast_in_dim exprs ``chain`` (``plan.broadcast_chain``) make
    of ``x``, their source's tensor, as the reference builds it: a view of ``x`` with
    stride 0 along the repeated dims."""
    for e in chain:
        x = run_expr(e, [x], b)[0]
    return x


def view_of_input(o, b: Binding, inputs):
    """Output ``o``, a chain of reshape/squeeze/permute of an input, as a torch view."""
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
