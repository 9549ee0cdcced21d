"""A compiled backward graph replayed as one CUDA graph, when that is safe.

Why: a BERT-base training step is host-bound: the forward and backward launch
about half as much kernel time as they take host time (docs/TUNING.md#host-time), and
the backward is the larger half: some 90 fused-region calls, 200 matmuls and their
views, each a few microseconds of Python and a CUDA launch.  Replayed as a CUDA
graph, the whole backward is one launch; the GPU then runs it while the host goes
on to the optimizer and the next forward.

Only backward graphs (AOTAutograd's ``bw_compiler``) are graphed, and only those
that draw no random numbers (pyfuser draws dropout's seeds on the host, so a replay
would repeat one mask; the backward reads the forward's saved mask instead) and
whose every input and value is a CUDA tensor (a CPU computation would not be
replayed).  The forward runs as before.

A replay computes into the addresses the capture used, so three things are checked
on every call, and any that fails runs the graph as usual (``misses``), never a
stale or overwritten result:

* **inputs**: every input must be at the address and strides it had at capture.
  The forward runs eagerly, and PyTorch's caching allocator hands a repeated
  sequence of requests the same blocks, so a training loop's saved tensors land
  where the captured step's did (two models of one architecture, trained in turns,
  even share one graph: their activations take the same blocks).  Inputs of at most
  ``SMALL_INPUT_BYTES`` are not checked but copied into buffers of the graph, in one
  ``_foreach_copy_`` per replay: small blocks move between steps as soon as the loop
  keeps something small (its losses), and letting each small input move once before
  copying it used up the captures on BERT (0.15 replays per step instead of 0.95).
  After ``MISSES_BEFORE_RECAPTURE`` calls in a row with a large input elsewhere the
  graph is captured again; at most ``MAX_CAPTURES`` captures, then it runs as usual.
* **outputs**: the graph's outputs (the parameters' gradients) are handed out as
  fresh views of its buffers, which autograd may keep as ``.grad``.  The next replay
  overwrites those buffers, so it waits until nothing but the graph holds them: the
  buffers' storage use counts must be back to what they were right after capture
  (``zero_grad(set_to_none=True)``, PyTorch's default, releases them; gradient
  accumulation, or a kept view of a gradient, makes the step run as usual).
* an output that is an input (or a view of one) is rebuilt from this call's input.

The first ``WARMUP_CALLS`` calls run as usual (kernels compile, launchers settle);
the next is captured on a side stream and replayed.  While ``PYFUSER_DUMP`` or
``PYFUSER_PROF`` is set, or a scheduler override is on, calls run as usual, so the
dumps and profiles see every region.  Under distributed training (a process group
of more than one rank, or a graph holding a collective) nothing is captured: see
``collectives.py``.  ``PYFUSER_CUDA_GRAPHS=0`` turns graphing
off, and so does the accuracy mode (``accuracy.py``).  ``stats()`` counts ``graph_captures``, ``graph_replays`` and ``graph_misses``.
"""
from __future__ import annotations

import os

import torch

from ..compat import foreach_copy_, mark_boxed, reinterpret_tensor as _reinterpret, storage_id, storage_use_count
from ..runtime.executor import fast_path_allowed
from .collectives import distributed_world, first_communication
from .region import STATS, capturing, warn_once

SMALL_INPUT_BYTES = 1 << 20
WARMUP_CALLS = 2
MISSES_BEFORE_RECAPTURE = 2
MAX_CAPTURES = 4

_use_count = storage_use_count


def enabled() -> bool:
    """Whether backward graphs may be captured (``PYFUSER_CUDA_GRAPHS``, default on)."""
    return os.environ.get("PYFUSER_CUDA_GRAPHS", "1") != "0" and torch.cuda.is_available()


def _vals(node):
    v = node.meta.get("val")
    return v if isinstance(v, (tuple, list)) else (v,)


def not_graphable(gm: torch.fx.GraphModule) -> str | None:
    """Why ``gm`` cannot be replayed as a CUDA graph, or None.  Looks at its nodes and
    those of its submodules (the fused regions' ATen graphs).  Not under distributed
    training (``collectives.py``): DDP's reducer and FSDP's hooks read and free the
    backward's tensors on their own streams, outside what a replay checks."""
    comm = first_communication(gm)
    if comm is not None:
        return f"{comm.name} communicates between ranks"
    world = distributed_world()
    if world > 1:
        return f"a process group of {world} ranks is initialized (distributed training)"
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not placeholders:
        return "no inputs"
    for n in placeholders:
        v = n.meta.get("val")
        if not isinstance(v, torch.Tensor) or v.device.type != "cuda":
            return f"input {n.name} is not a CUDA tensor"
        if not all(isinstance(s, int) for s in (*v.shape, *v.stride())):
            return f"input {n.name} has symbolic sizes (a replay has the captured ones)"
    for mod in gm.modules():
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for n in graph.nodes:
            if n.op != "call_function":
                continue
            tags = getattr(n.target, "tags", ())
            if torch.Tag.nondeterministic_seeded in tags:
                return f"{n.name} draws random numbers"
            for v in _vals(n):
                if isinstance(v, torch.Tensor) and v.device.type != "cuda" and v.dim() > 0:
                    return f"{n.name} computes on {v.device}"
    return None


def _storage_key(t: torch.Tensor) -> int:
    return storage_id(t)


class _Capture:
    """One captured graph and what a replay needs: the inputs that must be in place,
    the buffers small inputs are copied into, how to build each output."""

    def __init__(self, graph, fixed, buffers, copied, outputs, storages):
        self.graph = graph
        self.fixed = fixed  # (input position, data_ptr, strides)
        self.buffers = buffers  # list: the graph's copies of the inputs at positions ``copied``
        self.copied = copied
        self.outputs = outputs  # ("graph", tensor) | ("input", position, size, stride, offset delta) | ("value", v)
        self.storages = storages  # (storage handle, use count right after capture)


_SIDE_STREAMS: dict = {}  # device index -> the stream captures record on


def _cuda_capture(fn, args):
    """``(graph, outputs)``: ``fn(*args)`` recorded into a CUDA graph on a side stream
    of the current device (nothing runs; ``graph.replay()`` computes).  Not
    ``torch.cuda.graph``: it empties the caching allocator first, which moves the
    next steps' saved tensors away from the addresses just captured."""
    device = torch.cuda.current_device()
    stream = _SIDE_STREAMS.get(device)
    if stream is None:
        stream = _SIDE_STREAMS[device] = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    cur = torch.cuda.current_stream()
    stream.wait_stream(cur)
    with torch.cuda.stream(stream):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            outs = fn(*args)
        finally:
            graph.capture_end()
    cur.wait_stream(stream)
    return graph, outs


class GraphedBackward:
    """A boxed callable (AOTAutograd's convention: one list of arguments) running
    ``fn`` (a compiled backward graph's ``forward``) through a CUDA graph when the
    module docstring's checks pass, else as usual.  ``capture(fn, args)`` makes the
    graph (tests pass their own)."""

    def __init__(self, fn, capture=_cuda_capture):
        mark_boxed(self)  # an instance attribute: Dynamo's wrappers copy __dict__
        self.fn = fn
        self._capture_fn = capture
        self.calls = 0
        self.captures = 0
        self.misses_in_row = 0
        self.cap: _Capture | None = None
        self.off = False

    def __call__(self, args):
        self.calls += 1
        if self.off or self.calls <= WARMUP_CALLS or not fast_path_allowed():
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
            STATS["graph_misses"] += 1
            return self.fn(*args)
        return outs

    # -- capture ---------------------------------------------------------------------
    def _capture(self, args):
        args = list(args)
        if not all(isinstance(x, torch.Tensor) for x in args):
            self.off = True  # (not_graphable saw tensors only; the call disagrees)
            return self.fn(*args)
        copied, fixed, static = [], [], list(args)
        for i, x in enumerate(args):
            if x.numel() * x.element_size() <= SMALL_INPUT_BYTES:
                static[i] = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device).copy_(x)
                copied.append(i)
            else:
                fixed.append((i, x.data_ptr(), tuple(x.stride())))
        self.captures += 1
        try:
            with capturing():
                graph, outs = self._capture_fn(self.fn, static)
        except Exception as err:  # an optimization: the graph runs as usual from now on
            self.off = True
            msg = str(err).splitlines()[0] if str(err) else ""
            warn_once(f"cuda graph: {type(err).__name__}", f"capturing a backward graph failed "
                                                           f"({type(err).__name__}: {msg[:160]}); it runs uncaptured")
            return self.fn(*args)
        by_storage = {}
        for pos, x in enumerate(static):
            by_storage.setdefault(_storage_key(x), []).append(pos)
        outputs = []
        for o in outs:
            if not isinstance(o, torch.Tensor):
                outputs.append(("value", o))
                continue
            inputs = by_storage.get(_storage_key(o), [])
            pos = next((p for p in inputs if p not in copied), None)
            if pos is not None:  # a (view of a) fixed input: rebuilt from the call's own
                x = static[pos]
                outputs.append(("input", pos, tuple(o.size()), tuple(o.stride()),
                                o.storage_offset() - x.storage_offset()))
            else:
                outputs.append(("graph", o))
        buffers = [static[i] for i in copied]
        del outs, static
        storages = dict.fromkeys(_storage_key(out[1]) for out in outputs if out[0] == "graph")
        storages = tuple((k, _use_count(k)) for k in storages)
        self.cap = _Capture(graph, tuple(fixed), buffers, tuple(copied), tuple(outputs), storages)
        self.misses_in_row = 0
        STATS["graph_captures"] += 1
        outs = self._replay(args)
        if outs is None:  # cannot happen: inputs were just recorded in place
            self.cap, self.off = None, True
            return self.fn(*args)
        return outs

    # -- replay ----------------------------------------------------------------------
    def _replay(self, args):
        cap = self.cap
        for i, ptr, stride in cap.fixed:
            x = args[i]
            if x.data_ptr() != ptr or x.stride() != stride:
                self.misses_in_row += 1
                if self.misses_in_row >= MISSES_BEFORE_RECAPTURE:
                    self.cap = None  # capture again at the next call
                return None
        for key, count in cap.storages:
            if _use_count(key) != count:  # a previous output is still held
                return None
        self.misses_in_row = 0
        if cap.copied:
            foreach_copy_(cap.buffers, [args[i] for i in cap.copied])
        cap.graph.replay()
        STATS["graph_replays"] += 1
        outs = []
        for out in cap.outputs:
            kind = out[0]
            if kind == "graph":
                outs.append(out[1].detach())
            elif kind == "input":
                _, pos, size, stride, delta = out
                x = args[pos]
                outs.append(_reinterpret(x, size, stride, delta))
            else:
                outs.append(out[1])
        return outs
