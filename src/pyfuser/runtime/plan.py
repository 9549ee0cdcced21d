"""Planning: from an input signature to the segments of a fusion and their kernels.

``ExecutorCache`` (one per FusionDefinition) maps an input *signature* (device kind,
which dims are size 1, which inputs are contiguous, 16-byte alignment, index width,
normalised slice bounds) to a ``Plan``: which outputs alias inputs or expand another
value (``Plan.aliases``), and the segments
(``Step``) with their schedulers.  It also owns the definition's kernels, keyed by
(scheduler, outputs, signature, params), and remembers for dumps and profiles why
each was built (``events``) and what it cost (``kernel_info``).  How a fusion becomes
segments (host-op stages, ``split``, ``merge``, ``narrow``): docs/SEGMENTATION.md.
"""
from __future__ import annotations

import heapq
import math
import os
import sys
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, replace

import torch

from ..errors import CacheDirError, CompileError, DependencyError, EagerFallbackWarning
from ..ir.concretize import Binding
from ..ir.shapes import slice_shape
from ..codegen.writer import KernelArg
from ..ir.values import Expr, TensorVal, Val
from ..schedulers import SCHEDULERS, Segment, current_choices
from ..segment.steps import Plan, Step, make_step, step_reads
from ..segment.subfusion import SubFusion, needed_exprs, subfusion
from . import dump
from ..ir.ops import OPS, runs_on_host
from .cache import count, load_kernel, setting
from .probe import KernelInfo

VIEW_OPS = ("reshape", "squeeze", "permute")
# Failed merge attempts (each emits a kernel that is then thrown away) after which a
# plan stops merging.
MERGE_LOSSES = 6
PREPARED_SIZES_DEFAULT = 64


class ExecutorCache:
    def __init__(self, fd):
        self.fd = fd
        self.plans: dict = {}
        self.kernel_counter = 0
        self.fresh: set = set()
        # input fingerprint -> Prepared, oldest first, at most PYFUSER_PREPARED_SIZES
        # (``remember``)
        self.prepared: OrderedDict = OrderedDict()
        # Held by whatever plans, builds or prepares (the first execute of a
        # fingerprint): those mutate this cache.  A cached execute takes no lock.
        self.lock = threading.RLock()
        self.spill_choice: dict = {}  # (scheduler, outputs, signature, heuristics' params) -> params that do not spill
        self.kernels: dict = {}  # (scheduler, outputs, signature, params) -> (KernelSource, kernel)
        self.refused: dict = {}  # while planning: (outputs, loads) -> why no scheduler took them
        # (scheduler, outputs, signature, heuristics' params) -> the Rejects of the spill check, in order
        self.spill_rejections: dict = {}
        # For dumps and the profiler:
        self.kernel_info: dict = {}  # kernel name -> probe.KernelInfo
        self.events: list = []  # this execute's cache story (PYFUSER_DUMP=cache), first line the verdict
        self.sig_labels: list = []  # what each part of the last signature() means
        self.last_metas: list = []  # LaunchMeta of the launches the last execute ran
        self.definition_dumped = False
        self.ptx_noted: set = set()

    def remember(self, key, prep):
        """Cache ``prep`` for fingerprint ``key`` within ``PYFUSER_PREPARED_SIZES``
        (default 64): a fusion run at ever new sizes keeps the recently used ones (the
        others re-prepare, reusing the plan and its kernels).  The rule is least
        recently used, approximated by a second chance (CLOCK): the oldest entry goes,
        unless it was used since it was last looked at (a hit sets ``Prepared.used``),
        which sends it to the back instead.  A hit thus costs one attribute store, not
        a second hash of its fingerprint to reorder the dict."""
        self.prepared[key] = prep
        self.prepared.move_to_end(key)
        keep = setting("PYFUSER_PREPARED_SIZES", PREPARED_SIZES_DEFAULT)
        while len(self.prepared) > keep:
            old, entry = next(iter(self.prepared.items()))
            if entry.used and entry is not prep:
                entry.used = False
                self.prepared.move_to_end(old)
            else:
                del self.prepared[old]

    # -- signature -------------------------------------------------------------------
    def signature(self, b: Binding, live):
        parts, labels = [b.device.type], ["device"]
        for v in self.fd.ir.inputs:
            if isinstance(v, TensorVal):
                x = b.values[v]
                contiguous = is_contiguous(x)
                parts.append((contiguous, x.data_ptr() % 16 == 0, None if contiguous else unit_stride_dim(x)))
                labels.append(f"input {v.name} (contiguous, 16-byte aligned, unit-stride dim)")
        for e in live:
            for o in e.outputs:
                if isinstance(o, TensorVal):
                    parts.append(tuple(s == 1 for s in b.shapes[o]))
                    labels.append(f"{o.name} size-1 dims")
            if e.op == "slice":
                parts.append(tuple(slice_shape(e.op, b.shapes[e.inputs[0]], e.attrs["starts"], e.attrs["ends"],
                                               e.attrs["steps"])[1]))
                labels.append(f"{e.outputs[0].name} slice bounds")
        for v in self.fd.ir.inputs:
            if isinstance(v, TensorVal):
                parts.append(tuple(s == 1 for s in b.shapes[v]))
                labels.append(f"input {v.name} size-1 dims")
        parts.append(any(math.prod(s) > 2**30 for s in b.shapes.values()))
        labels.append("int64 indexing")
        parts.append(current_choices().key)  # two Choices never share a plan (nor its kernels: ``build``)
        labels.append("scheduler choices")
        self.sig_labels = labels
        return tuple(parts)

    def explain_signature(self, sig) -> str:
        if not self.plans:
            return "new input signature (first execute of this fusion)"
        last = list(self.plans)[-1]
        diffs = [(label, f"{label} {a} -> {b}") for label, a, b in zip(self.sig_labels, last, sig) if a != b]
        shown = [d for label, d in diffs if not label.startswith("T")]  # inputs, device, index width first
        derived = [d for label, d in diffs if label.startswith("T")]  # intermediate tensors follow the inputs
        shown += derived[:2] + ([f"{len(derived) - 2} more intermediate tensors"] if len(derived) > 2 else [])
        return f"new input signature ({len(self.plans)} cached); differs from the last one in: {'; '.join(shown)}"

    def segment(self, b: Binding, outputs) -> Segment:
        info = {v: layout_info(b.values[v]) for v in self.fd.ir.inputs if isinstance(v, TensorVal)}
        return Segment(list(outputs), b.shapes, info, b.device.type)

    def sub_segment(self, b: Binding, sf: SubFusion) -> Segment:
        """The segment of a subfusion: fusion inputs keep their layout, intermediates
        are contiguous (the runtime allocates them)."""
        info = {}
        for c in sf.ir.inputs:
            if isinstance(c, TensorVal):
                o = sf.orig[c]
                info[c] = layout_info(b.values[o]) if o in b.values else {"contiguous": True, "rows_aligned": False}
        shapes = {c: b.shapes[o] for c, o in sf.orig.items() if isinstance(c, TensorVal) and o in b.shapes}
        return Segment(list(sf.ir.outputs), shapes, info, b.device.type)

    def step_segment(self, b: Binding, step) -> Segment | None:
        if step.is_host:
            return None
        return self.segment(b, step.outputs) if step.sub is None else self.sub_segment(b, step.sub)

    # -- planning ----------------------------------------------------------------------
    def make_plan(self, b: Binding) -> Plan:
        """Host ops cut the fusion into stages: the kernels whose values depend on no
        host op, then the first host op, then the kernels that depend on it, ...
        Each stage's targets (fusion outputs and the next host ops' inputs) go to
        ``split``, which cuts further at reductions when no scheduler takes them;
        ``refine`` then merges kernels and narrows what they store for each other."""
        ir = self.fd.ir
        self.refused = {}
        aliases = {}
        rest = []
        for pos, o in enumerate(ir.outputs):
            if o in ir.inputs:
                aliases[pos] = "input"
            elif _is_view_of_input(o, ir):
                aliases[pos] = "view"
            elif (x := expanded_source(o, b)) is not None:
                aliases[pos] = "expand"
                if x not in ir.inputs and x not in rest:
                    rest.append(x)
            elif o not in rest:
                rest.append(o)
        live = ir.live_exprs()
        hosts = [e for e in live if runs_on_host(e)]
        cuts = frozenset(v for v in ir.inputs if isinstance(v, TensorVal))
        keep = set(ir.outputs) | set(rest)  # what the steps must store
        if not hosts:
            return _warn_eager(self.fd, Plan(aliases, self.refine(
                b, self.split(b, [o for o in rest if _nonempty(b, o)], cuts, cuts), cuts, keep)))
        base = cuts
        cuts = cuts | {o for h in hosts for o in h.outputs}
        level = _host_levels(live, hosts)
        stages = [[] for _ in range(len(hosts) + 1)]
        host_runs = []
        for h in hosts:
            run = []
            for v in h.inputs:
                v, casts = _narrow(v, cuts)
                run += [c for c in casts if c not in run]
                if v not in cuts and _nonempty(b, v) and v not in stages[level[v] + 1]:
                    stages[level[v] + 1].append(v)
            host_runs.append(run + [h])
        for o in rest:
            if o not in cuts and _nonempty(b, o) and o not in stages[level[o] + 1]:
                stages[level[o] + 1].append(o)
        steps = self.split(b, stages[0], cuts, base)
        for h, run, stage in zip(hosts, host_runs, stages[1:]):
            steps.append(Step([o for e in run for o in e.outputs], None, f"host op {h.op}", host=run))
            steps += self.split(b, stage, cuts, base)
        return _warn_eager(self.fd, Plan(aliases, self.refine(b, steps, base, keep)))

    def try_schedule(self, b, outputs, cuts=None, base=None):
        sf = None
        if cuts is None or cuts == base:
            seg = self.segment(b, outputs)
        else:
            sf = subfusion(outputs, cuts)
            seg = self.sub_segment(b, sf)
        # The same group from the same loads: refused once, refused again (merging
        # retries groups ``split`` already tried).
        key = (frozenset(outputs), None if sf is None else frozenset(sf.orig[c] for c in sf.ir.inputs))
        if key in self.refused:
            return None, self.refused[key]
        reasons = []
        for sched in current_choices().schedulers(SCHEDULERS):
            rej = sched.can_schedule(seg)
            if rej is None:
                params = sched.heuristics(seg)
                rej = sched.can_schedule_runtime(seg, params)
            if rej is not None:
                reasons.append(rej.by(sched.NAME))
                continue
            self.build(seg, sched, params)
            step = make_step(outputs, sched, reasons)
            step.sub = sf
            return step, reasons
        self.refused[key] = reasons
        return None, reasons

    def split(self, b, outputs, cuts=None, base=None):
        """Steps that compute ``outputs`` from ``cuts``: one kernel if some scheduler
        takes them all; else kernels per output shape; what still fails is cut at its
        first reductions (stored by their own kernels, loaded by the rest).  A single
        output no scheduler takes and no cut helps becomes a host (reference) step."""
        if not outputs:
            return []
        step, reasons = self.try_schedule(b, outputs, cuts, base)
        if step is not None:
            return [step]
        steps, failing = [], list(outputs)
        groups: dict = {}
        for o in outputs:
            groups.setdefault(b.shapes[o], []).append(o)
        if len(groups) > 1:
            failing = []
            for g in groups.values():
                s, _ = self.try_schedule(b, g, cuts, base)
                if s is not None:
                    steps.append(s)
                else:
                    failing += g
            if not failing:
                return steps
        if cuts is not None:
            first = _first_reductions(failing, cuts)
            rest = [o for o in failing if o not in first]
            if first and (rest or len(first) < len(failing)):
                return steps + self.split(b, first, cuts, base) + self.split(b, rest, cuts | set(first), base)
        if len(failing) == 1:
            if steps:
                return steps + self.split(b, failing, cuts, base)
            return [make_step(failing, None, reasons)]
        return steps + [s for o in failing for s in self.split(b, [o], cuts, base)]

    # -- merging and narrowing (docs/SEGMENTATION.md) -------------------------------------
    def refine(self, b, steps, base, keep):
        """The plan's steps after ``split``: merged, then narrowed (``base``: the fusion's
        tensor inputs; ``keep``: the values the plan returns)."""
        if sum(s.scheduler is not None for s in steps) < 2:
            return steps
        return self.narrow(b, self.merge(b, steps, base, keep), base, keep)

    def merge(self, b, steps, base, keep):
        """Greedy merging: ``split`` decides group by group, so a plan can hold kernels
        that one kernel could replace (a side output, shape groups one scheduler takes
        together, reductions over the same axes on both sides of a cut).  Pairs of
        kernel steps are tried best first (``_Flow.candidates``); a merge is kept when
        a scheduler takes the union and the steps still have a topological order.  The
        merged step stores only what the fusion or another step reads.  An attempt
        that reaches a scheduler's ``emit`` generates a kernel, so a plan gives up
        after MERGE_LOSSES refusals."""
        tried, losses = set(), 0
        while True:
            flow = _Flow(steps, keep)
            for i, j in flow.candidates(b):
                outputs, reads = flow.union(i, j)
                key = (frozenset(outputs), frozenset(reads))
                if key in tried or flow.order(i, j, Step(outputs, None), reads) is None:
                    continue
                tried.add(key)
                step, _ = self.try_schedule(b, outputs, base | _tensors(reads), base)
                merged = step and flow.order(i, j, step, step_reads(step))
                if merged:
                    steps = merged
                    break
                losses += 1
                if losses == MERGE_LOSSES:
                    return steps
            else:
                return steps

    def narrow(self, b, steps, base, keep):
        """A value a kernel stores only for other kernels that is an upcast of a 16-bit
        value is stored at 16 bits, and its readers recompute the cast (``_narrow``
        does the same for host ops' inputs).  The cast is exact, so every result keeps
        its bits.  The change is kept only when schedulers take the rebuilt steps."""
        done = set()
        while True:
            flow = _Flow(steps, keep)
            found = next(((p, x, u) for p, x, u in flow.upcasts(base) if x not in done), None)
            if found is None:
                return steps
            done.add(found[1])
            steps = self._store_narrow(b, flow, *found, base) or steps

    def _store_narrow(self, b, flow, p, x, u, base):
        new = list(flow.steps)
        for k, r in enumerate(flow.reads):
            if x in r:
                new[k], _ = self.try_schedule(b, new[k].outputs, base | _tensors(r - {x}) | {u}, base)
                if new[k] is None:
                    return None
        outputs = [o for o in new[p].outputs if o is not x]
        if u not in flow.reads[p] and u not in base and u not in outputs:
            outputs.append(u)  # else the readers load u from where the producer does
        if outputs:
            new[p], _ = self.try_schedule(b, outputs, base | _tensors(flow.reads[p]), base)
            if new[p] is None:
                return None
        return [s for k, s in enumerate(new) if outputs or k != p]

    # -- kernels -----------------------------------------------------------------------
    def build(self, seg, sched, params):
        key = (sched.NAME, tuple(o.index for o in seg.outputs), self._current_sig, params,
               tuple(sorted(v.index for v in seg.inputs_info)))
        hit = self.kernels.get(key)
        if hit is not None:
            if key in self.fresh:  # built while planning this very execute
                self.fresh.discard(key)
            else:
                count(hits=1)
                info = self.kernel_info[hit[0].name]
                self.events.append(f"kernel{info.number} {info.name} ({sched.NAME}): hit (same scheduler, "
                                   f"signature and params)")
            return rebound(hit, seg)
        count(misses=1)
        reason = self._miss_reason(key)
        self.fresh.add(key)
        self.kernel_counter += 1
        name = f"pyfuser_f{self.fd.id}_k{self.kernel_counter}"
        t0 = time.perf_counter()
        try:
            src = sched.emit(seg, params, name)
        except Exception as err:  # a scheduler that cannot emit what its checks accepted is our bug
            raise CompileError(f"pyfuser: {sched.NAME} failed to generate kernel {name} with {params!r}: "
                               f"{type(err).__name__}: {err}") from err
        if dump.dumping("kernel_code"):
            dump.emit(f"===== kernel {name} ({sched.NAME}) =====\n{src.source}")
        try:
            fn = load_kernel(name, src.source, seg.device_type)
        except (CacheDirError, DependencyError):  # the user's setup, not our bug: no repro
            raise
        except Exception as err:  # a generated kernel that does not import is our bug
            raise CompileError(f"pyfuser: generated kernel {name} failed to load: {type(err).__name__}: {err}") \
                from err
        ms = (time.perf_counter() - t0) * 1e3
        count(kernels_compiled=1)
        self.kernels[key] = (src, fn)
        self.kernel_info[name] = KernelInfo(name, self.kernel_counter, sched.NAME, params, ms)
        self.events.append(f"kernel{self.kernel_counter} {name} ({sched.NAME}): miss, compiled in {ms:.1f} ms: "
                           f"{reason}")
        return src, fn

    def _miss_reason(self, key) -> str:
        same_sig = [k[3] for k in self.kernels if k[:3] == key[:3]]
        if same_sig:
            return f"new heuristics: params {key[3]!r} (cached for this segment and signature: {same_sig[-1]!r})"
        if any(k[:2] == key[:2] for k in self.kernels):
            return "new input signature for this segment"
        return "first kernel for this segment"


def rebound(hit, seg):
    """A cached kernel for ``seg``: the same compiled function, its arguments naming
    ``seg``'s own values.  The cache key (outputs and loaded values, by number) is the
    same for every copy of one subfusion, and planning makes several copies (each
    ``try_schedule`` of a group on cuts clones it); a kernel built for one copy names
    that copy's values, which the binding of another lacks.  Values keep their
    numbers in every copy, so they are matched by number."""
    src, fn = hit
    if not src.outputs or src.outputs[0] is seg.outputs[0]:
        return hit
    vals, exprs = {}, {}
    for e in seg.exprs():
        exprs[e.outputs[0].index] = e
        for v in list(e.inputs) + list(e.outputs):
            vals[v.index] = v
    vals.update((v.index, v) for v in list(seg.inputs_info) + list(seg.outputs))

    def remap(x):
        if isinstance(x, Val):
            return vals.get(x.index, x)
        if isinstance(x, Expr):
            return exprs.get(x.outputs[0].index, x)
        if isinstance(x, tuple):
            return tuple(remap(y) for y in x)
        return x

    args = [KernelArg(a.name, a.kind, remap(a.source)) for a in src.args]
    return replace(src, args=args, outputs=[remap(o) for o in src.outputs]), fn


_WARNED: set = set()  # the causes (schedulers' rejection codes) already warned about


def _warn_eager(fd, plan: Plan) -> Plan:
    """Warn, once per cause, about each segment that runs as torch ops because no
    scheduler accepted it (host ops run in torch by design and are not warned about)."""
    for step in plan.steps:
        if step.scheduler is not None or step.is_host:
            continue
        cause = tuple((r.scheduler, r.code) for r in step.declined)
        if cause in _WARNED:
            continue
        _WARNED.add(cause)
        codes = ", ".join(f"{n}: {c}" for n, c in cause)
        outs = ", ".join(o.name for o in step.outputs)
        warnings.warn(f"pyfuser: fusion{fd.id}: the segment computing {outs} runs as torch ops, no scheduler "
                      f"accepted it ({codes}); fd.explain(inputs) says why", EagerFallbackWarning,
                      stacklevel=_caller_level())
    return plan


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside pyfuser (the
    user's ``execute``), for the function calling ``warnings.warn``."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


# -- explain ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentChoice:
    """One segment of ``fd.explain``: which scheduler took it, with which params, and
    the rejections on the way."""

    index: int
    outputs: tuple  # the TensorVals the segment computes
    scheduler: str | None  # the NAME of the scheduler that took it; None: it runs as torch ops
    params: object  # the chosen params (None for torch ops)
    rejections: tuple  # Reject of each scheduler that declined, in priority order
    accepting: tuple = ()  # NAMEs of lower-priority schedulers that accept it too
    host: str = ""  # why it runs as torch ops: "host op <op>" or "no scheduler accepted"
    spills: tuple = ()  # (params, Reject) of each configuration the spill check rejected (GPU)
    order: tuple = ()  # the NAMEs of the other schedulers, in priority order

    @property
    def verdicts(self) -> list:
        """(NAME, Reject or None: accepts too) of each other scheduler, in priority order."""
        rejected = {r.scheduler: r for r in self.rejections}
        return [(n, rejected.get(n)) for n in self.order]

    @property
    def codes(self) -> dict:
        """Scheduler NAME -> rejection code."""
        return {r.scheduler: r.code for r in self.rejections}


@dataclass(frozen=True)
class Explanation:
    """``fd.explain(inputs)``: per segment the decision; ``str()`` is the
    ``PYFUSER_DUMP=scheduler_params`` text."""

    fusion_id: int
    segments: tuple

    def __str__(self):
        return dump.scheduler_params(self.fusion_id, self)

    def rejections(self) -> list:
        """Every rejection of every segment, spill rejections included."""
        return [r for s in self.segments for r in list(s.rejections) + [r for _, r in s.spills]]


def explain_plan(rt, plan, b, params_by_step) -> Explanation:
    """The decisions behind ``plan`` for binding ``b`` (``params_by_step``: the params
    each kernel step runs with)."""
    out = []
    for i, (step, params) in enumerate(zip(plan.steps, params_by_step)):
        if step.is_host:
            out.append(SegmentChoice(i, tuple(step.outputs), None, None, (), (), step.reason))
            continue
        seg = rt.step_segment(b, step)
        chosen = step.scheduler.NAME if step.scheduler else None
        declined = {r.scheduler: r for r in step.declined}
        rejections, accepting, order = [], [], []
        for sched in current_choices().schedulers(SCHEDULERS):
            if sched.NAME == chosen:
                continue
            order.append(sched.NAME)
            rej = declined.get(sched.NAME) or sched.can_schedule(seg)
            if rej is not None:
                rejections.append(rej.by(sched.NAME))
            else:
                accepting.append(sched.NAME)
        spills = ()
        if step.scheduler is not None:
            heur = step.scheduler.heuristics(seg)
            key = (chosen, tuple(o.index for o in seg.outputs), rt._current_sig, heur)
            spills = tuple(rt.spill_rejections.get(key, ()))
        out.append(SegmentChoice(i, tuple(step.outputs), chosen, params, tuple(rejections), tuple(accepting),
                                 "" if chosen else "no scheduler accepted", spills, tuple(order)))
    return Explanation(rt.fd.id, tuple(out))


def layout_info(x: torch.Tensor) -> dict:
    """What the schedulers know of an input's layout: contiguous, and for a strided one
    whether every row starts on a 16-byte boundary (innermost stride 1, the others
    multiples of 16 bytes, an aligned start: logits whose rows were padded for the
    GEMM that wrote them)."""
    contiguous = is_contiguous(x)
    rows_aligned = False
    if not contiguous and x.dim() >= 2 and x.stride(-1) == 1 and x.data_ptr() % 16 == 0:
        rows_aligned = all(x.stride(d) * x.element_size() % 16 == 0 for d in range(x.dim() - 1) if x.shape[d] != 1)
    return {"contiguous": contiguous, "rows_aligned": rows_aligned,
            "unit_dim": None if contiguous else unit_stride_dim(x)}


def unit_stride_dim(x: torch.Tensor) -> int | None:
    """The dim a strided tensor is contiguous along (stride 1, extent > 1), or None:
    a transposed input's, for the pointwise scheduler's transpose tile (callers ask
    only for tensors that are not contiguous)."""
    dims = [d for d in range(x.dim()) if x.shape[d] > 1 and x.stride(d) == 1]
    return dims[-1] if dims else None


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


def broadcast_chain(o):
    """(source, exprs): the value ``o`` is a chain of broadcast_in_dim of, and those
    exprs in the order they run (none when ``o`` is not a broadcast)."""
    exprs = []
    while o.definition is not None and OPS[o.definition.op].kind == "broadcast_in_dim":
        exprs.append(o.definition)
        o = o.definition.inputs[0]
    return o, exprs[::-1]


def expanded_source(o, b):
    """The tensor an output is a chain of broadcast_in_dim of, when the chain repeats
    elements (more elements out than in); else None."""
    v, exprs = broadcast_chain(o)
    if not exprs or not isinstance(v, TensorVal) or math.prod(b.shapes[o]) <= math.prod(b.shapes[v]):
        return None
    return v


def _nonempty(b, v) -> bool:
    return math.prod(b.shapes[v]) > 0


def _host_levels(live, hosts) -> dict:
    """Per value: the position of the last host op it depends on (-1: none)."""
    pos = {id(h): i for i, h in enumerate(hosts)}
    level: dict = {}
    for e in live:
        lv = max((level.get(v, -1) for v in e.inputs), default=-1)
        if id(e) in pos:
            lv = pos[id(e)]
        for o in e.outputs:
            level[o] = lv
    return level


def _narrow(v, cuts):
    """Store the narrower value under an upcast: a host op's fp32 input that is a cast
    of an fp16/bf16 value is stored at 16 bits and cast again in torch.  Returns the
    value to store and the cast exprs to replay (outermost last)."""
    casts = []
    while (v not in cuts and v.definition is not None and v.definition.op == "cast"
           and isinstance(v.definition.inputs[0], TensorVal)
           and v.dtype.torch.is_floating_point and v.definition.inputs[0].dtype.torch.is_floating_point
           and v.definition.inputs[0].dtype.torch.itemsize < v.dtype.torch.itemsize):
        casts.append(v.definition)
        v = v.definition.inputs[0]
    return v, casts[::-1]


def _first_reductions(outputs, cuts) -> list:
    """Outputs of the reductions that compute ``outputs`` from ``cuts`` and read no
    other reduction's result: where a fusion that needs two kernels splits."""
    exprs = needed_exprs(outputs, cuts)
    made = {o: e for e in exprs for o in e.outputs}
    reduced: dict = {}
    first = []
    for e in exprs:
        after = any(reduced.get(v, False) for v in e.inputs if v in made)
        is_red = OPS[e.op].kind in ("reduction", "var_mean")
        if is_red and not after:
            first += [o for o in e.outputs if o not in first]
        for o in e.outputs:
            reduced[o] = after or is_red
    needed = {v for e in exprs for v in e.inputs} | set(outputs)
    return [o for o in first if o in needed]


class _Flow:
    """The data flow between a plan's steps: what each reads, and what must be stored."""

    def __init__(self, steps, keep):
        self.steps, self.keep = steps, keep  # keep: the fusion's outputs
        self.reads = [step_reads(s) for s in steps]

    def needed(self, v, skip) -> bool:
        """Whether ``v`` must be stored: a fusion output, or read by a step not in ``skip``."""
        return v in self.keep or any(v in r for k, r in enumerate(self.reads) if k not in skip)

    def union(self, i, j):
        """The outputs of steps i and j merged (what others still need) and what it reads."""
        outputs = []
        for o in self.steps[i].outputs + self.steps[j].outputs:
            if o not in outputs and self.needed(o, (i, j)):
                outputs.append(o)
        made = set(self.steps[i].outputs) | set(self.steps[j].outputs)
        return outputs, (self.reads[i] | self.reads[j]) - made

    def candidates(self, b) -> list:
        """Pairs (i, j), i before j, of kernel steps worth a merge, best first: a
        producer and its consumer when merging drops stored values (most first), then
        steps with reductions over the same axes of the same shape, then steps that
        read a common tensor or where one feeds the other; nearer pairs first.  Pairs
        sharing nothing are not tried: merging them would only save a launch."""
        axes = [_reduction_axes(s, b) for s in self.steps]
        kernels = [k for k, s in enumerate(self.steps) if s.scheduler is not None]
        ranked = []
        for n, i in enumerate(kernels):
            for j in kernels[n + 1:]:
                fed = set(self.steps[i].outputs) & self.reads[j]
                dropped = sum(1 for v in fed if not self.needed(v, (i, j)))
                if dropped:
                    rank = 0
                elif axes[i] & axes[j]:
                    rank = 1
                elif fed or _tensors(self.reads[i] & self.reads[j]):
                    rank = 2
                else:
                    continue
                ranked.append(((rank, -dropped, j - i, i), i, j))
        return [(i, j) for _, i, j in sorted(ranked)]

    def order(self, i, j, merged, reads):
        """The steps with i and j replaced by ``merged`` (reading ``reads``), in a
        topological order that keeps the others' order where it can; None when the
        merged step would both feed and depend on a third step."""
        keys = [k for k in range(len(self.steps)) if k not in (i, j)]
        steps = [self.steps[k] for k in keys] + [merged]
        return _topological(steps, [self.reads[k] for k in keys] + [reads], keys + [i])

    def upcasts(self, base):
        """(producer, value, narrower value) for each value a kernel stores only for
        other kernels that is an upcast of a 16-bit value the producer computes."""
        for p, step in enumerate(self.steps):
            if step.scheduler is None:
                continue
            for x in step.outputs:
                readers = [self.steps[k] for k, r in enumerate(self.reads) if x in r]
                if x in self.keep or not readers or any(s.scheduler is None for s in readers):
                    continue
                u, casts = _narrow(x, self.reads[p] | base)
                if casts:
                    yield p, x, u


def _topological(steps, reads, keys):
    """Kahn's algorithm taking the ready step with the smallest key; None on a cycle."""
    made: dict = {}
    for n, s in enumerate(steps):
        for o in s.outputs:
            made.setdefault(o, n)
    users = [[] for _ in steps]
    waiting = []
    for n, r in enumerate(reads):
        deps = {made[v] for v in r if v in made and made[v] != n}
        for d in deps:
            users[d].append(n)
        waiting.append(len(deps))
    ready = [(keys[n], n) for n in range(len(steps)) if not waiting[n]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, n = heapq.heappop(ready)
        out.append(steps[n])
        for m in users[n]:
            waiting[m] -= 1
            if not waiting[m]:
                heapq.heappush(ready, (keys[m], m))
    return out if len(out) == len(steps) else None


def _reduction_axes(step, b) -> frozenset:
    """(input shape, reduced dims) of each reduction a kernel step computes."""
    if step.scheduler is None:
        return frozenset()
    exprs = step.sub.exprs.values() if step.sub is not None else needed_exprs(step.outputs, ())
    found = set()
    for e in exprs:
        if OPS[e.op].kind in ("reduction", "var_mean"):
            shape = tuple(b.shapes[e.inputs[0]])
            found.add((shape, tuple(sorted(d % max(len(shape), 1) for d in e.attrs["dims"]))))
    return frozenset(found)


def _tensors(vals) -> frozenset:
    return frozenset(v for v in vals if isinstance(v, TensorVal))
