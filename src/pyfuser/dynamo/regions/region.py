"""A fused region at run time: its FusionDefinitions, and ATen when they fail.

``FusedRegion`` replaces one ``fused_N`` submodule of a partitioned graph.  It keeps
the submodule (the region's ATen ops) as its fallback.  Per layout of its inputs
(strides; sizes and dtypes are fixed by the graph) it holds one translated
``FusionDefinition``; the first layout comes from the compile-time example tensors,
and an input that arrives with other strides gets its own translation, so a
definition's contiguity claims always hold.

Translations are cached process-wide on the region's op text plus its input specs,
so a model's identical layers share one FusionDefinition (and its kernels).

A region of a graph traced with dynamic shapes has symbolic sizes: its inputs are
defined with symbolic extents, and its SymInt inputs (Python ints when it runs) are
Int scalars of the fusion (``translate.py``).  Its translation is keyed by the input
layouts alone (contiguity and stride order, the sizes by their expressions), so one
FusionDefinition serves every size and its plan cache decides which sizes need
another plan; the prepared launches are per exact sizes (a few ``MAX_SIZES`` kept).

A region whose translation or execution fails runs its ATen submodule from then on;
the backend warns once per distinct cause (``FallbackWarning``).
"""
from __future__ import annotations

import contextlib
import re
import threading
from collections import Counter

import torch
from torch.fx.node import Node

from ...compat import module_call_hooked
from ...runtime import ahead
from ...runtime.executor import fast_path_allowed, program_for
from ...runtime.launch import out_of_memory
from ...settings import warn_user
from ..rules import Unsupported, meta
from .translate import InputSpec, Translation, hints, input_layout, is_symbolic, size_key, sym_shape, translate

STATS: Counter = Counter()  # fusions_created, regions, fallbacks, translation_cache_hits, region_calls
_TRANSLATIONS: dict = {}  # (region text, input specs) -> Translation | Unsupported
_warned: set = set()


class _Capture(threading.local):
    on = False  # this thread records a CUDA graph (``graphs.py``)


_capture = _Capture()


@contextlib.contextmanager
def capturing():
    """While this thread records a CUDA graph of a graph's run (autograd runs the
    backward on a device thread of its own), a region that fails raises instead of
    falling back to ATen for good: the failure is the recording's (an operation a
    graph cannot hold), and the caller gives up the graph, not the region."""
    _capture.on = True
    try:
        yield
    finally:
        _capture.on = False


class FallbackWarning(UserWarning):
    """A region runs in ATen instead of pyfuser; the message says why."""


def warn_once(cause: str, message: str):
    if cause in _warned:
        return
    _warned.add(cause)
    warn_user(f"pyfuser.dynamo: {message}", FallbackWarning)  # shown at the user's line


def stats() -> dict:
    """Counters of the backend: ``fusions_created`` (FusionDefinitions translated),
    ``regions`` (fused regions compiled), ``fallbacks`` (regions running in ATen),
    ``translation_cache_hits`` (regions that reused a translation), ``region_calls``
    (regions run, pyfuser or fallback; not those inside a replayed CUDA graph), and
    from ``graphs.py`` ``graph_captures``, ``graph_capture_failures``, ``graph_replays``, ``graph_misses``
    (calls that ran uncaptured after a capture) and ``graph_sizes_uncaptured`` (calls
    at a size of a symbolic graph that is not recorded), each also per role
    (``graph_replays_forward``, ...); under the accuracy mode
    (``accuracy.py``) ``checked_region_calls``, ``checked_views`` and
    ``checked_graph_calls``."""
    return dict(STATS)


def reset():
    """Forget the translation cache, counters and warnings (tests; a fresh benchmark)."""
    STATS.clear()
    forget_translations()
    _warned.clear()


def forget_translations():
    """Forget the translation cache only: the next backend to compile a region
    translates it afresh (and counts it in ``fusions_created``)."""
    _TRANSLATIONS.clear()


def region_text(graph) -> str:
    """The region's ops with node names canonicalised: the cache key's structural part."""
    names = {}
    lines = []
    for node in graph.nodes:
        names[node] = f"v{len(names)}"

        def spell(x):
            if isinstance(x, Node):
                return names[x]
            if isinstance(x, (list, tuple)):
                return "[" + ", ".join(spell(v) for v in x) + "]"
            return repr(x)

        args = spell(list(node.args))
        kwargs = ", ".join(f"{k}={spell(v)}" for k, v in sorted(node.kwargs.items()))
        target = "" if node.op in ("placeholder", "output") else node.target
        lines.append(f"{names[node]} = {node.op} {target}({args}; {kwargs})")
    return "\n".join(lines)


def _translation(graph, text, specs) -> Translation:
    key = (text, specs)
    hit = _TRANSLATIONS.get(key)
    if hit is None:
        try:
            hit = translate(graph, specs)
            STATS["fusions_created"] += 1
        except Unsupported as err:
            hit = err
        except Exception as err:  # a frontend error on a node we thought fine: our bug, not the user's
            msg = str(err).splitlines()[0] if str(err) else ""
            hit = Unsupported(f"translation: {type(err).__name__}: {re.sub(r'[0-9]+', 'N', msg)[:160]}",
                              f"translation failed: {type(err).__name__}: {msg}")
        _TRANSLATIONS[key] = hit
    else:
        STATS["translation_cache_hits"] += 1
    if isinstance(hit, Unsupported):
        raise hit
    return hit


def _outputs(entry, outs, copies, restride, strides):
    """The region's results: the outputs ``_copies`` names copied, those whose layout
    differs from ATen's (``restride``) written again in ATen's strides."""
    for pos in copies:
        outs[pos] = outs[pos].clone()
    for pos in restride:
        o = outs[pos]
        outs[pos] = torch.empty_strided(o.shape, strides[pos], dtype=o.dtype, device=o.device).copy_(o)
    return tuple(outs) if entry.tuple_output else outs[0]


class FusedRegion(torch.nn.Module):
    """Runs one region with pyfuser; its ATen submodule is the fallback."""

    def __init__(self, submodule: torch.fx.GraphModule, name: str):
        super().__init__()
        self.fallback = submodule
        self.name = name
        self.text = region_text(submodule.graph)
        self.out_strides = _traced_output_strides(submodule.graph)
        self.restride: dict = {}  # input strides -> output positions whose layout must be ATen's
        self.entries: dict = {}  # input strides -> Translation
        self.copies: dict = {}  # input strides -> output positions to copy (see _copies)
        self.fast: dict = {}  # input strides -> (Translation, Program, device, copies, restride)
        self.broken = False
        self.fallback_cause = None  # why it runs in ATen (the warning's message), once broken
        placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
        examples = [meta(n) for n in placeholders]
        STATS["regions"] += 1
        self.symbolic = any(is_symbolic(x) or not isinstance(x, torch.Tensor) for x in examples)
        try:
            self.device = self._device(examples, submodule.graph)
            self._check_devices(submodule.graph)
            self._moves = tuple(i for i, x in enumerate(examples)
                                if isinstance(x, torch.Tensor) and x.device != self.device)
            self._shapes = tuple(sym_shape(x.shape) if isinstance(x, torch.Tensor) else (size_key(x),)
                                 for x in examples)
            if self.symbolic:
                self._symbols = _symbol_sources(examples)
                self._out_exprs = _stride_exprs(submodule.graph, self._symbols)
            self._scalars: dict = {}  # (dtype, value) -> that CPU scalar's copy on the device
            self._prepare(examples)
        except Unsupported as err:
            self._give_up(err.cause, str(err))

    # -- preparing -------------------------------------------------------------------------
    @staticmethod
    def _device(examples, graph):
        if not all(isinstance(x, (torch.Tensor, torch.SymInt, int)) for x in examples):
            raise Unsupported("non-tensor region input", "a region input is neither a tensor nor a size")
        examples = [x for x in examples if isinstance(x, torch.Tensor)]
        devices = {x.device for x in examples if x.dim() > 0} or {x.device for x in examples}
        if not devices:  # no inputs (fills and random numbers only): the outputs' device
            devices = {v.device for v in map(meta, graph.nodes) if isinstance(v, torch.Tensor)}
        if len(devices) != 1:
            raise Unsupported("mixed devices", f"region on several devices {sorted(map(str, devices))}")
        return devices.pop()

    def _check_devices(self, graph):
        for node in graph.nodes:
            v = meta(node)
            for x in (v if isinstance(v, (tuple, list)) else (v,)):
                if isinstance(x, torch.Tensor) and x.device != self.device and not (
                        node.op == "placeholder" and x.dim() == 0):
                    raise Unsupported("mixed devices", f"{node.name} is on {x.device}, the region on {self.device}")

    def _prepare(self, tensors, key=None):
        """The translation for inputs laid out like ``tensors`` (the traced examples, or
        a call's arguments), recorded under ``key`` (default: their strides)."""
        if key is None:
            key = _layout_key(tensors) if self.symbolic else tuple(tuple(x.stride()) for x in tensors)
        specs = []
        for i, x in enumerate(tensors):
            if not isinstance(x, torch.Tensor):
                specs.append(InputSpec.scalar(self._shapes[i][0], self.device.type))
                continue
            contiguity, order = input_layout(hints(x.shape), hints(x.stride()))
            specs.append(InputSpec(x.dtype, self._shapes[i], contiguity, order,
                                   self.device.type if i in self._moves else x.device.type))
        entry = _translation(self.fallback.graph, self.text, tuple(specs))
        self.entries[key] = entry
        return entry

    def plan_ahead(self) -> list:
        """Compile jobs for this region's kernels at its traced inputs
        (``runtime.ahead.plan_ahead``); none for a region in ATen, with symbolic sizes
        or not on CUDA, or one whose offline plan failed (its first call plans and
        compiles as usual)."""
        if self.broken or self.symbolic or self.device.type != "cuda":
            return []
        examples = [meta(n) for n in self.fallback.graph.nodes if n.op == "placeholder"]
        entry = self.entries.get(tuple(tuple(x.stride()) for x in examples))
        if entry is None:
            return []
        inputs = [ahead.meta_strided(x.shape, x.stride(), x.dtype, x.storage_offset()) for x in examples]
        try:
            return ahead.plan_ahead(entry.fd, inputs, self.device)
        except Exception as err:  # only a loss of time: the first call plans with the real inputs
            ahead.log.debug("pyfuser: %s: not compiled ahead: %s: %s", self.name, type(err).__name__, err)
            return []

    def _give_up(self, cause: str, message: str):
        self.broken = True
        self.fallback_cause = message
        STATS["fallbacks"] += 1
        warn_once(cause, f"{self.name}: {message}; the region runs in ATen")

    # -- running -----------------------------------------------------------------------------
    def __call__(self, *args):
        """``forward`` without ``nn.Module.__call__``'s dispatch (a few microseconds per
        region call) when no hook or JIT trace needs it; with any, the usual path."""
        if module_call_hooked(self):
            return super().__call__(*args)
        return self.forward(*args)

    def forward(self, *args):
        STATS["region_calls"] += 1
        if self.broken:
            return self.fallback(*args)
        if self.symbolic:
            return self._forward_symbolic(args)
        try:
            key = tuple([x.stride() for x in args])
            inputs = args
            if self._moves:
                inputs = list(args)
                for i in self._moves:
                    inputs[i] = moved(inputs[i], self.device, self._scalars)
            fast = self.fast.get(key)
            if fast is not None and not any([x.data_ptr() & 15 for x in inputs]) and fast_path_allowed():
                entry, prog, device, copies, restride = fast
                outs = entry.laid_out(prog.run(inputs))
            else:
                entry = self.entries.get(key)
                if entry is None:
                    entry = self._prepare(args)
                device = None if inputs else self.device
                outs = entry.laid_out(entry.fd.execute(list(inputs), device=device))
                fast = None
        except Exception as err:
            if _capture.on or out_of_memory(err):
                raise  # (not from ``_failed``: its frame would hold the error in a cycle with the run's tensors)
            return self._failed(err, args)
        if fast is None:
            copies, restride = self._post(key, entry, args, outs)
            self._register_fast(key, entry, inputs, device, copies, restride)
        return _outputs(entry, outs, copies, restride, self.out_strides)

    def _forward_symbolic(self, args):
        """``forward`` of a region with symbolic sizes: the fast path is keyed by the
        call's exact sizes, strides and SymInt values (its launches are), the
        translation by the layouts (``_prepare``).  Traced output strides are
        expressions, evaluated at the call's sizes."""
        try:
            key = tuple([(x.shape, x.stride()) if isinstance(x, torch.Tensor) else x for x in args])
            inputs = list(args)
            for i in self._moves:
                inputs[i] = moved(inputs[i], self.device, self._scalars)
            fast = self.fast.get(key)
            if fast is not None and not _misaligned(inputs) and fast_path_allowed():
                entry, prog, device, copies, restride, strides = fast
                outs = entry.laid_out(prog.run(inputs))
            else:
                if len(self.fast) >= MAX_SIZES:
                    self.fast.clear()
                layout = _layout_key(args)
                entry = self.entries.get(layout)
                if entry is None:
                    entry = self._prepare(args, layout)
                device = self.device if not any(isinstance(x, torch.Tensor) for x in inputs) else None
                outs = entry.laid_out(entry.fd.execute(inputs, device=device))
                strides = _strides_at(self._out_exprs, self._symbols, args)
                copies = _copies(entry, args, outs)
                restride = tuple(pos for pos, o in enumerate(outs) if pos < len(strides)
                                 and strides[pos] is not None and not _same_layout(o, strides[pos]))
                if not _misaligned(inputs) and fast_path_allowed():
                    prog = program_for(entry.fd, inputs, device)
                    if prog is not None:
                        self.fast[key] = (entry, prog, device, copies, restride, strides)
        except Exception as err:
            if _capture.on or out_of_memory(err):
                raise  # (not from ``_failed``: its frame would hold the error in a cycle with the run's tensors)
            return self._failed(err, args)
        return _outputs(entry, outs, copies, restride, strides)

    def _failed(self, err, args):
        """A region that could not run: it runs in ATen from now on, warned once per
        cause.  Not called for an error under a CUDA-graph capture (it goes up: the
        capture must fail) nor for running out of memory (the region is not at fault;
        ATen's ops would need the memory too, and the next call may find it): those
        reach the caller as they would from eager."""
        if isinstance(err, Unsupported):
            self._give_up(err.cause, str(err))
        else:
            msg = str(err).splitlines()[0] if str(err) else ""
            # Numbers (kernel names, sizes) differ between regions failing for one reason.
            self._give_up(f"execute: {type(err).__name__}: {re.sub(r'[0-9]+', 'N', msg)[:160]}",
                          f"executing the fusion failed: {type(err).__name__}: {msg}")
        return self.fallback(*args)

    def _post(self, key, entry, args, outs):
        """Which outputs to copy (``_copies``) and which to restride to ATen's layout:
        decided on the first run of each input layout."""
        copies = self.copies.get(key)
        if copies is None:
            copies = self.copies[key] = _copies(entry, args, outs)
        restride = self.restride.get(key)
        if restride is None:
            restride = self.restride[key] = tuple(
                pos for pos, o in enumerate(outs)
                if pos < len(self.out_strides) and self.out_strides[pos] is not None
                and not _same_layout(o, self.out_strides[pos]))
        return copies, restride

    def _register_fast(self, key, entry, inputs, device, copies, restride):
        """Later calls with these strides (and 16-byte aligned inputs) run the fusion's
        ``Program`` (``program_for``) directly: sizes, dtypes and devices are fixed by
        the graph and strides by the key, so the executor's fingerprint would find the
        same one."""
        if any([x.data_ptr() & 15 for x in inputs]) or not fast_path_allowed():
            return
        prog = program_for(entry.fd, list(inputs), device)
        if prog is not None:
            self.fast[key] = (entry, prog, device, copies, restride)


MAX_CACHED_SCALARS = 64
# Exact input sizes whose prepared launches a region with symbolic sizes keeps; past
# that it forgets them all (their kernels stay in the fusion's plan cache).
MAX_SIZES = 64


def _layout_key(xs) -> tuple:
    """The inputs' layouts (``input_layout``; None for a size): what a region with
    symbolic sizes keys its translations by."""
    return tuple([input_layout(hints(x.shape), hints(x.stride())) if isinstance(x, torch.Tensor) else None
                  for x in xs])


def _misaligned(inputs) -> bool:
    return any([x.data_ptr() & 15 for x in inputs if isinstance(x, torch.Tensor)])


def _symbol_sources(examples) -> dict:
    """How to get each symbol's value from a call's arguments: symbol -> (input, dim or
    None, c, others), its value being that input's size (or the SymInt input) divided
    by c and by the values of the symbols ``others``, found before it.  A size that is
    one symbol times c gives that symbol; a product of symbols gives the one symbol in
    it not found yet (a region reading [s0 * s1] data with s0 as a SymInt input has
    s1).  In order: a symbol's ``others`` come before it."""
    facts = []
    for i, x in enumerate(examples):
        sizes = [(d, s) for d, s in enumerate(x.shape)] if isinstance(x, torch.Tensor) else [(None, x)]
        for d, s in sizes:
            if not isinstance(s, torch.SymInt):
                continue
            c, rest = s.node.expr.as_coeff_Mul()
            factors = rest.args if rest.is_Mul else (rest,)
            if c.is_Integer and c > 0 and all(f.is_Symbol for f in factors):
                facts.append((len(factors), c != 1, i, d, int(c), factors))
    out: dict = {}
    found = True
    while found:
        found = False
        for _, _, i, d, c, factors in sorted(facts, key=lambda f: f[:2]):
            unknown = [f for f in factors if f not in out]
            if len(unknown) == 1:
                out[unknown[0]] = (i, d, c, tuple(f for f in factors if f != unknown[0]))
                found = True
                break
    return out


def _stride_exprs(graph, symbols) -> list:
    """The traced output strides as ints and expressions over ``symbols`` (None: not
    a tensor); an expression over other symbols cannot be evaluated at a call."""
    exprs = []
    for strides in _traced_output_strides(graph):
        if strides is None:
            exprs.append(None)
            continue
        row = tuple(s if isinstance(s, int) else s.node.expr for s in strides)
        for e in row:
            if not isinstance(e, int) and not e.free_symbols <= symbols.keys():
                raise Unsupported("symbolic output stride", f"an output stride {e} is not a function of the "
                                                            "region's input sizes")
        exprs.append(row)
    return exprs


def _strides_at(exprs, symbols, args) -> list:
    """The traced output strides at the sizes of the call's ``args``."""
    values: dict = {}
    for sym, (i, d, c, others) in symbols.items():
        v = args[i] if d is None else args[i].shape[d]
        for o in others:
            v //= values[o]
        values[sym] = v // c
    return [None if row is None else tuple(e if isinstance(e, int) else int(e.xreplace(values)) for e in row)
            for row in exprs]


def moved(x: torch.Tensor, device, cache: dict) -> torch.Tensor:
    """``x`` on ``device``.  A CPU scalar (a constant the graph made, such as the
    attention mask's fill value) is copied once per value and the copy reused: a copy
    from pageable host memory waits for the device's queue to drain, which would
    stall the host at every region call that reads one."""
    if x.dim() != 0 or x.device.type != "cpu":
        return x.to(device, non_blocking=True)
    key = (x.dtype, repr(x.item()))  # repr: nan finds itself
    hit = cache.get(key)
    if hit is None:
        if len(cache) >= MAX_CACHED_SCALARS:
            cache.clear()
        hit = cache[key] = x.to(device)
    return hit


def _traced_output_strides(graph) -> list:
    """The strides ATen's outputs had when the graph was traced: the ops after the
    region were recorded against them (a later ``_unsafe_view`` needs a contiguous
    input, say), so an output with another layout is copied into this one."""
    out = next(n for n in graph.nodes if n.op == "output")
    vals = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    strides = []
    for v in vals:
        val = getattr(v, "meta", {}).get("val") if isinstance(v, torch.fx.Node) else None
        strides.append(tuple(val.stride()) if isinstance(val, torch.Tensor) else None)
    return strides


def _same_layout(t: torch.Tensor, strides) -> bool:
    return all(size == 1 or st == want for size, st, want in zip(t.shape, t.stride(), strides))


def _copies(entry: Translation, inputs, outs) -> tuple:
    """Outputs pyfuser returns as views of an input (an identity, a reshape) where
    ATen returns a new tensor, plus repeated outputs: the region copies these, so no
    two tensors share memory that do not in ATen.  Which outputs alias is decided by
    the fusion's plan, fixed per input layout: checked on the first run only."""
    storages = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor) and x.numel()}
    aliased = [pos for pos, (o, view) in enumerate(zip(outs, entry.aten_views))
               if not view and o.numel() and o.untyped_storage().data_ptr() in storages]
    return tuple(sorted(set(aliased) | set(entry.duplicates)))
