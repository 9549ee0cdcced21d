"""FSDP2 (``torch.distributed.fsdp.fully_shard``) with the pyfuser backend: two gloo
ranks on the CPU.

* ``per_block``: the zoo's transformers, each block compiled and then sharded
  (``block = torch.compile(block)``; ``fully_shard(block)`` per block, then the
  root), the recipe PyTorch's FSDP2 examples follow: Dynamo compiles each block's
  forward, FSDP's all-gathers and reduce-scatters run from its hooks around it;
* ``root``: the MLP with ``fully_shard`` on each linear layer and the root, then
  ``torch.compile(model)``.  Dynamo does not trace FSDP2's hooks: it breaks the
  graph at each sharded module and runs the module eagerly, so the backend receives
  the code between them (the layer norm, the GELU, the loss) and no linear layer.
  The test asserts that (it fails when torch starts tracing them);
* ``compiled_autograd``: ``root`` with compiled autograd: the backward is traced
  too, in pieces between FSDP's hooks, with no collective in them; this torch
  trains it unlike eager from the second step, whatever the backend, so pyfuser is
  compared with the recording backend there;
* ``mixed``: ``per_block`` with ``MixedPrecisionPolicy(param_dtype=bfloat16,
  reduce_dtype=float32)``, against the same FSDP2 training in eager.

Each scenario runs with the counting backend and with pyfuser (the same graphs
handed to both, regions formed) and its losses and full gradients are compared with
eager single-process training (``harness.py``); ``mixed`` with eager FSDP2 under the
same policy, at bfloat16's tolerance.
"""
import functools

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from . import harness

MODELS = harness.zoo_models(("gpt2",))
MIN_REGIONS = 4  # per model, in the compiled blocks (a floor, as tests/dynamo/test_zoo.py's)
MIXED_TOL = dict(rtol=2e-2, atol=2e-3)


def _blocks(model):
    """The module lists holding the model's transformer blocks: the outermost
    ``nn.ModuleList``s (T5 has two, the encoder's and the decoder's; each T5 block's
    own list of sublayers is inside one)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    inner = {id(m) for outer in lists for m in outer.modules() if m is not outer}
    return [m for m in lists if id(m) not in inner]


def _per_block(name, backend_kind, policy, rank, world):
    import pyfuser.dynamo as pd
    from pyfuser.bench import zoo

    built = zoo.build(name, layers=2)
    model = built.model
    backend = harness.Recorder(pd.pyfuser_backend if backend_kind == "pyfuser" else None)
    kw = dict(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)) if policy \
        else {}
    for blocks in _blocks(model):
        for i, block in enumerate(blocks):
            if backend_kind != "eager":
                block = torch.compile(block, backend=backend)
                blocks[i] = block
            fully_shard(block, **kw)
    fully_shard(model, **kw)
    return harness.train(model, _step(model), built, rank, world, backend)


def _root(backend_kind, rank, world, compiled_autograd=False):
    import pyfuser.dynamo as pd
    from pyfuser.bench import zoo

    built = zoo.build("mlp")
    model = built.model
    backend = harness.Recorder(pd.pyfuser_backend if backend_kind == "pyfuser" else None)
    for layer in (model.fc1, model.fc2):
        fully_shard(layer)
    fully_shard(model)
    if not compiled_autograd:
        return harness.train(model, _step(torch.compile(model, backend=backend)), built, rank, world, backend)
    torch._dynamo.config.compiled_autograd = True
    try:
        return harness.train(model, torch.compile(_step(model), backend=backend), built, rank, world, backend)
    finally:
        torch._dynamo.config.compiled_autograd = False


def _step(model):
    from pyfuser.bench import zoo

    def step(batch):
        loss = zoo.loss(model(**batch))
        loss.backward()
        return loss
    return step


def _reference(name, rank, world):
    return harness.reference(name, world, loss_of_concatenated=name in ("mlp", "vit"))


def scenarios() -> dict:
    """This module's scenarios, run by the directory's one spawn (``conftest.py``)."""
    scenarios = {"reference/mlp": functools.partial(_reference, "mlp")}
    for kind in ("counting", "pyfuser"):
        scenarios[f"root/{kind}"] = functools.partial(_root, kind)
        scenarios[f"compiled_autograd/{kind}"] = functools.partial(_root, kind, compiled_autograd=True)
    for name in MODELS:
        scenarios[f"reference/{name}"] = functools.partial(_reference, name)
        for kind in ("counting", "pyfuser"):
            scenarios[f"per_block/{name}/{kind}"] = functools.partial(_per_block, name, kind, False)
    for kind in ("eager", "pyfuser"):
        scenarios[f"mixed/gpt2/{kind}"] = functools.partial(_per_block, "gpt2", kind, True)
    return {f"fsdp/{k}": v for k, v in scenarios.items()}


@pytest.fixture(scope="module")
def results(distributed_results):
    return [{k[len("fsdp/"):]: v for k, v in per_rank.items() if k.startswith("fsdp/")}
            for per_rank in distributed_results]


def _fused(per_rank, key, min_regions):
    counted, fused = per_rank[f"{key}/counting"], per_rank[f"{key}/pyfuser"]
    assert not isinstance(counted, str), counted
    assert not isinstance(fused, str), fused
    assert counted["graphs"], f"{key}: the engine handed no graph to the backend"
    assert fused["graphs"] == counted["graphs"], f"{key}: pyfuser was handed other graphs"
    assert fused["stats"].get("regions", 0) >= min_regions, fused["stats"]
    assert fused["stats"].get("fallbacks", 0) == 0, fused["stats"]
    return counted, fused


@pytest.mark.parametrize("name", MODELS)
def test_per_block_compile_fuses_and_trains_like_eager(results, name):
    for rank, per_rank in enumerate(results):
        counted, fused = _fused(per_rank, f"per_block/{name}", MIN_REGIONS)
        harness.assert_matches(counted, per_rank[f"reference/{name}"], f"rank {rank}, {name}, counting backend")
        harness.assert_matches(fused, per_rank[f"reference/{name}"], f"rank {rank}, {name}, pyfuser")
        print(f"\nrank {rank} per-block {name}: {len(fused['graphs'])} graphs, {fused['stats']}, "
              f"{fused['cpu_s']:.1f} s CPU")


def test_root_compile_breaks_at_each_sharded_module(results):
    for rank, per_rank in enumerate(results):
        counted, fused = _fused(per_rank, "root", 3)
        harness.assert_matches(counted, per_rank["reference/mlp"], f"rank {rank}, root, counting backend")
        harness.assert_matches(fused, per_rank["reference/mlp"], f"rank {rank}, root, pyfuser")
        ops = [op for g in counted["graphs"] for op in g]
        assert not any("linear" in op for op in ops), f"a sharded linear layer was traced: {counted['graphs']}"
        assert len(counted["graphs"]) >= 3, counted["graphs"]  # before, between and after the sharded layers
        print(f"\nrank {rank} root: {len(fused['graphs'])} graphs, {fused['stats']}, {fused['cpu_s']:.1f} s CPU")


def test_compiled_autograd_traces_backward_but_no_collective(results):
    """FSDP2 under compiled autograd on the CPU: the backward reaches the backend in
    pieces between FSDP's hooks, none holding an all-gather or reduce-scatter.  This
    torch then trains unlike eager from the second step on, with the recording
    backend too (no pyfuser involved): asserted, so the test fails when torch
    changes.  pyfuser must give what the recording backend gives."""
    for rank, per_rank in enumerate(results):
        counted, fused = per_rank["compiled_autograd/counting"], per_rank["compiled_autograd/pyfuser"]
        assert not isinstance(counted, str), counted
        assert not isinstance(fused, str), fused
        want = per_rank["reference/mlp"]
        torch.testing.assert_close(counted["losses"][0], want["losses"][0], **harness.LOSS_TOL)
        assert not torch.allclose(counted["losses"][1], want["losses"][1], **harness.LOSS_TOL), \
            "FSDP2 under compiled autograd now trains like eager: test it against eager, update docs/DISTRIBUTED.md"
        harness.assert_matches(fused, counted, f"rank {rank}, compiled autograd, pyfuser against the recording backend")
        assert len(fused["graphs"]) == len(counted["graphs"]) > len(per_rank["root/counting"]["graphs"])
        ops = [op for g in counted["graphs"] for op in g]
        assert not any("c10d" in op or "fsdp" in op for op in ops), "FSDP2's collectives were traced"
        assert fused["stats"].get("regions", 0) >= 3 and fused["stats"].get("fallbacks", 0) == 0, fused["stats"]


def test_mixed_precision_matches_eager_fsdp(results):
    for rank, per_rank in enumerate(results):
        eager, fused = per_rank["mixed/gpt2/eager"], per_rank["mixed/gpt2/pyfuser"]
        assert not isinstance(eager, str), eager
        assert not isinstance(fused, str), fused
        assert fused["stats"].get("regions", 0) >= MIN_REGIONS, fused["stats"]
        for step, (g, w) in enumerate(zip(fused["losses"], eager["losses"])):
            torch.testing.assert_close(g, w, **MIXED_TOL, msg=lambda m: f"step {step}, loss: {m}")
        for step, (g, w) in enumerate(zip(fused["grads"], eager["grads"])):
            for k in w:
                assert g[k].dtype == torch.float32, (k, g[k].dtype)  # reduce_dtype: sharded gradients in fp32
                torch.testing.assert_close(g[k], w[k], **MIXED_TOL, msg=lambda m: f"step {step}, {k}.grad: {m}")
        print(f"\nrank {rank} mixed gpt2: {fused['stats']}, {fused['cpu_s']:.1f} s CPU")
