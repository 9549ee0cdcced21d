"""Planning: from an input signature to a fusion's plan and its kernels.

``ExecutorCache`` (one per FusionDefinition) maps an input *signature* (device kind,
the device model, which dims are size 1, which inputs are contiguous, 16-byte alignment, index width,
normalised slice bounds) to a ``segment.steps.Plan``: which outputs alias inputs or
expand another value (``Plan.aliases``), and the segments (``Step``) with their
schedulers.  Which steps a plan has is the segment package's decision
(``segment.planner.make_plan``, docs/SEGMENTATION.md); it asks ``try_schedule``
whether a scheduler takes a group of outputs, which builds the kernel when one does.
The cache owns the definition's kernels, keyed by one ``KernelKey`` (scheduler,
outputs, signature, params, loads), and remembers for dumps and profiles why each was
built (the execute's ``story``) and what it cost (``kernel_info``).  The signature is a value
(``Signature``) that each caller passes on, and the plan keeps it (``Plan.signature``):
no state of the cache says which signature is being planned.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import torch

from ..errors import CacheDirError, CompileError, DependencyError, InternalError, PyfuserError
from ..ir.concretize import Binding
from ..ir.infer import pad_widths, slice_bounds
from ..codegen.writer import KernelArg
from ..ir.values import Expr, TensorVal, Val
from ..schedulers import SCHEDULERS, Segment, current_choices
from ..schedulers.device_model import model_for
from ..segment.planner import make_plan
from ..segment.steps import Plan, make_step
from ..segment.subfusion import SubFusion, subfusion
from . import dump, story
from ..settings import BY_NAME, read
from .cache import count, load_kernel
from .phases import phase, timed
from .probe import KernelInfo

PREPARED_SIZES_DEFAULT = BY_NAME["prepared_sizes"].default


@contextlib.contextmanager
def internal_errors(what: str):
    """A failure of pyfuser's own code (an IndexError deep in the analysis, say) as an
    ``InternalError`` that says what was being done; pyfuser's errors, and running out
    of memory, pass as they are."""
    try:
        yield
    except (PyfuserError, torch.OutOfMemoryError, MemoryError):
        raise
    except Exception as err:
        raise InternalError(f"pyfuser: internal error while {what}: {type(err).__name__}: {err} (a bug in "
                            f"pyfuser; fd.repro_script(inputs) writes a script to report it)") from err


@dataclass(frozen=True)
class Signature:
    """What decides a plan and its kernels beyond sizes: device kind, the device model
    the heuristics plan for (``schedulers.device_model``), each input's contiguity, alignment and unit-stride dim, which dims are size 1, slice bounds and
    pad widths, index width, the scheduler choices.  ``labels`` say what each part
    means (for the cache dump); two signatures are equal when their parts are."""

    parts: tuple
    labels: tuple = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class KernelKey:
    """The one key of a built kernel: which scheduler, the outputs and the values it
    loads (by number), the signature, the params.  ``KernelKey.of`` is the only place
    one is made; with ``params=None`` it names the segment (the spill check's and the
    row-length history's key)."""

    scheduler: str
    outputs: tuple
    loads: tuple
    signature: Signature
    params: object = None

    @classmethod
    def of(cls, sched, seg: Segment, signature: Signature, params=None) -> KernelKey:
        return cls(sched.NAME, tuple(o.index for o in seg.outputs), tuple(sorted(v.index for v in seg.inputs_info)),
                   signature, params)

    @property
    def segment(self) -> KernelKey:
        return replace(self, params=None)


class ExecutorCache:
    def __init__(self, fd):
        self.fd = fd
        self.plans: dict = {}
        self.kernel_counter = 0
        self.fresh: set = set()
        # input fingerprint -> program.Program, oldest first, at most
        # PYFUSER_PREPARED_SIZES (``remember``)
        self.programs: OrderedDict = OrderedDict()
        # Held by whatever plans, builds or prepares (the first execute of a
        # fingerprint): those mutate this cache.  A cached execute takes no lock.
        self.lock = threading.RLock()
        self.spill_choice: dict = {}  # KernelKey (heuristics' params) -> params that do not spill
        self.kernels: dict = {}  # KernelKey -> (KernelSource, kernel)
        # KernelKey.segment -> the compile-time constants its kernels met (``Scheduler.settle``)
        self.constants_met: dict = {}
        self.refused: dict = {}  # while planning: (outputs, loads) -> why no scheduler took them
        # KernelKey (heuristics' params) -> the Rejects of the spill check, in order
        self.spill_rejections: dict = {}
        self.kernel_info: dict = {}  # kernel name -> probe.KernelInfo (number, params, build time)

    def remember(self, key, prep):
        """Cache program ``prep`` for fingerprint ``key`` within ``PYFUSER_PREPARED_SIZES``
        (default 64): a fusion run at ever new sizes keeps the recently used ones (the
        others re-prepare, reusing the plan and its kernels).  The rule is least
        recently used, approximated by a second chance (CLOCK): the oldest entry goes,
        unless it was used since it was last looked at (a hit sets ``Program.used``),
        which sends it to the back instead.  A hit thus costs one attribute store, not
        a second hash of its fingerprint to reorder the dict."""
        self.programs[key] = prep
        self.programs.move_to_end(key)
        keep = read("prepared_sizes")
        while len(self.programs) > keep:
            old, entry = next(iter(self.programs.items()))
            if entry.used and entry is not prep:
                entry.used = False
                self.programs.move_to_end(old)
            else:
                del self.programs[old]

    # -- signature -------------------------------------------------------------------
    def signature(self, b: Binding, live) -> Signature:
        parts, labels = [b.device.type, model_for(b.device)], ["device", "device model"]
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
            # kernels bake a slice's bounds and a pad's widths into their source
            if e.op == "slice":
                parts.append(tuple(slice_bounds(e, b.shapes[e.inputs[0]], b.values.__getitem__)[1]))
                labels.append(f"{e.outputs[0].name} slice bounds")
            elif e.op == "pad" and e.shape_args:
                parts.append(pad_widths(e, b.values.__getitem__))
                labels.append(f"{e.outputs[0].name} pad widths")
        for v in self.fd.ir.inputs:
            if isinstance(v, TensorVal):
                parts.append(tuple(s == 1 for s in b.shapes[v]))
                labels.append(f"input {v.name} size-1 dims")
        parts.append(any(math.prod(s) > 2**30 for s in b.shapes.values()))
        labels.append("int64 indexing")
        parts.append(current_choices().key)  # two Choices never share a plan (nor its kernels: ``build``)
        labels.append("scheduler choices")
        return Signature(tuple(parts), tuple(labels))

    def explain_signature(self, sig: Signature) -> str:
        if not self.plans:
            return "new input signature (first execute of this fusion)"
        last = list(self.plans)[-1]
        diffs = [(label, f"{label} {a} -> {b}") for label, a, b in zip(sig.labels, last.parts, sig.parts) if a != b]
        shown = [d for label, d in diffs if not label.startswith("T")]  # inputs, device, index width first
        derived = [d for label, d in diffs if label.startswith("T")]  # intermediate tensors follow the inputs
        shown += derived[:2] + ([f"{len(derived) - 2} more intermediate tensors"] if len(derived) > 2 else [])
        return f"new input signature ({len(self.plans)} cached); differs from the last one in: {'; '.join(shown)}"

    def segment(self, b: Binding, outputs) -> Segment:
        info = {v: layout_info(b.values[v]) for v in self.fd.ir.inputs if isinstance(v, TensorVal)}
        return Segment(list(outputs), b.shapes, info, b.device.type, b.values, model=model_for(b.device))

    def sub_segment(self, b: Binding, sf: SubFusion) -> Segment:
        """The segment of a subfusion: fusion inputs keep their layout, intermediates
        are contiguous (the runtime allocates them)."""
        info = {}
        for c in sf.ir.inputs:
            if isinstance(c, TensorVal):
                o = sf.orig[c]
                info[c] = layout_info(b.values[o]) if o in b.values else {"contiguous": True, "rows_aligned": False}
        shapes = {c: b.shapes[o] for c, o in sf.orig.items() if isinstance(c, TensorVal) and o in b.shapes}
        return Segment(list(sf.ir.outputs), shapes, info, b.device.type, b.values, model=model_for(b.device))

    def step_segment(self, b: Binding, step) -> Segment | None:
        if step.is_host:
            return None
        return self.segment(b, step.outputs) if step.sub is None else self.sub_segment(b, step.sub)

    # -- planning ----------------------------------------------------------------------
    def make_plan(self, b: Binding, sig: Signature) -> Plan:
        """The plan for binding ``b`` of signature ``sig`` (``segment.planner.make_plan``),
        each group of outputs offered to the schedulers by ``try_schedule``."""
        self.refused = {}
        with internal_errors(f"planning fusion {self.fd.id}"):
            plan = make_plan(self.fd, b, self.scheduling(sig))
        plan.signature = sig
        return plan

    def scheduling(self, sig: Signature):
        """The planner's ``schedule(b, outputs, cuts=None, base=None)`` for a plan of
        signature ``sig``: ``try_schedule`` with the signature bound."""

        def schedule(b, outputs, cuts=None, base=None):
            return self.try_schedule(b, sig, outputs, cuts, base)

        return schedule

    @timed("scheduling")
    def try_schedule(self, b, sig: Signature, outputs, cuts=None, base=None):
        ops = ", ".join(f"{o}={o.definition.op}" for o in outputs if o.definition is not None)
        with internal_errors(f"scheduling the step of fusion {self.fd.id} that computes {ops or outputs}"):
            return self._try_schedule(b, sig, outputs, cuts, base)

    def _try_schedule(self, b, sig, outputs, cuts, base):
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
                with phase("codegen"):  # the run-time check generates the source (``checked_emit``)
                    rej = sched.can_schedule_runtime(seg, params)
            if rej is not None:
                reasons.append(rej.by(sched.NAME))
                continue
            self.build(seg, sched, params, sig)
            step = make_step(outputs, sched, reasons)
            step.sub = sf
            return step, reasons
        self.refused[key] = reasons
        return None, reasons

    # -- kernels -----------------------------------------------------------------------
    def build(self, seg, sched, params, sig: Signature):
        """(KernelSource, kernel) of ``sched``'s kernel for ``seg`` with ``params``: cached
        by ``KernelKey``, else emitted and loaded."""
        key = KernelKey.of(sched, seg, sig, params)
        hit = self.kernels.get(key)
        if hit is not None:
            if key in self.fresh:  # built while planning this very execute
                self.fresh.discard(key)
            else:
                count(hits=1)
                info = self.kernel_info[hit[0].name]
                story.note(f"kernel{info.number} {info.name} ({sched.NAME}): hit (same scheduler, "
                                   f"signature and params)")
            return rebound(hit, seg)
        count(misses=1)
        reason = self._miss_reason(key)
        self.fresh.add(key)
        self.kernel_counter += 1
        name = f"pyfuser_f{self.fd.id}_k{self.kernel_counter}"
        t0 = time.perf_counter()
        try:
            with phase("codegen"):
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
        story.note(f"kernel{self.kernel_counter} {name} ({sched.NAME}): miss, compiled in {ms:.1f} ms: "
                           f"{reason}")
        return src, fn

    def _miss_reason(self, key: KernelKey) -> str:
        same_sig = [k.params for k in self.kernels if k.segment == key.segment]
        if same_sig:
            return f"new heuristics: params {key.params!r} (cached for this segment and signature: {same_sig[-1]!r})"
        if any((k.scheduler, k.outputs) == (key.scheduler, key.outputs) for k in self.kernels):
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
    each kernel step runs with); its spill rejections are looked up under the plan's
    signature."""
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
            spills = tuple(rt.spill_rejections.get(KernelKey.of(step.scheduler, seg, plan.signature, heur), ()))
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
