"""The backend on a CUDA device (compiled kernels): run on the GPU machine with
``PYTHONPATH=src python -m pytest -q tests/dynamo -m gpu``."""
import copy

import pytest
import torch

import pyfuser
import pyfuser.dynamo as pd

pytestmark = pytest.mark.gpu


def test_tiny_bert_fp16_autocast_on_cuda():
    transformers = pytest.importorskip("transformers")
    from tests.dynamo.test_models import assert_grads_close, tiny_bert

    reference = tiny_bert().cuda().train()
    model = copy.deepcopy(reference)
    ids = torch.randint(0, 500, (4, 32), device="cuda")
    labels = torch.randint(0, 500, (4, 32), device="cuda")
    launches = pyfuser.cache_info()["launches"]
    compiled = torch.compile(model, backend="pyfuser")
    with torch.autocast("cuda", dtype=torch.float16):
        out = compiled(input_ids=ids, labels=labels)
        want = reference(input_ids=ids, labels=labels)
    out.loss.backward()
    want.loss.backward()
    torch.testing.assert_close(out.loss, want.loss, rtol=5e-3, atol=5e-3)
    assert_grads_close(model, reference, rtol=2e-2)
    assert pd.stats().get("fallbacks", 0) == 0 and pyfuser.cache_info()["launches"] > launches


def test_cpu_scalar_inputs_move_to_the_region_device():
    def fn(x, s):
        return (x * s + 1).exp() * s

    x = torch.randn(8, 16, device="cuda")
    s = torch.tensor(0.5)  # a CPU scalar, as ATen allows next to CUDA tensors
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x, s), fn(x, s))
    assert pd.stats()["regions"] == 1 and pd.stats().get("fallbacks", 0) == 0


def test_dropout_on_cuda_reuses_the_forward_mask():
    torch.manual_seed(1)
    lin = torch.nn.Linear(64, 64).cuda()

    def fn(x):
        return torch.nn.functional.dropout(torch.relu(lin(x)), 0.3, True)

    x = torch.randn(32, 64, device="cuda")
    y = torch.compile(fn, backend="pyfuser")(x)
    mask = y != 0
    y.sum().backward()
    g = lin.weight.grad.clone()
    lin.weight.grad = None
    (torch.relu(lin(x)) * mask / 0.7).sum().backward()
    torch.testing.assert_close(g, lin.weight.grad)


def _train_tiny_bert(steps, accumulate=1, optimizer=torch.optim.SGD, lr=0.05):
    """Losses and final weights of a tiny BERT (dropout on) trained through the backend;
    ``accumulate`` backward calls per optimizer step."""
    transformers = pytest.importorskip("transformers")
    from pyfuser.bench import zoo

    torch._dynamo.reset()
    model = zoo.build("bert", hidden=64, layers=2, heads=2, intermediate=128, vocab=500, seq=64,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1).model.cuda().train()
    compiled = torch.compile(model, backend="pyfuser")
    opt = optimizer(model.parameters(), lr=lr)
    g = torch.Generator(device="cuda").manual_seed(3)
    losses = []
    for _ in range(steps):
        for _ in range(accumulate):
            ids = torch.randint(0, 500, (4, 32), device="cuda", generator=g)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = compiled(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return torch.stack(losses).cpu(), [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_backward_cuda_graph_matches_the_uncaptured_backward(monkeypatch, accumulate):
    """The same training (SGD) with and without the backward captured.  Not bit for
    bit: the embedding gradients add rows with atomics (``decompositions.py``), in an
    order that differs between runs (3e-5 apart in the losses, measured).  SGD, not
    Adam: Adam divides each gradient by its own magnitude, which turns that noise on
    a tiny (fp16-underflowing) gradient into a full step of the learning rate.  The
    accuracy mode turns the capture off, so it is pinned off here."""
    monkeypatch.setenv("PYFUSER_CHECK", "0")
    monkeypatch.setenv("PYFUSER_CUDA_GRAPHS", "0")
    pd.reset()
    want_losses, want_params = _train_tiny_bert(8, accumulate)
    assert pd.stats().get("graph_captures", 0) == 0
    monkeypatch.setenv("PYFUSER_CUDA_GRAPHS", "1")
    pd.reset()
    losses, params = _train_tiny_bert(8, accumulate)
    s = pd.stats()
    assert s["graph_captures"] >= 1 and s.get("fallbacks", 0) == 0
    if accumulate == 1:  # in a plain loop every step after warm-up and capture replays
        assert s["graph_replays"] >= 8 - 3
    else:  # a second backward before zero_grad finds the first's gradients held: it runs uncaptured
        assert s["graph_misses"] >= 4
    torch.testing.assert_close(losses, want_losses, rtol=1e-4, atol=1e-5)
    for p, q in zip(params, want_params):  # atomics: two uncaptured runs differ by 1e-5 in the token-type embedding
        torch.testing.assert_close(p, q, rtol=1e-4, atol=5e-5)


def _train_tiny_gpt2(steps, lengths=None):
    """Losses and final weights of a tiny GPT-2 (dropout off: the forward draws no
    random numbers) trained with SGD through the backend (SGD for the reason
    ``test_backward_cuda_graph_matches_the_uncaptured_backward`` gives), the loop
    holding the last step's output while the next forward runs; with ``lengths``,
    step i's sequences cut to ``lengths[i]`` tokens (Dynamo's default dynamic shapes)."""
    pytest.importorskip("transformers")
    from pyfuser.bench import zoo

    torch._dynamo.reset()
    built = zoo.build("gpt2", hidden=64, layers=2, heads=2, vocab=500, seq=64)
    model = built.model.cuda().train()
    compiled = torch.compile(model, backend="pyfuser")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(5)
    losses, out = [], None
    for i in range(steps):
        n = None if lengths is None else lengths[i]
        batch = {k: v[:, :n].contiguous().cuda() for k, v in built.batch(4, g).items()}
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = compiled(**batch)
        out.loss.backward()
        losses.append(out.loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return torch.stack(losses).cpu(), [p.detach().clone() for p in model.parameters()], out.logits.clone()


def test_forward_cuda_graph_matches_the_uncaptured_forward(monkeypatch):
    """GPT-2 without dropout: forward and backward both replayed, the same losses and
    weights as with neither captured (within the embedding gradients' atomics)."""
    monkeypatch.setenv("PYFUSER_CHECK", "0")
    monkeypatch.setenv("PYFUSER_CUDA_GRAPHS", "0")
    pd.reset()
    want_losses, want_params, want_logits = _train_tiny_gpt2(8)
    monkeypatch.setenv("PYFUSER_CUDA_GRAPHS", "1")
    pd.reset()
    losses, params, logits = _train_tiny_gpt2(8)
    s = pd.stats()
    assert s.get("fallbacks", 0) == 0 and s.get("graph_misses", 0) == 0
    assert s["graph_replays_forward"] >= 8 - 3 and s["graph_replays_backward"] >= 8 - 3
    torch.testing.assert_close(losses, want_losses, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(logits, want_logits, rtol=2e-2, atol=2e-2)
    for p, q in zip(params, want_params):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)


def test_variable_lengths_replay_one_cuda_graph_per_length(monkeypatch):
    """GPT-2 at four sequence lengths in turn: the graph with symbolic sizes is recorded
    once per length (``graphs.SizedGraphs``) and gives the uncaptured run's losses and weights."""
    monkeypatch.setenv("PYFUSER_CHECK", "0")
    lengths = [32, 40, 48, 56] * 4
    monkeypatch.setenv("PYFUSER_CUDA_GRAPHS", "0")
    pd.reset()
    want_losses, want_params, _ = _train_tiny_gpt2(len(lengths), lengths)
    monkeypatch.setenv("PYFUSER_CUDA_GRAPHS", "1")
    pd.reset()
    losses, params, _ = _train_tiny_gpt2(len(lengths), lengths)
    s = pd.stats()
    assert s.get("fallbacks", 0) == 0 and s.get("graph_misses", 0) == 0
    # Per Dynamo graph of the step, each length is recorded once after 2 ordinary calls
    # (the first length's first step may run a graph compiled with fixed sizes instead).
    graphs = s["graph_captures_forward"] // 4
    assert graphs >= 1 and s["graph_captures_forward"] == s["graph_captures_backward"] == 4 * graphs
    assert s["graph_replays_forward"] >= 3 * 2 * graphs and s.get("graph_sizes_uncaptured", 0) == 0
    torch.testing.assert_close(losses, want_losses, rtol=1e-3, atol=1e-4)
    for p, q in zip(params, want_params):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)


_AHEAD_SCRIPT = r"""
import json, sys, time, torch
import pyfuser.dynamo  # registers backend="pyfuser" (an installed package does it through its entry point)
from triton.backends.nvidia.compiler import CUDABackend
compiled_here = []
make_cubin = CUDABackend.make_cubin
def counting(self, *a, **k):
    compiled_here.append(1)
    return make_cubin(self, *a, **k)
CUDABackend.make_cubin = counting
from triton.runtime import build
launchers_here = []
c_build = build._build
def counting_c(name, *a, **k):
    launchers_here.append(name == "__triton_launcher")
    return c_build(name, *a, **k)
build._build = counting_c
torch.manual_seed(0)
widths = [256 + 32 * i for i in range(10)]  # a kernel per width: more than ahead.MIN_JOBS per graph
layers = [m for a, b in zip(widths, widths[1:]) for m in (torch.nn.Linear(a, b), torch.nn.LayerNorm(b), torch.nn.GELU())]
model = torch.nn.Sequential(*layers, torch.nn.Softmax(-1)).cuda()
x = torch.randn(64, 256, device="cuda", requires_grad=True)
t0 = time.perf_counter()
out = torch.compile(model, backend="pyfuser")(x)
(out * out).sum().backward()
torch.cuda.synchronize()
print(json.dumps({"compiled_here": len(compiled_here), "launchers_here": sum(launchers_here),
                  "first_step_s": time.perf_counter() - t0}))
"""


@pytest.mark.parametrize("workers", ["4", "0"])
def test_compile_ahead_fills_the_first_launch(tmp_path, workers):
    """With compile workers, the first training step compiles no kernel in the process
    itself: every binary it launches (spill-check candidates included), and the C
    launcher each load needs, was built by a worker into Triton's cache.  Without
    workers it builds them all itself (so the counts can tell the two apart).  Each
    graph has more than ``ahead.MIN_JOBS`` kernels."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"), PYFUSER_CACHE_DIR=str(tmp_path / "pyf"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PYFUSER_COMPILE_WORKERS=workers)
    r = subprocess.run([sys.executable, "-c", _AHEAD_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"workers={workers}: {result}")
    compiled_here, launchers_here = result["compiled_here"], result["launchers_here"]
    if workers == "0":
        assert compiled_here >= 16 and launchers_here >= 1
    else:
        assert compiled_here == 0 and launchers_here == 0
