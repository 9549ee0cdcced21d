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
