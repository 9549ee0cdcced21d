"""When a backward graph may be replayed as a CUDA graph (``dynamo/graphs.py``).

CUDA graphs need a GPU (``test_gpu.py`` runs the real thing); here a stand-in
capture plays the graph's part on CPU tensors with a CUDA graph's memory semantics:
a replay reruns the function on the tensors recorded at capture (the same
addresses; the test changes their contents in place, as a training loop's saved
tensors come back at the same addresses) and writes the results into the recorded
outputs' memory.  So every check the wrapper makes before a replay is exercised:
inputs in place, outputs no longer held, outputs that are inputs, small inputs
copied, capture again after address misses."""
import gc
import warnings

import pytest
import torch

import pyfuser.dynamo as pd
from pyfuser.dynamo import graphs


class FakeGraph:
    def __init__(self, fn, args, outs):
        self.fn, self.args, self.outs = fn, args, outs

    def replay(self):
        for o, new in zip(self.outs, self.fn(*self.args)):
            if isinstance(o, torch.Tensor) and o.data_ptr() != new.data_ptr():
                o.copy_(new)


def fake_capture(fn, args):
    outs = fn(*args)
    return FakeGraph(fn, list(args), outs), outs


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
    wrapped = graphs.GraphedBackward(backward_like, capture=fake_capture)
    run_steps(wrapped, w, saved, steps=8)
    s = pd.stats()
    assert s["graph_captures"] == 1 and s.get("graph_misses", 0) == 0
    assert s["graph_replays"] == 1 + 8 - SETTLED


def test_a_held_output_is_never_overwritten():
    pd.reset()
    w, saved, _ = fresh()
    wrapped = graphs.GraphedBackward(backward_like, capture=fake_capture)
    kept = run_steps(wrapped, w, saved, steps=8, keep=True)
    for got, want in kept:  # each result kept its own values
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    assert pd.stats()["graph_misses"] == 8 - SETTLED


def test_a_kept_view_of_a_gradient_blocks_the_replay():
    pd.reset()
    w, saved, _ = fresh()
    wrapped = graphs.GraphedBackward(backward_like, capture=fake_capture)
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
    wrapped = graphs.GraphedBackward(backward_like, capture=fake_capture)
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
    wrapped = graphs.GraphedBackward(passthrough, capture=fake_capture)
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
    wrapped = graphs.GraphedBackward(passthrough, capture=fake_capture)
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
    wrapped = graphs.GraphedBackward(backward_like, capture=fake_capture)
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
    wrapped = graphs.GraphedBackward(backward_like, capture=failing_capture)
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
