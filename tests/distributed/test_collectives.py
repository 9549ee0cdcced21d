"""Collectives in a traced graph stay where the engine put them, and turn off CUDA graphs.

The graph is traced in one process with a one-rank gloo group (functional collectives
need a registered group name): pointwise work before an ``all_reduce``, pointwise
work that only reads its result after the ``wait_tensor``, and independent pointwise
work after it that the partitioner would otherwise merge with the work before.
"""
import pytest
import torch
import torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx

from pyfuser.dynamo.rules import collectives
from pyfuser.dynamo.regions import graph_checks, graphs
from pyfuser.dynamo.partition.partitioner import fuse_regions
from pyfuser.dynamo.regions.region import FusedRegion


@pytest.fixture
def one_rank_group():
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD.group_name
    dist.destroy_process_group()


def _step(group):
    def step(x, y):
        a = (x.sin() * 2 + 1).exp()  # before the collective
        reduced = torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(a, "sum", group))
        b = (y.cos() * 3 - 1).tanh()  # independent of it, after it in the graph's order
        return (reduced * 4).relu() + b, a * 5 + 2
    return step


def _regions(gm):
    return [m for m in gm.modules() if isinstance(m, FusedRegion)]


def test_no_region_holds_or_spans_a_collective(one_rank_group):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    traced = make_fx(_step(one_rank_group), tracing_mode="fake")(x, y)
    assert collectives.first_communication(traced) is not None
    epochs = collectives.communication_epochs(traced.graph)
    before = {n.name: epochs[n] for n in traced.graph.nodes}
    want = _step(one_rank_group)(x, y)
    gm = fuse_regions(traced)
    regions = _regions(gm)
    assert len(regions) >= 3, gm.code  # before it, after it reading its result, after it independent of it
    for region in regions:
        names = [n.name for n in region.fallback.graph.nodes if n.op == "call_function"]
        assert not any(collectives.is_communication(n) for n in region.fallback.graph.nodes), names
        assert len({before[name] for name in names if name in before}) == 1, f"{names} spans a collective"
    # The collective keeps its place: the region computing its input runs before it,
    # and every region after it reads nothing computed later than the wait.
    order = [n for n in gm.graph.nodes if n.op == "call_module" or collectives.is_communication(n)]
    kinds = ["comm" if collectives.is_communication(n) else "region" for n in order]
    assert kinds[0] == "region" and kinds.count("comm") == 2, kinds
    got = gm(x, y)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_a_graph_without_collectives_is_partitioned_as_before():
    x = torch.randn(4, 8)
    gm = fuse_regions(make_fx(lambda a, b: ((a.sin() * 2).exp(), (b.cos() * 3).tanh()), tracing_mode="fake")(x, x))
    assert len(_regions(gm)) >= 1


def test_cuda_graphs_off_for_a_graph_with_a_collective(one_rank_group):
    traced = make_fx(_step(one_rank_group), tracing_mode="fake")(torch.randn(4, 8), torch.randn(4, 8))
    assert "communicates between ranks" in graphs.not_graphable(traced)
    assert "communicates between ranks" in graphs.not_graphable(fuse_regions(traced))


def test_cuda_graphs_off_under_a_process_group_of_several_ranks(monkeypatch):
    traced = make_fx(lambda a: a * 2, tracing_mode="fake")(torch.randn(4))
    monkeypatch.setattr(collectives, "distributed_world", lambda: 2)
    monkeypatch.setattr(graph_checks, "distributed_world", lambda: 2)
    assert "2 ranks" in graphs.not_graphable(traced)
    monkeypatch.setattr(graph_checks, "distributed_world", lambda: 1)
    assert "2 ranks" not in (graphs.not_graphable(traced) or "")


def test_one_rank_group_is_not_distributed(one_rank_group):
    assert collectives.distributed_world() == 1
