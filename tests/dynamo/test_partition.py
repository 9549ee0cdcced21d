"""``partition.regroup_along_data_flow`` on a hand-made partitioning: what torch's
partitioner before 2.13 produces when it merges independent ops."""
import torch
from torch.fx.passes.infra.partitioner import Partition

from pyfuser.dynamo.partition import regroup_along_data_flow


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


def test_cpu_work_in_a_gpu_graph_stays_in_aten():
    """A constant lifted and indexed on the host before its copy to the GPU: the CPU
    nodes stay out of regions (a region runs on one device); in an all-CPU graph the
    same nodes are fused.  The GPU is a ``meta`` tensor's device here."""
    from pyfuser.dynamo.support import why_not

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
