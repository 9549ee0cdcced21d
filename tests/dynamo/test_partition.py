"""``partition.regroup_along_data_flow`` on hand-made partitionings (independent ops
lumped together, as torch's partitioner before 2.13 proposed them) and on the
proposal's, after its last step moved a ``getitem`` into its tuple's partition."""
import operator

import torch
from torch.fx.passes.infra.partitioner import Partition
from torch.fx.passes.operator_support import OperatorSupportBase

from pyfuser.dynamo.partition.partitioner import regroup_along_data_flow
from pyfuser.dynamo.partition.proposal import propose_partitions


def _graph():
    def f(x, y, w):
        a = torch.mul(x, 2.0)  # producer region: a, e
        e = torch.add(a, 1.0)
        s = torch.sum(torch.mul(a, w), 0)  # reads a and a graph input: belongs with a
        c = torch.mul(y, 3.0)  # independent of a: stays where the partitioner put it
        d = torch.add(c, 1.0)
        m = torch.matmul(e, w)  # not fused
        t = torch.sum(m, 0)  # reads the matmul: has no producer region
        return e, s, d, t

    gm = torch.fx.symbolic_trace(f)
    return gm, {n.name: n for n in gm.graph.nodes}


def test_a_component_moves_to_the_region_it_reads():
    gm, n = _graph()
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    producer = Partition(nodes=[n["mul"], n["add"]])
    lumped = Partition(nodes=[n["mul_1"], n["sum_1"], n["mul_2"], n["add_1"], n["sum_2"]])
    out = regroup_along_data_flow([producer, lumped], order)
    groups = sorted(sorted(node.name for node in p.nodes) for p in out)
    # the weighted sum joins its producer; c, d and the matmul's sum stay together
    assert groups == [["add", "mul", "mul_1", "sum_1"], ["add_1", "mul_2", "sum_2"]]


def test_nothing_moves_when_no_component_reads_one_region_alone():
    gm, n = _graph()
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    parts = [Partition(nodes=[n["mul"], n["add"], n["mul_1"], n["sum_1"]]), Partition(nodes=[n["mul_2"], n["add_1"]])]
    out = regroup_along_data_flow(parts, order)
    assert sorted(sorted(node.name for node in p.nodes) for p in out) == \
        [["add", "mul", "mul_1", "sum_1"], ["add_1", "mul_2"]]


def _two(x):
    return x, x


def _unary(x):
    return x


class _AllButGetitem(OperatorSupportBase):
    def is_node_supported(self, submodules, node) -> bool:
        return node.op == "call_function" and node.target is not operator.getitem


def test_an_op_reading_a_getitem_joins_the_tuples_partition():
    """``y`` reads a ``getitem`` that is not supported, so the proposal leaves ``y``
    alone, then moves the ``getitem`` into the tuple's partition: ``y`` reads that
    partition alone and joins it."""
    g = torch.fx.Graph()
    t = g.call_function(_two, (g.placeholder("x"),), name="t")
    first = g.call_function(operator.getitem, (t, 0), name="first")
    y = g.call_function(_unary, (first,), name="y")
    g.output(y)
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    proposed = propose_partitions(gm, _AllButGetitem())
    assert sorted(sorted(n.name for n in p.nodes) for p in proposed) == [["first", "t"], ["y"]]
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    out = regroup_along_data_flow(proposed, order)
    assert [sorted(n.name for n in p.nodes) for p in out] == [["first", "t", "y"]]


def test_cpu_work_in_a_gpu_graph_stays_in_aten():
    """A constant lifted and indexed on the host before its copy to the GPU: the CPU
    nodes stay out of regions (a region runs on one device); in an all-CPU graph the
    same nodes are fused.  The GPU is a ``meta`` tensor's device here."""
    from pyfuser.dynamo.rules.support import why_not

    def graph(accelerator):
        g = torch.fx.Graph()
        c = g.placeholder("c")
        x = g.placeholder("x")
        lifted = g.call_function(torch.ops.aten.mul.Tensor, (c, 2.0))
        moved = g.call_function(torch.ops.aten._to_copy.default, (lifted,), {"device": accelerator})
        g.output((moved, x))
        c.meta["val"] = lifted.meta["val"] = torch.ones(4)
        x.meta["val"] = moved.meta["val"] = torch.ones(4, device=accelerator)
        return lifted

    why = why_not(graph("meta"))
    assert why is not None and why.code == "cpu_in_device_graph" and "meta" in why.detail
    assert why_not(graph("cpu")) is None


def _layers():
    """Two 'layers' with a matmul between them; the batch sums of both layers' row
    results add up in the second (T5's position-bias gradient, in small)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(a, w):
        x = torch.softmax(a * 2.0, -1)  # layer 1: [B, R, C]
        h = torch.matmul(torch.tanh(x), w)  # its tanh in layer 1, the matmul in ATen
        y = torch.softmax(h, -1)  # layer 2
        return h, x.sum(0) + y.sum(0)

    args = (torch.randn(3, 4, 8), torch.randn(8, 8))
    gm = make_fx(f)(*args)
    return f, args, gm, [node for node in gm.graph.nodes if node.op == "call_function"]


def _sum_of(nodes, name_of_input):
    return next(n for n in nodes if "sum" in str(n.target) and n.args[1] == [0] and n.args[0].name == name_of_input)


def test_a_reduction_moves_to_the_region_that_computes_its_operand_for_it():
    from pyfuser.dynamo.partition.partitioner import reduce_before_leaving

    _, _, gm, nodes = _layers()
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    mm = next(i for i, n in enumerate(nodes) if "mm" in str(n.target))
    x = next(n for n in nodes[:mm] if "div" in str(n.target) or "softmax" in str(n.target))
    moved = _sum_of(nodes, x.name)
    first = Partition(nodes=[n for n in nodes[:mm] if n is not moved and "view" not in str(n.target)])
    second = Partition(nodes=[n for n in nodes[mm + 1:] if "view" not in str(n.target)])
    out = reduce_before_leaving([first, second], order)
    assert moved in out[0].nodes and moved not in out[1].nodes
    assert len(out[0].nodes) == len(first.nodes) + 1 and len(out[1].nodes) == len(second.nodes) - 1


def test_a_reduction_of_an_operand_read_elsewhere_stays():
    """x also leaves its region for another reader: moving its sum saves nothing."""
    from pyfuser.dynamo.partition.partitioner import reduce_before_leaving

    _, _, gm, nodes = _layers()
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    mm = next(i for i, n in enumerate(nodes) if "mm" in str(n.target))
    x = next(n for n in nodes[:mm] if "div" in str(n.target) or "softmax" in str(n.target))
    tanh = next(n for n in nodes if "tanh" in str(n.target))
    moved = _sum_of(nodes, x.name)
    first = Partition(nodes=[n for n in nodes[:mm] if n not in (moved, tanh) and "view" not in str(n.target)])
    second = Partition(nodes=[tanh] + [n for n in nodes[mm + 1:] if "view" not in str(n.target)])
    out = reduce_before_leaving([first, second], order)
    assert moved in out[1].nodes and len(out[0].nodes) == len(first.nodes)


def test_through_the_backend_the_first_layer_sums_its_own_rows():
    """The partitioner alone puts x.sum(0) beside the second layer's ops, which read
    the [B, R, C] x from the first region; the first region computes it instead, and
    the results match eager."""
    import pyfuser.dynamo as pd

    f, args, _, _ = _layers()
    e = pd.explain(f, *args, run_backward=False)
    (first,) = [r for r in e.regions if any(n.name == "tanh" for n in r.nodes)]
    assert sum(str(n.target) == "aten.sum.dim_IntList" for n in first.nodes) == 2  # its softmax's, and x.sum(0)
    torch._dynamo.reset()
    got = torch.compile(f, backend="pyfuser")(*args)
    want = f(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_the_garbage_collector_is_paused_while_regions_are_fused_and_restored_after(monkeypatch):
    """Each full collection walks the graph's live objects, once per few regions fused:
    partitioning grew with the square of the depth (docs/TUNING.md#compile-time)."""
    import gc

    from pyfuser.dynamo.partition import partitioner

    seen = []
    real = partitioner._fuse_regions
    monkeypatch.setattr(partitioner, "_fuse_regions", lambda gm: seen.append(gc.isenabled()) or real(gm))
    gm, _ = _graph()
    assert gc.isenabled()
    partitioner.fuse_regions(gm)
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        partitioner.fuse_regions(_graph()[0])
        assert not gc.isenabled()  # left as it was
    finally:
        gc.enable()
