"""The rewrites' values propagated again only where a rewrite changed the graph
(``registry.propagate_meta`` with ``changed``) agree with a full propagation."""
import copy
import warnings

import pytest
import torch

from pyfuser.dynamo.rewrites import registry
from pyfuser.dynamo.rewrites.registry import _described, propagate_meta, rewritten


def _traced_graphs(name, monkeypatch, dynamic=False, **sizes) -> list:
    """The graphs the "aten" stage gets for one training step of a tiny zoo model
    (left unfused where its sizes are static: the test is about the rewrites)."""
    from pyfuser.bench import zoo
    from pyfuser.dynamo import backend

    got = []

    def keep(gm, stage):
        if stage == "aten":
            got.append(copy.deepcopy(gm))
        return real(gm, stage)

    real = backend.rewritten
    monkeypatch.setattr(backend, "rewritten", keep)
    if not dynamic:  # the graphs run as ATen ops, no kernels (symbolic sizes need the partitioned stage)
        monkeypatch.setattr(backend, "fuse_regions", lambda gm: gm)
    built = zoo.build(name, **sizes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.compile(built.model, backend="pyfuser", dynamic=dynamic)
        zoo.loss(model(**built.batch(2, torch.Generator().manual_seed(0)))).backward()
    torch._dynamo.reset()
    return got


def _recomputed(monkeypatch) -> list:
    """Counts, per propagation, of the nodes it ran."""
    counts = []
    run = torch.fx.passes.fake_tensor_prop.FakeTensorProp.run_node

    def counted(self, n):
        counts[-1] += 1
        return run(self, n)

    real = registry.propagate_meta

    def each(gm, changed=None):
        counts.append(0)
        return real(gm, changed)

    monkeypatch.setattr(torch.fx.passes.fake_tensor_prop.FakeTensorProp, "run_node", counted)
    monkeypatch.setattr(registry, "propagate_meta", each)
    return counts


@pytest.mark.parametrize("name, dynamic, sizes", [("llama", False, dict(layers=2)), ("bert", True, {})])
def test_only_what_a_rewrite_changed_is_propagated_again_and_the_values_agree(name, dynamic, sizes, monkeypatch):
    pytest.importorskip("transformers")
    graphs = _traced_graphs(name, monkeypatch, dynamic=dynamic, **sizes)
    assert graphs
    rewrites_changed = 0
    for gm in graphs:
        counts = _recomputed(monkeypatch)
        out = rewritten(gm, "aten")
        monkeypatch.undo()
        rewrites_changed += len(counts)
        incremental = {n: _described(n.meta.get("val")) for n in out.graph.nodes}
        propagate_meta(out)
        for n in out.graph.nodes:
            if n.op == "output" and not counts:
                continue  # AOTAutograd gives the output node no value, and no propagation ran
            assert incremental[n] == _described(n.meta.get("val")), (name, n.format_node())
        # each propagation ran a small part of the graph
        assert all(c < len(out.graph.nodes) // 2 for c in counts), (counts, len(out.graph.nodes))
    assert rewrites_changed > 0  # the models' graphs do get rewritten


def _viewed_chain():
    """x -> relu -> view(4, 6) -> neg -> output, with values from a full propagation."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = torch.fx.Graph()
    x = g.placeholder("x")
    r = g.call_function(torch.ops.aten.relu.default, (x,))
    v = g.call_function(torch.ops.aten.view.default, (r, [4, 6]))
    n = g.call_function(torch.ops.aten.neg.default, (v,))
    g.output((n,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    mode = FakeTensorMode()
    x.meta["val"] = mode.from_tensor(torch.randn(24))
    propagate_meta(gm)
    return gm, x, r, v, n


def test_a_changed_value_is_propagated_to_every_user_downstream():
    gm, x, r, v, n = _viewed_chain()
    before = registry._snapshot(gm)
    v.args = (r, [6, 4])  # a rewrite's edit
    changed = registry._changed(gm, before)
    assert changed == [v]
    propagate_meta(gm, changed)
    assert tuple(n.meta["val"].shape) == (6, 4)  # neg was not changed, its input's value was


def test_without_the_changed_nodes_the_values_stay_stale():
    """The agreement above is not vacuous: a node left out keeps its old value."""
    gm, x, r, v, n = _viewed_chain()
    v.args = (r, [6, 4])
    propagate_meta(gm, [])
    assert tuple(v.meta["val"].shape) == (4, 6)


def test_a_changed_node_with_the_same_description_stops_the_walk(monkeypatch):
    gm, x, r, v, n = _viewed_chain()
    before = registry._snapshot(gm)
    r.target = torch.ops.aten.sigmoid.default  # same shape, strides and dtype
    ran = []
    run = torch.fx.passes.fake_tensor_prop.FakeTensorProp.run_node
    monkeypatch.setattr(torch.fx.passes.fake_tensor_prop.FakeTensorProp, "run_node",
                        lambda self, node: ran.append(node.name) or run(self, node))
    propagate_meta(gm, registry._changed(gm, before))
    assert ran == [r.name, "output"]  # the output node's tuple is rebuilt every time


def test_a_new_node_is_propagated():
    gm, x, r, v, n = _viewed_chain()
    before = registry._snapshot(gm)
    with gm.graph.inserting_after(v):
        t = gm.graph.call_function(torch.ops.aten.t.default, (v,))
    n.args = (t,)
    changed = registry._changed(gm, before)
    assert set(changed) == {t, n}
    propagate_meta(gm, changed)
    assert tuple(n.meta["val"].shape) == (6, 4)


def test_described_keeps_symbolic_sizes_apart_without_guards():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    a = mode.from_tensor(torch.randn(5, 3), static_shapes=False)
    b = mode.from_tensor(torch.randn(7, 3), static_shapes=False)
    guards = len(mode.shape_env.guards)
    assert _described(a) == _described(a)
    assert _described(a) != _described(b)  # another symbol for the first size
    assert _described((a, 3)) != _described((a, 4))
    assert len(mode.shape_env.guards) == guards
