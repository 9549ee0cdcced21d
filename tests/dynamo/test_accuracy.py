"""The backend's accuracy mode (``dynamo/report/accuracy.py``): regions, fast-path views and
rewritten graphs run beside ATen; a disagreement raises ``AccuracyError``."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import pyfuser.dynamo as pd
from pyfuser.dynamo import rules
from pyfuser.dynamo.regions import views
from pyfuser.dynamo.report import accuracy
from pyfuser.dynamo.rewrites import registry
from pyfuser.dynamo.rewrites.registry import Rewrite

aten = torch.ops.aten


def pointwise(x, w):
    return ((x @ w).relu() * 2 + 1).sum(-1)


def split_then_view(x, w):
    q, k = (x @ w).split(8, -1)
    k = k.view(2, 4, 2, 4).transpose(1, 2)
    return ((k @ k.transpose(-1, -2)) * 2 + 1).sum(), q


def inputs(*shapes, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g).to(dtype).requires_grad_() for s in shapes]


def run(fn, args, backward=True):
    out = torch.compile(fn, backend="pyfuser")(*args)
    if backward:
        out[0].sum().backward() if isinstance(out, tuple) else out.sum().backward()
    return out


def test_a_correct_model_passes_and_every_part_was_checked():
    args = inputs((2, 4, 8), (8, 16))
    want = split_then_view(*args)
    with pd.check_accuracy():
        got = run(split_then_view, [a.detach().requires_grad_() for a in args])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    s = pd.stats()
    assert s["checked_region_calls"] >= 2  # forward and backward regions
    assert s["checked_views"] > 0
    assert s["checked_graph_calls"] == 2


@pytest.mark.parametrize("env, switch, on", [("1", None, True), ("0", None, False), ("1", False, False),
                                             (None, True, True)])
def test_env_var_and_python_switch(monkeypatch, env, switch, on):
    if env is None:
        monkeypatch.delenv("PYFUSER_CHECK", raising=False)
    else:
        monkeypatch.setenv("PYFUSER_CHECK", env)
    with pd.check_accuracy(switch):
        assert accuracy.enabled() == on
        run(pointwise, inputs((4, 8), (8, 8)), backward=False)
    assert accuracy.enabled() == (env == "1")  # the switch is back to the variable at exit
    assert (pd.stats().get("checked_region_calls", 0) > 0) == on


def test_a_backward_compiled_after_the_switch_is_checked_as_its_forward():
    """AOTAutograd compiles the backward at its first call: here outside the switch."""
    with pd.check_accuracy():
        out = torch.compile(pointwise, backend="pyfuser")(*inputs((4, 8), (8, 8)))
    out.sum().backward()
    assert pd.stats()["checked_graph_calls"] == 2


def _mul_adds(monkeypatch):
    """A broken rule: ``mul`` translated as an add."""
    rule = rules.RULES[aten.mul.Tensor]
    monkeypatch.setitem(rules.RULES, aten.mul.Tensor, rules.Rule(
        lambda t, n, a: t.ops.add(a.self, a.other), rule.check, rule.compute))


def test_a_wrong_region_is_named(monkeypatch):
    _mul_adds(monkeypatch)
    args = inputs((4, 8), (8, 8))
    wrong = run(pointwise, [a.detach() for a in args], backward=False)
    assert not torch.allclose(wrong, pointwise(*args))  # without the mode: silently wrong
    torch._dynamo.reset()
    pd.reset()
    with pd.check_accuracy(), pytest.raises(pd.AccuracyError) as err:
        run(pointwise, args, backward=False)
    msg = str(err.value)
    assert "region pyfuser_region_0 of forward graph" in msg and "aten.mul.Tensor" in msg
    assert "first mismatch at index" in msg
    assert err.value.output == 0 and err.value.got != err.value.want


def test_a_wrong_view_is_named(monkeypatch):
    real = views._reinterpret  # the offset counted twice: a split's later part read past itself
    monkeypatch.setattr(views, "_reinterpret", lambda x, size, stride, delta: real(
        x, size, stride, x.storage_offset() + delta))
    with pd.check_accuracy(), pytest.raises(pd.AccuracyError) as err:
        run(split_then_view, inputs((2, 4, 8), (8, 16)))
    msg = str(err.value)
    assert "fast-path view node transpose of forward graph" in msg and "storage offset 16, ATen 8" in msg
    assert "aten.view.default -> aten.transpose.int" in msg


def _adds_become_subs(gm):
    hit = False
    for node in gm.graph.nodes:
        if node.target is aten.add.Tensor:
            node.target, hit = aten.sub.Tensor, True
    gm.recompile()
    return hit


def test_a_wrong_rewrite_outside_regions_is_caught(monkeypatch):
    """The regions match their (wrong) ATen submodules: only the graph check sees it."""
    monkeypatch.setattr(registry, "REWRITES", registry.REWRITES + (Rewrite("broken", "aten", _adds_become_subs, fresh_meta=True),))
    with pd.check_accuracy(), pytest.raises(pd.AccuracyError) as err:
        run(pointwise, inputs((4, 8), (8, 8)), backward=False)
    assert "forward graph" in str(err.value) and "outside regions" in str(err.value)
    assert pd.stats()["checked_region_calls"] >= 1


def dropout_model(x, w):
    h = x @ w
    return F.dropout(h.relu() * 2, 0.5, training=True) + 1, (h * 3).sigmoid()


def test_random_outputs_are_skipped_and_values_unchanged():
    """Outputs drawn from dropout are not compared; the model gets what it gets
    without the mode, and the generator ends where it would."""
    args = inputs((4, 8), (8, 8))
    results = []
    for on in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(1)
        with pd.check_accuracy(on):
            out = run(dropout_model, [a.detach().requires_grad_() for a in args])
        results.append((out, torch.rand(3)))
    (off, after_off), (on, after_on) = results
    for a, b in zip(off, on):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(after_off, after_on, rtol=0, atol=0)
    assert pd.stats()["checked_region_calls"] >= 2


def mutating(x, y):
    x.mul_(2)
    return (x + y).relu() * 3


def test_inputs_written_by_the_graph_are_written_once():
    x, y = (a.detach() for a in inputs((4, 8), (4, 8)))
    want_x = x * 2
    with pd.check_accuracy():
        out = run(mutating, [x, y], backward=False)
    torch.testing.assert_close(x, want_x, rtol=0, atol=0)
    torch.testing.assert_close(out, ((want_x + y).relu() * 3), rtol=0, atol=0)
    assert pd.stats()["checked_graph_calls"] == 1


def test_the_tolerance_is_per_dtype_and_overridable(monkeypatch):
    """Sums in another order than ATen's: within the default fp32 tolerance, outside
    a zero one."""
    def sums(x):
        return (x * 1.37).sum(-1) * 0.73 + (x.exp() * 1.37).sum(-1)

    x = inputs((4, 1000))[0].detach()
    with pd.check_accuracy():
        run(sums, [x], backward=False)
        torch._dynamo.reset()
        monkeypatch.setitem(accuracy.TOLERANCES, torch.float32, (0.0, 0.0))
        with pytest.raises(pd.AccuracyError, match="torch.float32"):
            run(sums, [x], backward=False)
    with pytest.raises(pd.AccuracyError, match="set_tolerance"):
        pd.set_tolerance(torch.int32, 0, 0)
    pd.set_tolerance(torch.float32, 1e-3, 1e-4)
    assert accuracy.TOLERANCES[torch.float32] == (1e-3, 1e-4)


def test_mismatch_rules():
    t = torch.tensor
    assert accuracy.mismatch(t([1.0, float("nan"), float("inf")]), t([1.0, float("nan"), float("inf")])) is None
    assert accuracy.mismatch(t([1.0, float("inf")]), t([1.0, -float("inf")]))["index"] == (1,)
    assert accuracy.mismatch(t([0.0, float("nan")]), t([0.0, 1.0]))["index"] == (1,)
    assert accuracy.mismatch(t([3, 4]), t([3, 5]))["index"] == (1,)  # integers: exact
    # atol scales with the output's largest value: a sum's rounding is relative to its terms
    assert accuracy.mismatch(t([1000.0, 0.0]), t([1000.0, 0.005])) is None
    assert accuracy.mismatch(t([1.0, 0.0]), t([1.0, 0.005])) is not None
    assert "float32[2]" in accuracy.mismatch(t([1.0, 0.0]), t([1.0, 0.0]).half())["what"]


def test_a_graph_writing_its_input_writes_it_once():
    """The ATen runs of a graph that writes an input (through a view) read copies."""
    def writes(x, index, src):
        x[1:].index_add_(0, index, src)
        return x * 2

    g = torch.Generator().manual_seed(0)
    x, src, index = torch.randn(5, 3, generator=g), torch.randn(2, 3, generator=g), torch.tensor([0, 2])
    gm = make_fx(writes, tracing_mode="fake")(x, index, src)
    assert accuracy.written_inputs(gm.graph) == {0}
    checked = accuracy.CheckedGraph("test graph", gm, gm, lambda args: gm(*args))
    want_x = x.clone()
    want = writes(want_x, index, src)
    got = checked([x, index, src])
    torch.testing.assert_close(x, want_x, rtol=0, atol=0)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert pd.stats()["checked_graph_calls"] == 1
