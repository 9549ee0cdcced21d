"""DistributedDataParallel with the pyfuser backend: two gloo ranks on the CPU.

Each way PyTorch documents for combining DDP with torch.compile, run once with a
backend that only records the graphs Dynamo hands it and once with pyfuser behind
the same recorder:

* ``inner``: ``DDP(torch.compile(model))``: the compiled module is one graph; DDP's
  reducer runs its all-reduces from autograd hooks, outside it;
* ``outer``: ``torch.compile(DDP(model, bucket_cap_mb=...))``: Dynamo's
  DDPOptimizer splits the graph at DDP's bucket boundaries so each bucket's
  all-reduce can start while the earlier layers' backward runs.  This torch's
  DDPOptimizer always takes DDP's default first bucket (1 MiB) and refuses a
  ``bucket_cap_mb`` below it (``AssertionError: First bucket should be
  smaller/equal ...``), while DDP itself accepts one; for the tiny models the test
  lowers that default (``dist._DEFAULT_FIRST_BUCKET_BYTES``) to the cap so that
  splits happen;
* ``compiled_autograd``: ``torch._dynamo.config.optimize_ddp = "python_reducer"``
  and ``compiled_autograd = True`` around a compiled step of ``DDP(model)``: the
  backward is traced as one graph with each bucket's ``all_reduce`` and
  ``wait_tensor`` in it (functional collectives), handed to the backend.  Compiled
  autograd gives that graph symbolic sizes, which pyfuser does not fuse (one
  warning; it runs in ATen): the forward's regions are the ones formed;
* ``compiled_autograd_static``: the same through
  ``torch._dynamo.compiled_autograd._enable(compiler, dynamic=False)``: static
  sizes, so pyfuser partitions the backward graph: AOTAutograd's backward (fused by
  pyfuser when the forward was compiled) is one node of it, and the rest is the
  reducer's division, all-reduce, wait and copy per bucket, which stay in ATen in
  their order.

Every scenario must hand the backend graphs, the same ones with either backend;
pyfuser must fuse regions in them, and the losses and gradients of both steps must
equal eager single-process training on the concatenated batch (``harness.py``).
"""
import functools

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import harness

BUCKET_MB = 0.004  # the MLP's 8 KiB fc1 weight and its 2.6 KiB fc2 end in different buckets
MIN_REGIONS = dict(inner=4, outer=4, compiled_autograd=4, compiled_autograd_static=4)
ZOO_MIN_REGIONS = 10  # as tests/dynamo/test_zoo.py's floor


def _scenario(mode, fused, rank, world):
    import pyfuser.dynamo as pd
    from pyfuser.bench import zoo

    built = zoo.build("mlp")
    backend = harness.Recorder(pd.pyfuser_backend if fused else None)
    model = built.model
    if mode == "inner":
        wrapped = DDP(torch.compile(model, backend=backend))
        step = _backward(wrapped)
    elif mode == "outer":
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(BUCKET_MB * 2 ** 20)
        wrapped = torch.compile(DDP(model, bucket_cap_mb=BUCKET_MB), backend=backend)
        step = _backward(wrapped)
    elif mode == "compiled_autograd":
        torch._dynamo.config.optimize_ddp = "python_reducer"
        torch._dynamo.config.compiled_autograd = True
        wrapped = DDP(model)
        step = torch.compile(_backward(wrapped), backend=backend)
    else:  # compiled autograd with static sizes, through its context manager
        from torch._dynamo import compiled_autograd

        torch._dynamo.config.optimize_ddp = "python_reducer"
        wrapped = DDP(model)
        forward_backward = _backward(torch.compile(wrapped, backend=backend))

        def step(batch):
            with compiled_autograd._enable(torch.compile(backend=backend), dynamic=False):
                return forward_backward(batch)
    try:
        return harness.train(wrapped, step, built, rank, world, backend)
    finally:
        torch._dynamo.config.optimize_ddp = True
        torch._dynamo.config.compiled_autograd = False


def _backward(model):
    from pyfuser.bench import zoo

    def step(batch):
        loss = zoo.loss(model(**batch))
        loss.backward()
        return loss
    return step


def _reference(name, rank, world):
    return harness.reference(name, world, loss_of_concatenated=name in ("mlp", "vit"))


def _zoo_inner(name, fused, rank, world):
    """A zoo transformer (two layers) as ``DDP(torch.compile(model))``."""
    import pyfuser.dynamo as pd
    from pyfuser.bench import zoo

    built = zoo.build(name, layers=2)
    backend = harness.Recorder(pd.pyfuser_backend if fused else None)
    wrapped = DDP(torch.compile(built.model, backend=backend))
    return harness.train(wrapped, _backward(wrapped), built, rank, world, backend)


ZOO = harness.zoo_models(())


MODES = ("inner", "outer", "compiled_autograd", "compiled_autograd_static")


def scenarios() -> dict:
    """This module's scenarios, run by the directory's one spawn (``conftest.py``)."""
    scenarios = {"reference": functools.partial(_reference, "mlp")}
    for mode in MODES:
        for fused in (False, True):
            scenarios[f"{mode}/{'pyfuser' if fused else 'counting'}"] = functools.partial(_scenario, mode, fused)
    for name in ZOO:
        scenarios[f"reference/{name}"] = functools.partial(_reference, name)
        for fused in (False, True):
            scenarios[f"zoo/{name}/{'pyfuser' if fused else 'counting'}"] = functools.partial(_zoo_inner, name, fused)
    return {f"ddp/{k}": v for k, v in scenarios.items()}


@pytest.fixture(scope="module")
def results(distributed_results):
    return [{k[len("ddp/"):]: v for k, v in per_rank.items() if k.startswith("ddp/")} for per_rank in distributed_results]


@pytest.mark.parametrize("name", ZOO)
def test_ddp_zoo_fuses_and_trains_like_eager(results, name):
    for rank, per_rank in enumerate(results):
        counted, fused = per_rank[f"zoo/{name}/counting"], per_rank[f"zoo/{name}/pyfuser"]
        harness.assert_matches(counted, per_rank[f"reference/{name}"], f"rank {rank}, {name}, counting backend")
        harness.assert_matches(fused, per_rank[f"reference/{name}"], f"rank {rank}, {name}, pyfuser")
        assert counted["graphs"] and fused["graphs"] == counted["graphs"], name
        assert fused["stats"].get("regions", 0) >= ZOO_MIN_REGIONS, fused["stats"]
        assert fused["stats"].get("fallbacks", 0) == 0, fused["stats"]
        print(f"\nrank {rank} DDP {name}: {len(fused['graphs'])} graphs, {fused['stats']}, {fused['cpu_s']:.1f} s CPU")


@pytest.mark.parametrize("mode", MODES)
def test_ddp_mlp_fuses_and_trains_like_eager(results, mode):
    for rank, per_rank in enumerate(results):
        counted, fused = per_rank[f"{mode}/counting"], per_rank[f"{mode}/pyfuser"]
        harness.assert_matches(counted, per_rank["reference"], f"rank {rank}, {mode}, counting backend")
        harness.assert_matches(fused, per_rank["reference"], f"rank {rank}, {mode}, pyfuser")
        assert counted["graphs"], f"{mode}: the engine handed no graph to the backend"
        if mode.startswith("compiled_autograd"):
            # The traced backward holds AOTAutograd's backward nodes, whose saved tensors
            # depend on the forward's partitioner (pyfuser's min-cut differs from the
            # recorder's default): compare the graphs' number and their collectives.
            assert len(fused["graphs"]) == len(counted["graphs"]), (fused["graphs"], counted["graphs"])
            assert [_collectives(g) for g in fused["graphs"]] == [_collectives(g) for g in counted["graphs"]]
        else:
            assert fused["graphs"] == counted["graphs"], f"{mode}: pyfuser was handed other graphs"
        assert fused["stats"].get("regions", 0) >= MIN_REGIONS[mode], fused["stats"]
        assert fused["stats"].get("fallbacks", 0) == 0, fused["stats"]
        print(f"\nrank {rank} {mode}: {len(fused['graphs'])} graphs, {fused['stats']}, {fused['cpu_s']:.1f} s CPU")


def _collectives(ops):
    return [op for op in ops if "c10d" in op]


def test_ddp_optimizer_splits_at_buckets(results):
    graphs = results[0]["outer/counting"]["graphs"]
    assert len(graphs) >= 2, graphs


def test_compiled_autograd_traces_the_all_reduces(results):
    graphs = results[0]["compiled_autograd/counting"]["graphs"]
    reduces = [op for g in graphs for op in _collectives(g) if "all_reduce" in op]
    assert len(reduces) >= 2, graphs  # one per bucket at least; the MLP has several parameters
