"""When a forward or backward graph may be replayed as a CUDA graph (``dynamo/regions/graphs.py``).

CUDA graphs need a GPU (``test_gpu.py`` runs the real thing); here a stand-in
capture plays the graph's part on CPU tensors with a CUDA graph's memory semantics:
a replay reruns the function on the tensors recorded at capture (the same
addresses; the test changes their contents in place, as a training loop's saved
tensors come back at the same addresses) and writes the results into the recorded
outputs' memory.  So every check the wrapper makes before a replay is exercised:
inputs in place, outputs no longer held, outputs that are inputs, small inputs
copied, capture again after address misses."""
import copy
import gc
import warnings

import pytest
import torch

import pyfuser.dynamo as pd
from pyfuser.dynamo.regions import graphs


class FakeGraph:
    """A replay reruns ``fn`` on the recorded arguments.  A real graph holds no tensor,
    it reads the addresses it recorded, so an argument in another live capture's
    output buffer is read through that capture, not held (holding it would keep the
    buffer's use count up and block the other graph's replays)."""

    def __init__(self, fn, args, outs):
        owners = {graphs._storage_key(o[1]): (g, j) for g in list(graphs._LIVE) if g.cap is not None
                  for j, o in enumerate(g.cap.outputs) if o[0] == "graph"}
        self.found = [owners.get(graphs._storage_key(a)) if isinstance(a, torch.Tensor) else None for a in args]
        self.views = [None if f is None else (a.size(), a.stride(), a.storage_offset() - self._buffer(f).storage_offset())
                      for a, f in zip(args, self.found)]
        self.fn, self.outs = fn, outs
        self.args = [None if f else a for a, f in zip(args, self.found)]

    @staticmethod
    def _buffer(found):
        graph, j = found
        return graph.cap.outputs[j][1]

    def replay(self):
        now = [a if f is None else graphs._reinterpret(self._buffer(f), *v)
               for a, f, v in zip(self.args, self.found, self.views)]
        for o, new in zip(self.outs, self.fn(*now)):
            if isinstance(o, torch.Tensor) and o.data_ptr() != new.data_ptr():
                o.copy_(new)


def fake_capture(fn, args):
    outs = fn(*args)
    return FakeGraph(fn, list(args), outs), outs


def effect_free_capture(fn, args):
    """``fake_capture`` for a function that writes its inputs: a real capture runs
    nothing, so the inputs are put back as they were."""
    before = [a.clone() for a in args]
    graph, outs = fake_capture(fn, args)
    with torch.no_grad():
        for a, b in zip(args, before):
            a.copy_(b)
    return graph, outs


def failing_capture(fn, args):
    raise RuntimeError("operation not permitted when stream is capturing")


@pytest.fixture(autouse=True)
def _small_inputs_tiny(monkeypatch):
    monkeypatch.setattr(graphs, "SMALL_INPUT_BYTES", 64)


def backward_like(w, saved, tangent):
    """Two 'gradients' from a large saved tensor, a large weight and a small tangent."""
    return [(saved * tangent.sum()).sum(0), w * saved.mean(), None]


def fresh(n=256):
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 8, generator=g), torch.randn(n, 8, generator=g), torch.randn(4, generator=g)


TANGENTS = []  # every tangent kept: each call's is at a new address, as when a loop keeps its losses


def run_steps(wrapped, w, saved, steps=6, keep=False):
    """Calls ``wrapped`` as a training loop would: new contents in the same saved
    tensor, a new small tangent each step; checks each result against the function."""
    kept = []
    for k in range(steps):
        saved.copy_(torch.randn(saved.shape, generator=torch.Generator().manual_seed(100 + k)))
        tangent = torch.randn(4, generator=torch.Generator().manual_seed(200 + k))
        TANGENTS.append(tangent)
        want = backward_like(w, saved, tangent)
        got = wrapped([w, saved, tangent])
        assert got[2] is None
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
        if keep:
            kept.append((got, want))
        del got
    return kept


# Call 3 (after two warm-up calls) captures, copying the small tangent (at a new
# address in every call); later calls replay.
SETTLED = graphs.WARMUP_CALLS + 1


def test_replays_after_warmup_and_matches_the_function():
    pd.reset()
    w, saved, _ = fresh()
    wrapped = graphs.GraphedCall(backward_like, capture=fake_capture)
    run_steps(wrapped, w, saved, steps=8)
    s = pd.stats()
    assert s["graph_captures"] == 1 and s.get("graph_misses", 0) == 0
    assert s["graph_replays"] == 1 + 8 - SETTLED


def test_a_held_output_is_never_overwritten():
    pd.reset()
    w, saved, _ = fresh()
    wrapped = graphs.GraphedCall(backward_like, capture=fake_capture)
    kept = run_steps(wrapped, w, saved, steps=8, keep=True)
    for got, want in kept:  # each result kept its own values
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    assert pd.stats()["graph_misses"] == 8 - SETTLED


def test_a_kept_view_of_a_gradient_blocks_the_replay():
    pd.reset()
    w, saved, _ = fresh()
    wrapped = graphs.GraphedCall(backward_like, capture=fake_capture)
    run_steps(wrapped, w, saved, steps=SETTLED)
    tangent = torch.ones(4)
    got = wrapped([w, saved, tangent])
    view = got[0][:3]  # the gradient itself dropped, a view of it kept
    before = view.clone()
    del got
    gc.collect()
    saved.mul_(3)
    again = wrapped([w, saved, tangent])
    torch.testing.assert_close(view, before, rtol=0, atol=0)
    torch.testing.assert_close(again[0], backward_like(w, saved, tangent)[0], rtol=0, atol=0)
    assert pd.stats()["graph_misses"] == 1


def test_inputs_elsewhere_run_as_usual_then_capture_again():
    pd.reset()
    w, saved, _ = fresh()
    wrapped = graphs.GraphedCall(backward_like, capture=fake_capture)
    run_steps(wrapped, w, saved, steps=SETTLED)
    moved = saved.clone()  # the large saved tensor at another address from now on
    run_steps(wrapped, w, moved, steps=5)
    s = pd.stats()
    assert s["graph_captures"] == 2 and s["graph_misses"] == graphs.MISSES_BEFORE_RECAPTURE
    assert s["graph_replays"] == 1 + 5 - graphs.MISSES_BEFORE_RECAPTURE


def test_an_output_that_is_an_input_is_the_call_s_own():
    def passthrough(x, y):
        return [x[1:], y * 2]

    pd.reset()
    wrapped = graphs.GraphedCall(passthrough, capture=fake_capture)
    x, y, _ = fresh()
    for k in range(5):
        x.add_(1)
        got = wrapped([x, y])
        assert got[0].data_ptr() == x[1:].data_ptr()
        torch.testing.assert_close(got[0], x[1:], rtol=0, atol=0)
        torch.testing.assert_close(got[1], y * 2, rtol=0, atol=0)
        del got
    assert pd.stats()["graph_replays"] == 5 - graphs.WARMUP_CALLS


def test_an_output_viewing_an_input_at_an_offset_is_the_call_s_own():
    """The input itself starts past its storage's first element (a split's part):
    the rebuilt view's offset is relative to it, counted once."""
    def passthrough(x, y):
        return [x[1:], y * 2]

    pd.reset()
    wrapped = graphs.GraphedCall(passthrough, capture=fake_capture)
    base, y, _ = fresh()
    x = base[3:]
    for k in range(5):
        x.add_(1)
        got = wrapped([x, y])
        assert got[0].data_ptr() == x[1:].data_ptr()
        torch.testing.assert_close(got[0], x[1:], rtol=0, atol=0)
        del got
    assert pd.stats()["graph_replays"] == 5 - graphs.WARMUP_CALLS


def test_dumps_and_profiles_see_every_call(monkeypatch):
    pd.reset()
    w, saved, _ = fresh()
    wrapped = graphs.GraphedCall(backward_like, capture=fake_capture)
    run_steps(wrapped, w, saved, steps=SETTLED + 1)
    replays = pd.stats()["graph_replays"]
    monkeypatch.setenv("PYFUSER_DUMP", "segmented_fusion")
    run_steps(wrapped, w, saved, steps=2)
    assert pd.stats()["graph_replays"] == replays
    monkeypatch.delenv("PYFUSER_DUMP")
    run_steps(wrapped, w, saved, steps=1)
    assert pd.stats()["graph_replays"] == replays + 1


def test_a_failed_capture_warns_once_and_runs_as_usual():
    pd.reset()
    w, saved, _ = fresh()
    wrapped = graphs.GraphedCall(backward_like, capture=failing_capture)
    with pytest.warns(pd.FallbackWarning, match="capturing a backward graph failed"):
        run_steps(wrapped, w, saved, steps=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_steps(wrapped, w, saved, steps=2)
    assert wrapped.off and pd.stats().get("graph_replays", 0) == 0


def test_which_graphs_may_be_captured():
    def traced(fn, *args):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx

        return make_fx(fn, tracing_mode="fake")(*args)

    x = torch.randn(4, 4)
    assert "not a CUDA tensor" in graphs.not_graphable(traced(lambda a: a * 2, x))
    if torch.cuda.is_available():  # pragma: no cover - the GPU machine
        xc = x.cuda()
        assert graphs.not_graphable(traced(lambda a: a * 2, xc)) is None
        assert "random" in graphs.not_graphable(traced(lambda a: torch.rand_like(a) * a, xc))


# -- forward graphs ---------------------------------------------------------------------
def forward_like(w, batch):
    """A training forward's outputs: the caller's (a loss and logits), then a saved tensor."""
    logits = batch @ w
    return [logits.square().mean(), logits, torch.tanh(logits)]


def _all_equal(got, want):  # (a function: a loop variable would hold a buffer into the next call)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def forward_steps(wrapped, w, steps=6, hold_saved=False):
    """A training loop: a new batch at a new address each step; the previous step's
    outputs are still held when the next forward runs (``out = model(x)`` is assigned
    after the call), the saved tensor is dropped by its 'backward' unless
    ``hold_saved``."""
    previous, held = None, []
    for k in range(steps):
        batch = torch.randn(16, 8, generator=torch.Generator().manual_seed(300 + k))
        with torch.no_grad():
            want = forward_like(w, batch)
            got = wrapped([w, batch])
        _all_equal(got, want)
        if previous is not None:  # the last step's caller outputs kept their values
            _all_equal(*previous)
        if hold_saved:
            held.append(got[2])
        previous = (got[:2], want[:2])
        del got
    return held


def test_a_forward_replays_with_the_caller_holding_its_last_outputs():
    pd.reset()
    w = torch.nn.Parameter(torch.randn(8, 8))
    wrapped = graphs.GraphedCall(forward_like, capture=fake_capture, role="forward", visible=2)
    forward_steps(wrapped, w, steps=8)
    s = pd.stats()
    # the first replay hands out the logits' buffer; the next call finds it held, runs
    # as usual, and the logits are copied out from then on (the loss from the start)
    assert s["graph_captures_forward"] == 1 and s["graph_misses_forward"] == 1
    assert s["graph_replays_forward"] == 8 - SETTLED
    assert wrapped.cap.copied == (1,)  # the batch is copied in, the parameter pinned
    assert wrapped.copy_out == {0, 1}


def test_a_forward_whose_caller_drops_its_outputs_hands_out_the_buffers():
    pd.reset()
    w = torch.nn.Parameter(torch.randn(8, 8))
    wrapped = graphs.GraphedCall(forward_like, capture=fake_capture, role="forward", visible=2)
    ptrs = set()
    for k in range(7):
        batch = torch.randn(16, 8, generator=torch.Generator().manual_seed(400 + k))
        with torch.no_grad():
            want = forward_like(w, batch)
            got = wrapped([w, batch])
        _all_equal(got, want)
        if k >= SETTLED - 1:
            ptrs.add(got[1].data_ptr())
        del got
    assert len(ptrs) == 1 and wrapped.copy_out == {0}  # the logits are the buffer; only the loss is copied
    assert pd.stats().get("graph_misses", 0) == 0


def test_a_forward_without_visible_outputs_never_overwrites_what_the_caller_holds():
    """The same loop with no output counted as the caller's: the logits the caller
    still holds block every other replay (those calls run as usual, and the held
    values stay), which is what ``visible`` is for."""
    pd.reset()
    w = torch.nn.Parameter(torch.randn(8, 8))
    wrapped = graphs.GraphedCall(forward_like, capture=fake_capture, role="forward", visible=0)
    forward_steps(wrapped, w, steps=8)
    s = pd.stats()
    assert s["graph_misses_forward"] == 3 and s["graph_replays_forward"] == 3  # calls 4, 6, 8 miss


def test_a_held_saved_tensor_blocks_the_forward_replay():
    pd.reset()
    w = torch.nn.Parameter(torch.randn(8, 8))
    wrapped = graphs.GraphedCall(forward_like, capture=fake_capture, role="forward", visible=2)
    held = forward_steps(wrapped, w, steps=7, hold_saved=True)
    assert pd.stats()["graph_misses_forward"] == 7 - SETTLED
    for k, t in enumerate(held):  # each kept its own values
        batch = torch.randn(16, 8, generator=torch.Generator().manual_seed(300 + k))
        torch.testing.assert_close(t, torch.tanh(batch @ w.detach()), rtol=0, atol=0)


def test_an_input_the_graph_writes_is_pinned_and_written():
    """A graph that updates a (small, non-parameter) input in place: the replay must
    write the caller's tensor, not a copy of it."""
    def counting(w, count):
        count.add_(1)
        return [w * count]

    pd.reset()
    w, count = torch.nn.Parameter(torch.randn(4)), torch.zeros(4)
    wrapped = graphs.GraphedCall(counting, capture=effect_free_capture, role="forward", visible=1, mutated={1})
    for k in range(6):
        with torch.no_grad():
            got = wrapped([w, count])
        torch.testing.assert_close(count, torch.full((4,), k + 1.0), rtol=0, atol=0)
        torch.testing.assert_close(got[0], w.detach() * (k + 1), rtol=0, atol=0)
    assert pd.stats()["graph_replays_forward"] == 6 - graphs.WARMUP_CALLS


def loss_like(logits):
    return [logits.square().mean() * 3, torch.softmax(logits, -1)]


def test_an_input_another_graph_wrote_is_pinned_not_copied():
    """A loss graph after a graph break takes the model graph's logits, which come back
    in the model graph's buffer at each of its replays: it reads them there instead of
    copying them into a buffer of its own.  A step whose caller keeps the logits makes
    the model graph copy them out from then on; the loss graph then finds its input
    elsewhere, runs as usual and is captured again, copying it."""
    pd.reset()
    w = torch.nn.Parameter(torch.randn(8, 8))
    model = graphs.GraphedCall(forward_like, capture=fake_capture, role="forward", visible=2)
    loss = graphs.GraphedCall(loss_like, capture=fake_capture, role="forward", visible=2)
    kept = []
    for k in range(12):
        batch = torch.randn(16, 8, generator=torch.Generator().manual_seed(500 + k))
        with torch.no_grad():
            got = loss([model([w, batch])[1]])
            want = loss_like(batch @ w.detach())
        _all_equal(got, want)
        if k == SETTLED:
            assert loss.cap.copied == ()  # the logits are read in the model graph's buffer
            assert pd.stats()["graph_replays_forward"] == 2 * (k + 1 - graphs.WARMUP_CALLS)
            kept = model([w, batch])  # the caller keeps the model's outputs past its next call
        del got
    _all_equal(kept, forward_like(w.detach(), torch.randn(16, 8, generator=torch.Generator().manual_seed(500 + SETTLED))))
    assert loss.captures == 2 and loss.cap.copied == (0,)
    assert model.copy_out == {0, 1}


def _fx(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*args)


def test_mutated_inputs_follow_views_and_submodules():
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    assert graphs.mutated_inputs(_fx(lambda a, b: a + b, x, y)) == frozenset()
    assert graphs.mutated_inputs(_fx(lambda a, b: a.add_(b), x.clone(), y)) == {0}
    assert graphs.mutated_inputs(_fx(lambda a, b: b[1].mul_(2), x, y.clone())) == {1}
    inner = _fx(lambda a, b: b.t().copy_(a), x, y.clone())
    outer = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    outer.add_submodule("region", inner)
    g = outer.graph
    p, q = g.placeholder("p"), g.placeholder("q")
    g.output(g.call_module("region", (q, p)))
    outer.recompile()
    assert graphs.mutated_inputs(outer) == {0}  # the region writes its second input, the outer first


def _train_against_eager(monkeypatch, batch_sizes, dynamic=False, keep_last_out=True):
    """An MLP trained through the backend with the stand-in capture (CPU tensors pass
    for CUDA ones here) at the given batch sizes; its losses and gradients checked
    against eager's at every step.  ``keep_last_out``: the loop's ``out`` holds the
    last step's output while the next forward runs.  Returns the Dynamo graphs compiled."""
    monkeypatch.setattr(graphs, "enabled", lambda: True)
    monkeypatch.setattr(graphs, "not_graphable", lambda gm: None)
    monkeypatch.setattr(graphs, "_cuda_capture", fake_capture)
    monkeypatch.setattr(graphs, "_available", _plenty)
    monkeypatch.setattr(graphs, "SMALL_INPUT_BYTES", 1 << 20)
    monkeypatch.setenv("PYFUSER_CHECK", "0")
    torch._dynamo.reset()
    pd.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="pyfuser", dynamic=dynamic)
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    out = None
    for k, n in enumerate(batch_sizes):
        g = torch.Generator().manual_seed(k)
        x, y = torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g)
        out = compiled(x)
        torch.nn.functional.cross_entropy(out, y).backward()
        want = reference(x)
        torch.nn.functional.cross_entropy(want, y).backward()
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
            p.grad = q.grad = None
        if not keep_last_out:
            out = None
    return torch._dynamo.utils.counters["stats"]["unique_graphs"] - before


def test_the_backend_replays_a_training_loop_s_forward_and_backward(monkeypatch):
    """The backend end to end: the forward knows its caller's outputs from AOTAutograd
    (the loop holds the last output while the next forward runs), the backward's
    inputs are the forward replay's buffers."""
    _train_against_eager(monkeypatch, [8] * 7)
    s = pd.stats()
    assert s["graph_replays_forward"] == 7 - graphs.WARMUP_CALLS and s.get("graph_misses", 0) == 0
    assert s["graph_replays_backward"] == 7 - graphs.WARMUP_CALLS


# -- graphs with symbolic sizes: one recording per size ------------------------------------
def sized_backward(w, saved, tangent, n):
    """``backward_like`` at ``n`` rows, the size given as an argument as a symbolic graph's is."""
    return [(saved[:n] * tangent.sum()).sum(0), w[:n] * saved[:n].mean(), None]


def sized_steps(wrapped, w, saved_by_size, sizes):
    """A variable-length loop: each size's saved tensor comes back at its own address (a
    forward replay at that size hands out its buffers), new contents every step."""
    for k, n in enumerate(sizes):
        saved = saved_by_size[n]
        saved.copy_(torch.randn(saved.shape, generator=torch.Generator().manual_seed(100 + k)))
        tangent = torch.randn(4, generator=torch.Generator().manual_seed(200 + k))
        TANGENTS.append(tangent)
        want = sized_backward(w, saved, tangent, n)
        got = wrapped([w, saved, tangent, n])
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
        del got


def _plenty(release=False):
    return 1 << 40, 1 << 40


def test_each_size_is_recorded_once_and_replayed_at_that_size():
    pd.reset()
    w = torch.randn(256, 8)
    saved = {n: torch.randn(n, 8) for n in (100, 120, 140)}
    wrapped = graphs.SizedGraphs(sized_backward, capture=fake_capture, available=_plenty)
    rounds = 5
    sized_steps(wrapped, w, saved, [100, 120, 140] * rounds)
    s = pd.stats()
    assert s["graph_captures"] == 3 and s.get("graph_misses", 0) == 0
    assert s["graph_replays"] == 3 * (rounds - graphs.WARMUP_CALLS) and wrapped.captured == 3


def test_a_size_is_not_recorded_without_room_for_it():
    pd.reset()
    w = torch.randn(256, 8)
    saved = {n: torch.randn(n, 8) for n in (100, 120)}
    total = 1000
    room = {}  # after size 100's recording the device is short of memory
    released = []

    def available(release=False):
        released.append(release)
        return room.get("now", 900), total

    def capture(fn, args):
        room["now"] = 200  # this recording took the memory
        return fake_capture(fn, args)

    wrapped = graphs.SizedGraphs(sized_backward, capture=capture, available=available)
    sized_steps(wrapped, w, saved, [100, 120] * 5)
    s = pd.stats()
    assert s["graph_captures"] == 1 and wrapped.captured == 1
    assert s["graph_sizes_uncaptured"] == 5 - graphs.WARMUP_CALLS  # size 120's calls after its warm-up
    assert released == [False, False, True]  # asked again after the cache's unused blocks went back


def test_sizes_past_the_limit_run_as_usual(monkeypatch):
    monkeypatch.setattr(graphs, "MAX_SIZES", 2)
    pd.reset()
    w = torch.randn(256, 8)
    saved = {n: torch.randn(n, 8) for n in (100, 120, 140)}
    wrapped = graphs.SizedGraphs(sized_backward, capture=fake_capture, available=_plenty)
    sized_steps(wrapped, w, saved, [100, 120, 140] * 4)
    s = pd.stats()
    assert s["graph_captures"] == 2 and s["graph_sizes_uncaptured"] == 4


def test_a_recording_never_replays_at_other_sizes():
    """A fixed-size wrapper given a size argument checks it: a replay has the recorded value."""
    pd.reset()
    w, saved = torch.randn(256, 8), torch.randn(256, 8)
    wrapped = graphs.GraphedCall(sized_backward, capture=fake_capture)
    sized_steps(wrapped, w, {n: saved for n in (100, 120)}, [100] * SETTLED + [120, 100, 120])
    s = pd.stats()
    assert s["graph_captures"] == 1 and s["graph_replays"] == 2 and s["graph_misses"] == 2


def test_graphs_traced_with_symbolic_sizes_are_recorded_per_size():
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(4, 4)
    assert graphs.symbolic(make_fx(lambda a: a * 2, tracing_mode="symbolic")(x))
    assert not graphs.symbolic(make_fx(lambda a: a * 2, tracing_mode="fake")(x))


def test_the_backend_replays_a_variable_batch_loop_per_size(monkeypatch):
    """Dynamic shapes end to end: batches of three sizes in turn, compiled with symbolic
    sizes once; each size's forward and backward are recorded once and replayed."""
    compiled = _train_against_eager(monkeypatch, [8, 12, 6] * 4, dynamic=True, keep_last_out=False)
    s = pd.stats()
    assert compiled == 1  # no recompile
    assert s["graph_captures_forward"] == 3 and s["graph_captures_backward"] == 3
    assert s["graph_replays_forward"] == 3 * (4 - graphs.WARMUP_CALLS) and s.get("graph_misses", 0) == 0
    assert s["graph_replays_backward"] == 3 * (4 - graphs.WARMUP_CALLS)
