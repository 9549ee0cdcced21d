"""A compiled forward or backward graph replayed as one CUDA graph, when that is safe.

Why: a transformer's training step is host-bound: the forward and backward launch
less kernel time than they take host time (docs/TUNING.md#host-time and
#cuda-graph-backward), each region call, matmul and view a few microseconds of
Python and a CUDA launch.
Replayed as a CUDA graph, a whole graph is one launch; the GPU then runs it while
the host goes on to the next graph, the optimizer and the next step.

Only AOTAutograd's training graphs (forward and backward) are graphed, and only those
that draw no random numbers (pyfuser draws dropout's seeds on the host, so a replay
would repeat one mask), whose every input is a CUDA tensor or a size and every value
a CUDA tensor (a CPU computation would not be replayed), and none of whose sizes
depends on the data.  Inference graphs run as usual.  A graph with symbolic sizes
(dynamic shapes) is recorded once per size it meets (``SizedGraphs``): a replay
has the sizes of its recording, and the sizes are part of what is checked.

A replay computes into the addresses the capture used, so three things are checked
or done on every call, and a check that fails runs the graph as usual (``misses``),
never a stale or overwritten result:

* **inputs**: an input is either *pinned* (it must be at the address and strides it
  had at capture) or *copied* into a buffer of the graph, all copies in one
  ``_foreach_copy_`` per replay.  Pinned: an input the graph writes (``mutated_inputs``,
  its write must reach the caller's tensor), one that is not dense (a copy into it
  would overlap), and by role: in a backward every input above ``SMALL_INPUT_BYTES``
  (the saved activations: PyTorch's caching allocator hands a repeated sequence of
  requests the same blocks, and a forward replay hands out the same buffers, so they
  come back where the captured step's were; small blocks move as soon as the loop
  keeps something small, its losses, and pinning them used up the captures),
  in a forward every parameter (a leaf that requires grad); in either, every input
  that another graph's replay wrote (``_produced``: the logits a loss graph takes
  after a graph break, a layer's hidden states; they come back in that graph's
  buffers at each of its replays, docs/TUNING.md#cuda-graph-inputs); the batch, new
  every step, is copied.  After ``MISSES_BEFORE_RECAPTURE`` calls in a row with a pinned
  input elsewhere the graph is captured again; at most ``MAX_CAPTURES`` captures,
  then it runs as usual.
* **outputs**: the next replay overwrites the graph's output buffers, so it waits
  until nothing but the graph holds them: their storage use counts must be back to
  what they were right after capture.  The backward's outputs (the gradients) are
  handed out as views of the buffers; ``zero_grad(set_to_none=True)``, PyTorch's
  default, releases them (gradient accumulation, or a kept view of a gradient, makes
  the step run as usual).  The forward's outputs saved for the backward are views of
  the buffers too (the backward frees them).  Its first ``visible`` outputs, the ones
  the caller gets (AOTAutograd's user outputs, mutated inputs and their bases), are
  handed out as views of the buffers as long as the caller lets them go before the
  next call; one the caller still holds then (``out = model(x)`` in a loop is
  assigned after the next forward returns) makes that call run as usual and is
  copied out of the buffers at every replay from then on (``copy_out``), and so is
  every small one from the start (the loss, which loops keep).
* an output that is a pinned input (or a view of one) is rebuilt from this call's input.

The first ``WARMUP_CALLS`` calls run as usual (kernels compile, launchers settle);
the next is captured on a side stream and replayed.  While ``PYFUSER_DUMP`` or
``PYFUSER_PROF`` is set, or a scheduler override is on, calls run as usual, so the
dumps and profiles see every region.  Under distributed training (a process group
of more than one rank, or a graph holding a collective) nothing is captured: see
``collectives.py``.  ``PYFUSER_CUDA_GRAPHS=0`` turns graphing off, and so does the
accuracy mode (``accuracy.py``).  A capture that fails gives back all it took
(``recording.py``), warns once with the cause, and its graph runs as usual from then
on.  ``stats()`` counts ``graph_captures``, ``graph_capture_failures``,
``graph_replays`` and ``graph_misses``, and each per role (``graph_replays_forward``...);
``graph_sizes_uncaptured`` the calls at a size that ``SizedGraphs`` does not record.
"""
from __future__ import annotations

import logging
import weakref

import torch

from ...compat import foreach_copy_, mark_boxed, reinterpret_tensor as _reinterpret, storage_id, storage_use_count
from ...runtime.executor import fast_path_allowed
from ...runtime.phases import phase
from ...settings import read
from .graph_checks import mutated_inputs, not_graphable, symbolic  # noqa: F401 - the backend asks them here
from .recording import forget, record as _cuda_capture, release_cached
from .region import STATS, capturing, warn_once

SMALL_INPUT_BYTES = 1 << 20
WARMUP_CALLS = 2
MISSES_BEFORE_RECAPTURE = 2
MAX_CAPTURES = 4
MAX_SIZES = 32  # sizes of one symbolic graph recorded (``SizedGraphs``); later ones run as usual
# A new size is recorded only while the device keeps this share of its memory free
# after it (the free memory less the largest recording of that graph so far).
MEMORY_RESERVE = 0.25

_use_count = storage_use_count
_log = logging.getLogger(__name__)


def enabled() -> bool:
    """Whether training graphs may be captured (``pyfuser.config.cuda_graphs``: ``PYFUSER_CUDA_GRAPHS``
    or the option ``cuda_graphs``, default on)."""
    return read("cuda_graphs") and torch.cuda.is_available()


def _storage_key(t: torch.Tensor) -> int:
    return storage_id(t)


class _Capture:
    """One captured graph and what a replay needs: the inputs that must be in place,
    the buffers the others are copied into, how to build each output."""

    def __init__(self, graph, fixed, buffers, copied, outputs, storages, ints=()):
        self.graph = graph
        self.ints = ints  # (input position, value) of the sizes the graph was recorded at
        self.fixed = fixed  # (input position, data_ptr, strides)
        self.buffers = buffers  # list: the graph's copies of the inputs at positions ``copied``
        self.copied = copied
        self.outputs = outputs  # ("graph", tensor) | ("input", position, size, stride, offset delta) | ("value", v)
        self.storages = storages  # (storage handle, use count right after capture)
        self.visible = {}  # storage handle -> positions of the caller's outputs in it


def _dense(x: torch.Tensor) -> bool:
    """Whether ``x``'s elements fill its memory once each (some order of its dims is
    row-major), so a copy into a tensor of its strides writes each element once.
    Exact, where ``compat.has_internal_overlap`` may answer "too hard" (read as no)."""
    if x.numel() == 0:
        return True
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(x.shape, x.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _small(x: torch.Tensor) -> bool:
    return x.numel() * x.element_size() <= SMALL_INPUT_BYTES


def _pinned_backward(x: torch.Tensor) -> bool:
    return not _small(x)


def _pinned_forward(x: torch.Tensor) -> bool:
    return isinstance(x, torch.nn.Parameter) or (x.requires_grad and x.is_leaf)


_LIVE: weakref.WeakSet = weakref.WeakSet()  # every GraphedCall, for ``_produced``


def _produced() -> frozenset:
    """The storages the live captures hand their outputs out in: an input in one is
    another graph's output, back at the same address at each replay of that graph
    (and elsewhere, a miss, when that graph ran as usual)."""
    return frozenset(k for g in list(_LIVE) if g.cap is not None for k, _ in g.cap.storages)


class GraphedCall:
    """A boxed callable (AOTAutograd's convention: one list of arguments) running
    ``fn`` (a compiled graph's ``forward``) through a CUDA graph when the module
    docstring's checks pass, else as usual.  ``role``: "backward" or "forward" (which
    inputs are pinned); ``visible``: the number of leading outputs that are the
    caller's (copied out of the graph's buffers once the caller is seen to keep
    one); ``mutated``: the positions of the inputs ``fn`` writes (``mutated_inputs``).
    ``capture(fn, args)`` makes the graph (default ``_cuda_capture``, read when the
    wrapper is made; tests pass their own)."""

    def __init__(self, fn, capture=None, *, role="backward", visible=0, mutated=frozenset(), room=None):
        mark_boxed(self)  # an instance attribute: Dynamo's wrappers copy __dict__
        self.fn = fn
        self.room = room  # None, or a callable: may a capture be made now (``SizedGraphs``)
        self.footprint = 0  # device memory the captures reserved, bytes
        self._capture_fn = capture or _cuda_capture
        self.role = role
        self.visible = visible
        self.copy_out: set = set()  # output positions copied out of the buffers at each replay
        self.mutated = frozenset(mutated)
        self._pinned = _pinned_forward if role == "forward" else _pinned_backward
        self.calls = 0
        self.captures = 0
        self.misses_in_row = 0
        self.cap: _Capture | None = None
        self.off = False
        self.refused = False  # ``room`` said no: the calls run as usual
        self.failure: str | None = None  # why the capture failed (then ``off``)
        _LIVE.add(self)

    def __call__(self, args):
        self.calls += 1
        if self.off or self.calls <= WARMUP_CALLS or not fast_path_allowed():
            if self.refused:
                self._count("graph_sizes_uncaptured")
            return self.fn(*args)  # a dump or profile asked for sees every region run
        if self.cap is None:
            if self.captures >= MAX_CAPTURES:
                self.off = True
                return self.fn(*args)
            return self._capture(args)
        try:
            outs = self._replay(args)
        except (AttributeError, TypeError):  # an argument that is not a tensor (not_graphable saw tensors)
            outs = None
        if outs is None:
            self._count("graph_misses")
            return self.fn(*args)
        return outs

    def _count(self, key):
        STATS[key] += 1
        STATS[f"{key}_{self.role}"] += 1

    def _pins(self, i, x, produced) -> bool:
        return i in self.mutated or not _dense(x) or self._pinned(x) or _storage_key(x) in produced

    # -- capture ---------------------------------------------------------------------
    def _capture(self, args):
        args = list(args)
        if not all(isinstance(x, torch.Tensor) or _is_size(x) for x in args):
            self.off = True  # (not_graphable saw tensors and sizes only; the call disagrees)
            return self.fn(*args)
        if self.room is not None and not self.room():
            self.off = self.refused = True
            self._count("graph_sizes_uncaptured")
            _log.info("a %s graph at a new size is not recorded: the device's memory is short of the "
                      "recording and a reserve of %d%%; that size runs uncaptured", self.role, MEMORY_RESERVE * 100)
            return self.fn(*args)
        copied, fixed, static = [], [], list(args)
        ints = tuple((i, x) for i, x in enumerate(args) if not isinstance(x, torch.Tensor))
        produced = _produced()
        for i, x in enumerate(args):
            if not isinstance(x, torch.Tensor):
                continue  # a size: the graph computed with it (``ints``)
            if self._pins(i, x, produced):
                fixed.append((i, x.data_ptr(), tuple(x.stride())))
            else:
                static[i] = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device).copy_(x)
                copied.append(i)
        self.captures += 1
        before, failure = _reserved(), None
        try:
            with capturing(), phase("graph_capture"):
                graph, outs = self._capture_fn(self.fn, static)
        except Exception as err:  # an optimization: the graph runs as usual from now on
            failure = forget(err)
        if failure is not None:  # (outside the handler: nothing of the attempt is alive while it runs)
            static = None  # the copies of the inputs
            return self._uncaptured(failure, args)
        self.footprint += max(_reserved() - before, 0)
        by_storage = {}
        for pos, x in enumerate(static):
            if isinstance(x, torch.Tensor):
                by_storage.setdefault(_storage_key(x), []).append(pos)
        outputs = []
        for o in outs:
            if not isinstance(o, torch.Tensor):
                outputs.append(("value", o))
                continue
            inputs = by_storage.get(_storage_key(o), [])
            pos = next((p for p in inputs if p not in copied), None)
            if pos is not None:  # a (view of a) pinned input: rebuilt from the call's own
                x = static[pos]
                outputs.append(("input", pos, tuple(o.size()), tuple(o.stride()),
                                o.storage_offset() - x.storage_offset()))
            else:
                outputs.append(("graph", o))
        buffers = [static[i] for i in copied]
        del outs, static
        storages = dict.fromkeys(_storage_key(out[1]) for out in outputs if out[0] == "graph")
        storages = tuple((k, _use_count(k)) for k in storages)
        self.cap = _Capture(graph, tuple(fixed), buffers, tuple(copied), tuple(outputs), storages, ints)
        for k, out in enumerate(outputs[:self.visible]):
            if out[0] == "graph":
                self.cap.visible.setdefault(_storage_key(out[1]), []).append(k)
                if _small(out[1]):
                    self.copy_out.add(k)
        self.misses_in_row = 0
        self._count("graph_captures")
        outs = self._replay(args)
        if outs is None:  # cannot happen: inputs were just recorded in place
            self.cap, self.off = None, True
            return self.fn(*args)
        return outs

    def _uncaptured(self, failure: str, args):
        """After a failed capture (``record`` gave back the graph and its pool, the
        caller dropped the input copies and the error's frames): the unused blocks go
        back to the driver, one warning per cause, and the graph runs as usual from now
        on, never captured again (a capture that ran out of memory would again)."""
        self.off, self.failure = True, failure
        self._count("graph_capture_failures")
        release_cached()
        warn_once(f"cuda graph: {failure.split(':')[0]}", f"capturing a {self.role} graph failed ({failure}); "
                                                          "its memory is released and it runs uncaptured")
        return self.fn(*args)

    # -- replay ----------------------------------------------------------------------
    def _replay(self, args):
        cap = self.cap
        for i, value in cap.ints:
            if args[i] != value:  # recorded at other sizes (``SizedGraphs`` keys by them)
                return None
        for i, ptr, stride in cap.fixed:
            x = args[i]
            if x.data_ptr() != ptr or x.stride() != stride:
                self.misses_in_row += 1
                if self.misses_in_row >= MISSES_BEFORE_RECAPTURE:
                    self.cap = None  # capture again at the next call
                return None
        for key, count in cap.storages:
            if _use_count(key) != count:  # a previous output is still held
                self.copy_out.update(cap.visible.get(key, ()))  # the caller keeps those: copy them out
                return None
        self.misses_in_row = 0
        if cap.copied:
            foreach_copy_(cap.buffers, [args[i] for i in cap.copied])
        cap.graph.replay()
        self._count("graph_replays")
        outs, fresh, kept = [], [], []
        for k, out in enumerate(cap.outputs):
            kind = out[0]
            if kind == "graph" and k in self.copy_out:
                o = torch.empty_like(out[1])
                fresh.append(o)
                kept.append(out[1])
                outs.append(o)
            elif kind == "graph":
                outs.append(out[1].detach())
            elif kind == "input":
                _, pos, size, stride, delta = out
                x = args[pos]
                outs.append(_reinterpret(x, size, stride, delta))
            else:
                outs.append(out[1])
        if fresh:
            foreach_copy_(fresh, kept)
        return outs


def _is_size(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _reserved() -> int:
    """Device memory PyTorch's caching allocator holds, bytes (0 without CUDA)."""
    return torch.cuda.memory_reserved() if torch.cuda.is_available() else 0


def _available(release=False) -> tuple:
    """``(free, total)`` bytes of the current device as the driver counts them; with
    ``release``, after the caching allocator has handed back the blocks it holds
    unused (its count of those would include the recordings' own pools, which no
    other allocation can use)."""
    if release:
        torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()


def size_key(args) -> tuple:
    """What a call's graph was recorded at: each tensor's sizes and strides, each size's value."""
    return tuple([(x.shape, x.stride()) if isinstance(x, torch.Tensor) else x for x in args])


class SizedGraphs:
    """A training graph with symbolic sizes (``symbolic``) replayed as one CUDA graph
    per size: a ``GraphedCall`` per ``size_key``, each with its own warm-up, capture,
    checks and counts, as for a graph of fixed sizes.  Each recording has its own
    memory pool (its buffers are the graph's at that size), so the recordings of all
    sizes add up: a new size is recorded while the device keeps ``MEMORY_RESERVE``
    of its memory free after it (judged by the graph's largest recording so far) and
    while fewer than ``MAX_SIZES`` are; every other size runs as usual
    (``graph_sizes_uncaptured`` counts those calls).  Why: at a length met before, a
    variable-length training step is otherwise host-bound (docs/TUNING.md#cuda-graph-sizes)."""

    def __init__(self, fn, capture=None, *, role="backward", visible=0, mutated=frozenset(), available=None):
        mark_boxed(self)
        self.fn = fn
        self._capture_fn = capture
        self.role, self.visible, self.mutated = role, visible, frozenset(mutated)
        self._available = available or _available
        self.by_size: dict = {}

    def __call__(self, args):
        key = size_key(args)
        call = self.by_size.get(key)
        if call is None:
            if len(self.by_size) >= MAX_SIZES:
                STATS["graph_sizes_uncaptured"] += 1
                STATS[f"graph_sizes_uncaptured_{self.role}"] += 1
                return self.fn(*args)
            call = self.by_size[key] = GraphedCall(self.fn, self._capture_fn, role=self.role, visible=self.visible,
                                                   mutated=self.mutated, room=self._room)
        return call(args)

    def _room(self) -> bool:
        largest = max((c.footprint for c in self.by_size.values()), default=0)
        free, total = self._available()
        if free - largest >= MEMORY_RESERVE * total:
            return True
        free, total = self._available(release=True)  # the cache's unused blocks count as free
        return free - largest >= MEMORY_RESERVE * total

    @property
    def captured(self) -> int:
        """The sizes recorded and replaying."""
        return sum(1 for c in self.by_size.values() if c.cap is not None)
