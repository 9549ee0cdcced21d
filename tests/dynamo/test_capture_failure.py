"""A CUDA-graph recording that fails gives back everything it took (``dynamo/regions/recording.py``).

On CPU a stand-in for the CUDA calls (``FakeCuda``) keeps PyTorch's books the way its
caching allocator and ``CUDAGraph`` do: the pools in use (a graph's reset releases
its pool only after a capture that ended) and the captures under way (an allocator
with one under way stops freeing its cached blocks).  The failure is injected where
it happens on a nearly full device: an out-of-memory error part-way through the
recorded run, or a capture that the failure invalidated.  Released means: every pool
back to no users, no capture left under way, and weak references to the graph, the
copies of the inputs and the tensors the failed run made dead, with the cyclic
garbage collector off (so nothing waits for it), before the graph runs again.  The
``gpu`` tests do the same on a device, with the allocator's own statistics.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import gc
import warnings
import weakref

import pytest
import torch

import pyfuser.dynamo as pd
from pyfuser.dynamo.regions import graphs, recording, region
from pyfuser.runtime.program import Program

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


class FakeCudaGraph:
    """``torch.cuda.CUDAGraph``'s pool bookkeeping, nothing recorded."""

    def __init__(self, cuda):
        self.cuda, self._pool, self.ended = cuda, None, False

    def capture_begin(self, pool, capture_error_mode):
        self.cuda.users[pool.n] = self.cuda.users.get(pool.n, 0) + 1
        self.cuda.underway.add(pool.n)
        self.cuda.rng_in_graph = True  # the generator counts draws as the graph's
        self._pool = pool

    def capture_end(self):
        if self.cuda.invalidated:  # cudaStreamEndCapture fails: the allocations still go to the pool
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        self.cuda.underway.discard(self._pool.n)
        self.cuda.rng_in_graph = False
        self.ended = True

    def pool(self):
        if not self.ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool

    def reset(self):
        if self.ended:
            self.cuda.users[self._pool.n] -= 1
            self.ended = False


class FakePool:
    def __init__(self, n):
        self.n = n  # the books hold this, not the handle


class FakeCuda(recording.CudaCalls):
    def __init__(self, invalidated=False):
        super().__init__()
        self.users: dict = {}  # pool number -> graphs using it
        self.underway: set = set()  # pool numbers
        self.invalidated = invalidated
        self.made: list = []  # weak references to the graphs and pools made
        self.rng_in_graph = False  # as torch's generator state: stuck after an end that failed

    def rng_saved(self):
        return self.rng_in_graph

    def rng_restore(self, saved):
        self.rng_in_graph = saved

    def pool(self):
        p = FakePool(len(self.made))
        self.made.append(weakref.ref(p))
        return p

    def graph(self):
        g = FakeCudaGraph(self)
        self.made.append(weakref.ref(g))
        return g

    @contextlib.contextmanager
    def side_stream(self):
        yield

    def end_pool(self, pool):
        self.underway.discard(pool.n)
        if self.users.get(pool.n):
            self.users[pool.n] -= 1

    def clean(self) -> bool:
        return (not self.underway and not any(self.users.values()) and all(r() is None for r in self.made)
                and not self.rng_in_graph)


def _raise(err):
    """As a region that re-raised its error from a helper did: this frame holds the
    error, whose traceback holds this frame (a cycle)."""
    raise err


class Attempt:
    """A backward-like graph whose recorded run allocates a large tensor and then runs
    out of memory; every later call checks that nothing of that attempt is alive."""

    def __init__(self):
        self.alive: list = []  # weak references to what the failed attempt made or was given
        self.calls = 0

    def __call__(self, w, saved, tangent):
        self.calls += 1
        assert all(r() is None for r in self.alive), "the failed recording's tensors are still alive"
        if recording_now():
            scratch = torch.empty(1 << 16)  # the run's own tensor, in the graph's pool
            self.alive += [weakref.ref(scratch), weakref.ref(tangent)]  # the small tangent: the graph's copy
            _raise(torch.OutOfMemoryError(OOM))
        return [(saved * tangent.sum()).sum(0), w * saved.mean(), None]


def recording_now() -> bool:
    return region._capture.on


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("invalidated", [False, True], ids=["run_fails", "capture_invalidated"])
def test_a_recording_that_runs_out_of_memory_gives_back_all_it_took(monkeypatch, no_gc, invalidated):
    monkeypatch.setattr(graphs, "SMALL_INPUT_BYTES", 64)
    cuda = FakeCuda(invalidated)
    fn = Attempt()
    wrapped = graphs.GraphedCall(fn, capture=functools.partial(recording.record, cuda=cuda))
    w, saved = torch.randn(256, 8), torch.randn(256, 8)
    with pytest.warns(pd.FallbackWarning) as caught:
        for k in range(graphs.WARMUP_CALLS + 1):
            tangent = torch.randn(4)
            got = wrapped([w, saved, tangent])
            torch.testing.assert_close(got[0], (saved * tangent.sum()).sum(0))
    (warning,) = [c for c in caught if issubclass(c.category, pd.FallbackWarning)]
    assert f"capturing a backward graph failed (OutOfMemoryError: {OOM})" in str(warning.message)
    assert fn.alive and all(r() is None for r in fn.alive)
    assert cuda.clean(), (cuda.users, cuda.underway)
    assert wrapped.off and wrapped.cap is None and wrapped.failure.startswith("OutOfMemoryError")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):  # uncaptured from now on, without another attempt or warning
            tangent = torch.randn(4)
            got = wrapped([w, saved, tangent])
            torch.testing.assert_close(got[1], w * saved.mean())
    assert fn.calls == graphs.WARMUP_CALLS + 2 + 3 and len(cuda.made) == 2  # one graph, one pool
    s = pd.stats()
    assert s["graph_capture_failures"] == 1 and s.get("graph_captures", 0) == 0 and s.get("graph_replays", 0) == 0


def test_a_failed_beginning_releases_the_pool(no_gc):
    cuda = FakeCuda()

    def refuse(pool, capture_error_mode):
        cuda.users[pool.n] = 1  # as beginAllocateToPool before cudaStreamBeginCapture fails
        cuda.underway.add(pool.n)
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    real = cuda.graph

    def graph():
        g = real()
        g.capture_begin = refuse
        return g

    cuda.graph = graph
    try:
        recording.record(lambda x: x + 1, [torch.ones(2)], cuda=cuda)
    except RuntimeError as err:
        assert "not permitted" in recording.forget(err)
    cuda.graph = real
    assert cuda.clean()


def test_a_recording_that_succeeds_keeps_its_pool_until_the_graph_goes():
    cuda = FakeCuda()
    graph, outs = recording.record(lambda x: [x + 1], [torch.ones(2)], cuda=cuda)
    (pool,) = cuda.users
    assert cuda.users[pool] == 1 and not cuda.underway
    torch.testing.assert_close(outs[0], torch.full((2,), 2.0))
    graph.reset()
    assert cuda.users[pool] == 0


def test_forget_drops_the_frames_of_a_chained_error(no_gc):
    def failing():
        big = torch.empty(1 << 16)
        failing.big = weakref.ref(big)
        try:
            raise ValueError("first")
        except ValueError:
            _raise(torch.OutOfMemoryError(OOM + "\nmore lines"))

    try:
        failing()
    except Exception as err:
        assert recording.forget(err) == f"OutOfMemoryError: {OOM}"
        assert err.__traceback__ is None and err.__context__.__traceback__ is None
    assert failing.big() is None


def test_training_through_the_backend_after_failed_recordings_matches_eager(monkeypatch):
    """An MLP trained through the backend where every recording runs out of memory in
    a region's launch: one warning, each graph uncaptured from then on, the losses and
    gradients eager's, the books clean."""
    cuda = FakeCuda()
    real_run = Program.run

    def launch(*a, **k):
        if cuda.underway:
            _raise(torch.OutOfMemoryError(OOM))
        return real_run(*a, **k)

    monkeypatch.setattr(Program, "run", launch)
    monkeypatch.setattr(graphs, "enabled", lambda: True)
    monkeypatch.setattr(graphs, "not_graphable", lambda gm: None)
    monkeypatch.setattr(graphs, "_cuda_capture", functools.partial(recording.record, cuda=cuda))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="pyfuser")
    with pytest.warns(pd.FallbackWarning, match="capturing a forward graph failed .OutOfMemoryError"):
        for k in range(6):
            g = torch.Generator().manual_seed(k)
            x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
            loss = torch.nn.functional.cross_entropy(compiled(x), y)
            loss.backward()
            want = torch.nn.functional.cross_entropy(reference(x), y)
            want.backward()
            torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
            for p, q in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
                p.grad = q.grad = None
    s = pd.stats()
    assert s["graph_capture_failures_forward"] == 1 and s["graph_capture_failures_backward"] == 1
    assert s.get("graph_replays", 0) == 0 and s.get("fallbacks", 0) == 0
    assert cuda.clean()


def test_a_region_that_runs_out_of_memory_raises_and_stays_fused(monkeypatch):
    """Outside a recording too, running out of memory is not the region's fault: the
    error reaches the caller as from eager, with no warning, and the next call runs
    the region in pyfuser (not in ATen for good)."""
    fail = [True]
    real_run = Program.run

    def launch(*a, **k):
        if fail[0]:
            fail[0] = False
            _raise(torch.OutOfMemoryError(OOM))
        return real_run(*a, **k)

    def fn(x):
        return (x.exp() + 1).sum(-1)

    compiled = torch.compile(fn, backend="pyfuser")
    x = torch.randn(4, 8)
    compiled(x)  # compiled, and the fast path registered
    monkeypatch.setattr(Program, "run", launch)
    with pytest.raises(torch.OutOfMemoryError):
        compiled(x)
    torch.testing.assert_close(compiled(x), fn(x))
    assert pd.stats().get("fallbacks", 0) == 0


# -- on the device ------------------------------------------------------------------------
def _all_of_it_usable():
    """Whether the allocator can still give out nearly all the device's memory, freeing
    its cached blocks for it (it no longer does while it counts a capture under way)."""
    free = torch.cuda.mem_get_info()[0]
    cached = torch.empty(free // 2, dtype=torch.uint8, device="cuda")
    del cached  # cached by the allocator, not the driver's any more
    whole = torch.empty(free - (64 << 20), dtype=torch.uint8, device="cuda")
    del whole
    torch.cuda.empty_cache()
    return True


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["out_of_memory", "invalidated"])
def test_a_failed_recording_on_the_device_gives_its_memory_back(monkeypatch, how):
    """With the allocator's own statistics: a graph whose recorded run runs out of
    memory for real (a ballast leaves less free than the run allocates, while the
    allocator still caches the block the ordinary calls used) or invalidates the
    capture (a synchronization) gives back its pool: the memory allocated and, once
    the cache is emptied, reserved are what they were, and the whole device is usable."""
    monkeypatch.setattr(graphs, "SMALL_INPUT_BYTES", 64)
    n = 256 << 20

    def fn(w, saved, tangent):
        scratch = torch.zeros(n, dtype=torch.uint8, device="cuda")
        if how == "invalidated" and recording_now():
            torch.cuda.synchronize()
        return [(saved * tangent.sum()).sum(0) + scratch[0], w * saved.mean(), None]

    w, saved = torch.randn(1024, 64, device="cuda"), torch.randn(1024, 64, device="cuda")
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    wrapped = graphs.GraphedCall(fn)
    for _ in range(graphs.WARMUP_CALLS):
        wrapped([w, saved, torch.randn(4, device="cuda")])
    ballast = None
    if how == "out_of_memory":
        ballast = torch.empty(torch.cuda.mem_get_info()[0] - n // 2, dtype=torch.uint8, device="cuda")
    tangent = torch.randn(4, device="cuda")  # before the count: it outlives the call
    allocated = torch.cuda.memory_allocated()
    with pytest.warns(pd.FallbackWarning, match="capturing a backward graph failed"):
        got = wrapped([w, saved, tangent])
    torch.testing.assert_close(got[0], (saved * tangent.sum()).sum(0))
    del got
    assert torch.cuda.memory_allocated() == allocated
    assert wrapped.off and pd.stats()["graph_capture_failures"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            tangent = torch.randn(4, device="cuda")
            torch.testing.assert_close(wrapped([w, saved, tangent])[1], w * saved.mean())
    del ballast
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() - base < n // 2  # (a pool kept would hold the run's n bytes)
    assert _all_of_it_usable()
