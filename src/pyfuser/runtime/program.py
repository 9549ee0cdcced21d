"""The program of one plan at one input fingerprint: ``Program``, and its one ``run``.

The first execute of a fingerprint builds it (``prepare.prepare``): every kernel's
parameters (on the GPU through the spill check), its grid, and every argument that
does not change between executes (sizes, strides, scratch buffers) are computed
once.  Every later execute with that fingerprint is ``Program.run``, a short loop
over a *pool* of values::

    pool = [*inputs, *runtime scalars, *constants, *empty tensors]
    kernel step: allocate its outputs, append them to the pool, pick its arguments
                 from the pool by precomputed index, patch in the random words, launch
    host step:   run its torch calls (``run_expr``) on pool entries, append the results
                 (a host segment's ops, or a reference step: the reference executor's
                 exprs for outputs no scheduler took)
    outputs:     pool entries (views of inputs are rebuilt from the inputs, expanded
                 outputs from their source's entry), then written into aliased
                 inputs and laid out as ``stride_order`` asks (``finish_outputs``)

so a kernel reads an earlier kernel's stored intermediate, or a host step's
result, as it reads a fusion input: by index.  A one-kernel plan is the degenerate
case.  Worked example, ``linear(cast(x * x), w, bias)`` between two kernels, x of
[5, 12] (``linear_between_pointwise`` in ``tests/runtime/general_fusions.py``),
as its ``repr`` prints it (pool parts separated by ``|``; a kernel's arguments in
signature order, the tensors it writes last)::

    Program(cpu): pool [T0 T1 T2 S3 |  | 5 12 5 12 35 5 7 |  | T4 T9 T5 T6 T8]
      kernel pyfuser_f0_k1 (inner_normalization) <- 5 12 5 12 T0 T4 T9 -> T4 T9
      host linear: T5 = cast(T4); T6 = linear(T5, T1, T2)
      kernel pyfuser_f0_k2 (pointwise) <- 35 5 7 T6 S3 T8 -> T8
      outputs T8 T9

``T4`` (the fp16 ``x * x``) is stored at 16 bits and cast again on the host;
``S3``, a runtime scalar input, is read from the pool on every execute.  Random
ops get (seed, offset) per execute as the uncached path draws them: random op k
of the fusion uses offset ``base + k`` in whichever kernel computes it.

Everything that observes or alters a run beyond launching (dumps, the profiler,
poisoned outputs, recorded launches) is a hook (``probe.Probe``) passed to ``run``;
without one, after the first run, a program without host steps runs as one
generated function instead of the loop (``straight_line``): the same steps
unrolled, with every index, shape, stride and dtype a constant and every launch
through the runner chosen for it.  A transformer's training step makes over a
hundred such calls, and the straight line takes about a third off each one's host time (``python -m
pyfuser.bench.host_bench``; docs/TUNING.md#host-time).
"""
from __future__ import annotations

import time
from typing import NamedTuple

import torch

from ..ir.concretize import Binding
from ..reference import run_expr, write_aliases
from .args import rng_words
from .cache import count
from .launch import allocator, direct_launcher, launch_error
from .plan import is_contiguous
from .probe import LaunchMeta, Probe
from .rng_state import draw_seed_offset
from .straight import straight_line


class Launch(NamedTuple):
    """One kernel step of a Program: what stays fixed between executes."""

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
    """A host step of a Program: torch calls on pool entries, each result appended."""

    step: int  # the step's position in the plan (profiles call it host<step>)
    calls: tuple  # (expr, pool index of each of its inputs, random op number or None), in order
    outputs: tuple  # the Vals the calls append, in order


class Program:
    """The launches and host calls of one plan at one input fingerprint (see the module
    docstring); built by ``prepare.prepare``.  ``launches`` are the kernel steps in
    order, ``program`` the steps (an int: ``launches[i]``; a ``HostRun``).  What it
    computes is fixed at construction; what it learns on its first runs is how to
    launch (``direct``, the straight-line function) and whether it was ``used``."""

    def __init__(self, *, device, n_random, scalars, consts, empties, launches, program, results, views,
                 binding, direct_ok, slots, finish=None):
        self.device = device
        self.n_random = n_random  # random ops drawing (seed, offset) per execute
        self.scalars = scalars  # ScalarProgram: the runtime scalars, recomputed per execute
        self._scalar_run = scalars.run if scalars.targets else None
        self._consts = consts
        self._empties = empties  # (shape, dtype) of zero-size values no step writes: fresh per execute
        self.launches = launches
        self.program = program
        self._results = results  # pool index of each output (0 where a view is rebuilt)
        # (output position, Val, broadcast chain) of outputs rebuilt per execute: views
        # of inputs (chain empty) and expands of a pool entry (``segment.aliases.broadcast_chain``)
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
        # (inputs, outputs) -> outputs: aliased outputs written into their inputs,
        # ``stride_order`` layouts (``finish_outputs``); None when the fusion has neither
        self._finish = finish
        # ``run`` without hooks as one generated function (None until built; ``False``
        # where the program has host steps)
        self._straight = None
        self.used = False  # executed since the cache last considered evicting it (``ExecutorCache.remember``)

    def run(self, inputs, hooks: Probe | None = None):
        """One execute: the fusion's outputs for ``inputs`` (which have this program's
        fingerprint).  ``hooks`` observe or alter the run (``probe.Probe``: dumps,
        profile, poisoned outputs, recorded launches); without them, once every
        launch's way of launching is settled, the straight-line version
        (``straight_line``) runs.  Safe to call from several threads at once: the
        pool is the call's own."""
        if hooks is None:
            if self._straight:
                return self._straight(inputs)
            out = self._counted(inputs, None)
            if self._straight is None:
                try:
                    self._straight = straight_line(self)
                except Exception:  # noqa: BLE001 - an optimization: the loop stays correct
                    self._straight = False
            return out
        return self._counted(inputs, hooks)

    def _counted(self, inputs, hooks):
        done = [0]  # launches made, counted once per execute, failed ones too
        try:
            return self._steps(inputs, hooks, done)
        finally:  # the run that prepared the program counts no hits
            count(0 if hooks is not None and hooks.first else len(self.launches), done[0])

    def _steps(self, inputs, hooks, done):
        words = rng = ()
        if self.n_random:  # random op k: offset base + k, its 8 words computed once
            seed, base = draw_seed_offset(self.device, self.n_random)
            words = [rng_words(seed, base + k) for k in range(self.n_random)]
            rng = (seed, base)
        device = self.device
        if self._scalar_run is None:
            pool = [*inputs, *self._consts]
        else:
            pool = [*inputs, *self._scalar_run(inputs), *self._consts]
        if self._empties:
            pool += [self._empty(shape, dtype) for shape, dtype in self._empties]
        launches, direct_map = self.launches, self.direct
        empty = allocator(device)
        for step in self.program:
            if step.__class__ is not int:
                self._host(step, pool, hooks, inputs, rng)
                continue
            src, fn, grid, kw, alloc, idx, words_at, _, meta = launches[step]
            outs = [empty(shape, strides, dtype) for shape, strides, dtype in alloc]
            pool += outs
            args = [pool[j] for j in idx]
            for j, r, w in words_at:
                args[j] = words[r][w]
            try:
                if hooks is None:
                    direct = direct_map.get(step, _UNTRIED)
                    if direct:
                        direct[0](*args, *direct[1])
                    else:
                        fn[grid](*args, **kw)
                        # None (no compiled kernel to be had) is remembered, not retried
                        if direct is _UNTRIED and device.type == "cuda" and self.direct_ok[step]:
                            direct_map[step] = direct_launcher(src, fn, grid, args, kw)
                else:
                    hooks.launch(meta, fn, grid, args, kw, pool, dict(zip(src.outputs, outs)))
            except Exception as err:
                raise launch_error(src, err)
            done[0] += 1
        results = [pool[j] for j in self._results]
        self._rebuild_views(results, inputs)
        return results if self._finish is None else self._finish(inputs, results)

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

    def _host(self, step: HostRun, pool, hooks, inputs, rng):
        """A host step's torch calls; a random op among them (a reference step's) draws
        from the run's (seed, offset) as a kernel computing it would."""
        t0 = time.perf_counter()
        first = len(pool)
        b = self.binding
        for e, idx, rank in step.calls:
            state = None if rank is None else (lambda _e, s=(rng[0], rng[1] + rank): s)
            for o, r in zip(e.outputs, run_expr(e, [pool[j] for j in idx], b, state)):
                pool.append(r.contiguous() if isinstance(r, torch.Tensor) else
                            torch.tensor(r, dtype=o.dtype.torch, device=self.device))
        if hooks is not None:
            hooks.host_step(step.step, dict(zip(step.outputs, pool[first:])), (time.perf_counter() - t0) * 1e3,
                            inputs)

    def __repr__(self):
        names = [n for part in self._slots for n in part]
        lines = [f"Program({self.device}): pool [{' | '.join(' '.join(part) for part in self._slots)}]"]
        for step in self.program:
            if step.__class__ is int:
                src, _, _, _, _, idx, rng, _, meta = self.launches[step]
                words = {j for j, _, _ in rng}
                args = " ".join("rng" if j in words else names[i] for j, i in enumerate(idx))
                outs = " ".join(o.name for o in src.outputs)
                lines.append(f"  kernel {src.name} ({meta.info.scheduler}) <- {args} -> {outs}")
            else:
                calls = "; ".join(f"{', '.join(o.name for o in e.outputs)} = {e.op}({', '.join(names[i] for i in idx)})"
                                  for e, idx, _ in step.calls)
                lines.append(f"  host {step.calls[-1][0].op}: {calls}")
        outs = [names[j] for j in self._results]
        for k, o, chain in self._views:
            outs[k] = f"{'expand' if chain else 'view'}({o.name})"
        lines.append(f"  outputs {' '.join(outs)}")
        return "\n".join(lines)


_UNTRIED = ()  # falsy: no direct launcher tried yet for this launch


# -- outputs rebuilt per execute -------------------------------------------------------------
def expand_output(chain, x, b: Binding):
    """The output the broadcast_in_dim exprs ``chain`` (``segment.aliases.broadcast_chain``) make
    of ``x``, their source's tensor, as the reference builds it: a view of ``x`` with
    stride 0 along the repeated dims."""
    for e in chain:
        x = run_expr(e, [x], b)[0]
    return x


def finish_outputs(ir):
    """The last step of a run of ``ir``'s program, or None where there is none: aliased
    outputs (``add_output(out, alias)``) written into their inputs
    (``reference.write_aliases``), then outputs of ``fd.ops.stride_order`` in the
    memory layout it asks for (``lay_out``)."""
    if not (ir.output_aliases or ir.output_layouts):
        return None

    def finish(inputs, outs):
        outs = write_aliases(ir, inputs, outs) if ir.output_aliases else outs
        return lay_out(ir, outs) if ir.output_layouts else outs

    return finish


def lay_out(ir, outs):
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
