"""Recording a graph's run into a CUDA graph, and giving back all it took when that fails.

A recording takes device memory nothing else can use: every tensor the run makes
while it records comes from the graph's private memory pool, and the caching
allocator neither hands the pool's blocks to other tensors nor frees them until the
graph is destroyed and the pool released.  Nor can it reuse or free, while a capture
is under way, the blocks it caches outside the pool, so a recording needs fresh
device memory for everything its run allocates: on a nearly full device it is the
recording that runs out of memory, part-way through the run.

``record`` owns the attempt's CUDA side (the pool, the graph, the side stream).  When
the run, the beginning or the end of the capture fails, it ends the capture, destroys
the graph, releases the pool and puts the random generator's state back (an end that
failed leaves it counting draws as the graph's) before the error goes up: PyTorch's graph releases
its pool only after a capture that ended, and an allocator that still counts a
capture as under way no longer frees its cached blocks when it runs out.  The caller
(``graphs.GraphedCall``) then drops its copies of the inputs, ``forget``s the error
(the partial run's tensors live on in the frames of its traceback, and a region that
re-raised it holds it in a reference cycle that only the cyclic collector would
break) and calls ``release_cached`` (the released pool's blocks go back to the
driver: a module load or a library's workspace needs memory outside the allocator),
before it runs the graph as usual.  The process is left as able to train as before
the attempt.

``CudaCalls`` are the calls a recording makes; the tests pass a stand-in that keeps
PyTorch's books (pools in use, captures under way) on CPU.
"""
from __future__ import annotations

import contextlib
import traceback
import warnings

import torch

from ...compat import graph_pool_enders


class CudaCalls:
    """The CUDA side of a recording: a pool, a graph, the stream it records on, and the
    release of a pool whose capture never ended."""

    def __init__(self):
        self._streams: dict = {}  # device index -> the stream captures record on

    def pool(self):
        return torch.cuda.graph_pool_handle()

    def graph(self):
        return torch.cuda.CUDAGraph()

    @contextlib.contextmanager
    def side_stream(self):
        """Record on a side stream of the current device, ordered after the work
        already queued on the current stream, which waits for it after."""
        device = torch.cuda.current_device()
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = torch.cuda.Stream()
        cur = torch.cuda.current_stream()
        stream.wait_stream(cur)
        try:
            with torch.cuda.stream(stream):
                yield
        finally:
            cur.wait_stream(stream)

    def rng_saved(self):
        """A copy of the device's default generator's state, taken before a capture: a
        capture registers the generator, which counts its draws as the graph's from
        then on, until the capture's end says otherwise.  An end that fails (a capture
        invalidated by a synchronization or an error) never says so, and every later
        draw fails ("Offset increment outside graph capture")."""
        gen = torch.cuda.default_generators[torch.cuda.current_device()]
        try:
            return gen, gen.clone_state()
        except (AttributeError, RuntimeError):  # a torch without graph-safe states: nothing to put back
            return None

    def rng_restore(self, saved) -> None:
        """Put the state ``rng_saved`` copied back (nothing was drawn outside the graph
        meanwhile: the capture ran nothing)."""
        if saved is not None:
            gen, state = saved
            gen.graphsafe_set_state(state)

    def end_pool(self, pool) -> None:
        """Stop allocating to ``pool`` and release it: what ``capture_end`` and the
        graph's reset do for a capture that ended."""
        end, release = graph_pool_enders
        if end is None or release is None:  # pragma: no cover - a torch that names them otherwise
            return
        device = torch.cuda.current_device()
        with contextlib.suppress(RuntimeError):  # the capture's end got as far as stopping the allocations
            end(device, pool)
        with contextlib.suppress(RuntimeError):  # the capture never began allocating to it
            release(device, pool)


CUDA = CudaCalls()


def record(fn, args, cuda: CudaCalls | None = None):
    """``(graph, outputs)``: ``fn(*args)`` recorded into a CUDA graph with a private
    memory pool, on a side stream of the current device (nothing runs;
    ``graph.replay()`` computes).  Not ``torch.cuda.graph``: it empties the caching
    allocator first, which moves the next steps' saved tensors away from the
    addresses just captured.  On failure the graph and its pool are given back and
    the error raised."""
    cuda = cuda or CUDA
    pool, graph, rng = cuda.pool(), cuda.graph(), cuda.rng_saved()
    with cuda.side_stream():
        try:
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        except BaseException:
            _abandon(graph, pool, rng, cuda)
            raise
        try:
            outs = fn(*args)
        except BaseException:
            _end_quietly(graph)
            _abandon(graph, pool, rng, cuda)
            raise
        try:
            graph.capture_end()
        except BaseException:
            _abandon(graph, pool, rng, cuda)
            raise
    return graph, outs


def _end_quietly(graph) -> None:
    """End a capture whose run failed.  Torch's "the CUDA graph is empty" warning is
    muted (the caller warns with the run's error), and an end that fails (a capture
    the failure invalidated) is left to ``_abandon``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(Exception):
            graph.capture_end()


def _abandon(graph, pool, rng, cuda) -> None:
    """Destroy ``graph``, release ``pool`` and put the generator's state ``rng`` back:
    the graph's reset releases the pool of a capture that ended (``graph.pool()``
    answers only then); otherwise it is released here."""
    try:
        graph.pool()
        ended = True
    except RuntimeError:
        ended = False
    graph.reset()
    if not ended:
        cuda.end_pool(pool)
    cuda.rng_restore(rng)


def forget(err: BaseException) -> str:
    """``err``'s cause in one line (its type and first line), its traceback and those
    of the errors chained to it dropped, with their finished frames' locals: a failed
    run's tensors are freed now, not whenever the cyclic collector runs."""
    msg = str(err).splitlines()[0] if str(err) else ""
    cause = f"{type(err).__name__}: {msg[:200]}" if msg else type(err).__name__
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if err.__traceback__ is not None:
            traceback.clear_frames(err.__traceback__)  # (the frames still running are skipped)
            err.__traceback__ = None
        err = err.__cause__ or err.__context__
    return cause


def release_cached() -> None:
    """Hand the caching allocator's unused blocks back to the driver, a released
    pool's among them (CUDA only)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
