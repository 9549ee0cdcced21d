"""Two gloo ranks on the CPU, started by ``torch.multiprocessing`` (spawn), for the
distributed tests.

``spawn(scenarios, world)`` starts ``world`` processes on a free port; each runs
every scenario of ``scenarios`` (a name -> ``fn(rank, world)`` mapping of
module-level functions) in turn and returns one dict per scenario, or the error's
text when it raised (a failing scenario must not hide the others' results).  One
start per test module: starting a rank (importing torch, Dynamo and Triton) is most
of a scenario's cost on the CPU.

The engines and their references share these rules:

* batches: one batch of ``world * SHARD`` rows per step, drawn by the zoo model with
  a fixed generator; rank r trains on rows [r * SHARD, (r + 1) * SHARD);
* the reference is eager single-process training of the same weights on the whole
  batch: the loss of the concatenated batch where the model's loss is a mean over
  examples (the MLP, ViT), else the mean of the shards' losses, which is what data
  parallelism averages (the language models' losses are means over their shards'
  unmasked tokens, whose counts differ);
* SGD (lr 0.1), ``STEPS`` steps, so the second step runs on updated parameters and
  every region's second call takes the prepared-launch path.
"""
from __future__ import annotations

import os
import pathlib
import socket
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS = 2
SHARD = 2
LR = 0.1
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)  # as tests/dynamo/test_zoo.py, whose docstring says why
LOSS_TOL = dict(rtol=1e-5, atol=1e-6)


ALL_ZOO = ("bert", "gpt2", "llama", "t5", "vit")


def zoo_models(default) -> tuple:
    """The zoo transformers a test trains: ``default`` (each model compiles in seconds
    of CPU under Triton's interpreter, and the directory should stay quick), or those
    ``PYFUSER_DIST_ZOO`` names (comma-separated, or ``all``)."""
    chosen = os.environ.get("PYFUSER_DIST_ZOO")
    if not chosen:
        return tuple(default)
    return ALL_ZOO if chosen == "all" else tuple(n.strip() for n in chosen.split(",") if n.strip())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, out_dir, scenarios):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    try:
        for name, fn in scenarios.items():
            torch._dynamo.reset()
            start = time.process_time()
            try:
                results[name] = fn(rank, world)
                if isinstance(results[name], dict):
                    results[name]["cpu_s"] = time.process_time() - start
            except Exception:
                results[name] = traceback.format_exc()
            dist.barrier()
    finally:
        torch.save(results, pathlib.Path(out_dir) / f"rank{rank}.pt")
        dist.destroy_process_group()


def spawn(scenarios: dict, world: int = 2) -> list:
    """Per rank, scenario name -> the scenario's result (or its traceback's text)."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_entry, args=(world, free_port(), out, scenarios), nprocs=world, join=True)
        return [torch.load(pathlib.Path(out) / f"rank{r}.pt", weights_only=False) for r in range(world)]


class Recorder:
    """A backend that records the op list of each graph Dynamo hands it and then hands
    the graph to ``inner``; without one, to AOTAutograd with eager compilers (the
    counting backend: it traces forward and backward as pyfuser does, so a compiled
    autograd backward sees the same autograd nodes, and runs them as traced)."""

    def __init__(self, inner=None):
        from torch._dynamo.backends.debugging import aot_eager

        self.inner, self.graphs = inner or aot_eager, []

    def __call__(self, gm, example_inputs, **kwargs):
        self.graphs.append([str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method",
                                                                               "call_module")])
        return self.inner(gm, example_inputs, **kwargs)


def shards(batch: dict, rank: int) -> dict:
    return {k: v[rank * SHARD:(rank + 1) * SHARD] for k, v in batch.items()}


def batches(built, world):
    g = torch.Generator().manual_seed(1)
    return [built.batch(world * SHARD, g) for _ in range(STEPS)]


def reference(name, world, loss_of_concatenated) -> dict:
    """Eager single-process training of zoo model ``name`` (seed 0) on the whole batches:
    losses and gradients of each step."""
    from pyfuser.bench import zoo

    built = zoo.build(name, layers=2) if name != "mlp" else zoo.build(name)
    model = built.model
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, grads = [], []
    for batch in batches(built, world):
        if loss_of_concatenated:
            loss = zoo.loss(model(**batch))
        else:
            loss = sum(zoo.loss(model(**shards(batch, r))) for r in range(world)) / world
        loss.backward()
        losses.append(loss.detach())
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
        opt.step()
        opt.zero_grad()
    return dict(losses=losses, grads=grads)


def full(t):
    """A gradient as one tensor: FSDP2's are sharded DTensors (a collective: every rank calls it)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def train(model, step_fn, built, rank, world, backend) -> dict:
    """``STEPS`` SGD steps of ``model`` (wrapped by an engine) on this rank's shards;
    ``step_fn(batch) -> loss`` runs forward and backward.  Returns the mean loss over
    ranks, the (full) gradients of each step, the graphs ``backend`` received and the
    backend's counters."""
    import pyfuser.dynamo as pd

    pd.reset()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, grads = [], []
    for batch in batches(built, world):
        loss = step_fn(shards(batch, rank)).detach().clone()
        dist.all_reduce(loss)
        losses.append(loss / world)
        grads.append({_plain(k): full(p.grad).detach().clone() for k, p in model.named_parameters()
                      if p.grad is not None})
        opt.step()
        opt.zero_grad()
    return dict(losses=losses, grads=grads, graphs=backend.graphs, stats=dict(pd.stats()))


def _plain(name: str) -> str:
    """A parameter's name without the wrappers' prefixes (DDP's ``module.``, torch.compile's ``_orig_mod.``)."""
    for prefix in ("module.", "_orig_mod."):
        name = name.replace(prefix, "")
    return name


def assert_matches(got: dict, want: dict, what: str):
    """Losses and gradients of every step equal the reference's within the zoo's tolerances."""
    assert not isinstance(got, str), f"{what} raised:\n{got}"
    for step, (g, w) in enumerate(zip(got["losses"], want["losses"])):
        torch.testing.assert_close(g, w, **LOSS_TOL, msg=lambda m: f"{what}, step {step}, loss: {m}")
    for step, (g, w) in enumerate(zip(got["grads"], want["grads"])):
        assert set(g) == set(w), f"{what}, step {step}: gradients of {sorted(set(g) ^ set(w))}"
        for k in w:
            torch.testing.assert_close(g[k], w[k], **GRAD_TOL, msg=lambda m: f"{what}, step {step}, {k}.grad: {m}")
