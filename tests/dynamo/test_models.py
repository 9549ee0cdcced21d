"""Models through the backend: a tiny BERT against eager, and dropout's mask."""
import copy

import pytest
import torch
import torch.nn.functional as F

import pyfuser
import pyfuser.dynamo as pd
from pyfuser.bench import zoo

pytest.importorskip("transformers")


def tiny_bert():
    """The zoo's BERT (dropout off, training mode), a little wider than its default."""
    return zoo.build("bert", hidden=64, layers=2, heads=2, intermediate=128, vocab=500, seq=64).model


def assert_grads_close(model, reference, rtol):
    """Each gradient matches to ``rtol`` of the largest gradient of its parameter
    group (a key bias's gradient is zero up to rounding, so per-element relative
    error means nothing there)."""
    scale = max(p.grad.abs().max().item() for p in reference.parameters() if p.grad is not None)
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        if p.grad is None:
            assert q.grad is None, name
            continue
        torch.testing.assert_close(q.grad, p.grad, rtol=rtol, atol=rtol * scale, msg=lambda m: f"{name}: {m}")


def test_tiny_bert_forward_and_backward_match_eager():
    reference = tiny_bert()
    model = copy.deepcopy(reference)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 500, (2, 8), generator=g)
    labels = torch.randint(0, 500, (2, 8), generator=g)
    launches = pyfuser.cache_info()["launches"]

    compiled = torch.compile(model, backend="pyfuser")
    out = compiled(input_ids=ids, labels=labels)
    out.loss.backward()
    want = reference(input_ids=ids, labels=labels)
    want.loss.backward()

    torch.testing.assert_close(out.loss, want.loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.logits, want.logits, rtol=1e-4, atol=1e-4)
    assert_grads_close(model, reference, rtol=1e-4)
    stats = pd.stats()
    assert stats["fusions_created"] >= 6 and stats.get("fallbacks", 0) == 0, stats
    assert stats.get("translation_cache_hits", 0) > 0, "the two layers should share fusions"
    assert pyfuser.cache_info()["launches"] > launches


def autocast_bert_matches_eager(seed):
    """A tiny BERT step under bf16 autocast through the backend against eager."""
    reference = tiny_bert()
    model = copy.deepcopy(reference)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 500, (2, 8), generator=g)
    labels = torch.randint(0, 500, (2, 8), generator=g)
    compiled = torch.compile(model, backend="pyfuser")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = compiled(input_ids=ids, labels=labels)
        want = reference(input_ids=ids, labels=labels)
    out.loss.backward()
    want.loss.backward()
    torch.testing.assert_close(out.loss, want.loss, rtol=1e-2, atol=1e-2)
    assert_grads_close(model, reference, rtol=3e-2)


def test_tiny_bert_under_autocast():
    autocast_bert_matches_eager(2)


class DropoutMLP(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.fc1, self.fc2, self.p = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8), p

    def hidden(self, x):
        return F.gelu(self.fc1(x))

    def forward(self, x):
        h = F.dropout(self.hidden(x), self.p, self.training)
        return h, self.fc2(h)


def test_dropout_mask_is_consistent_between_forward_and_backward():
    torch.manual_seed(3)
    p = 0.4
    model = DropoutMLP(p).train()
    x = torch.randn(8, 16)
    compiled = torch.compile(model, backend="pyfuser")
    h, y = compiled(x)
    y.square().sum().backward()
    grads = [q.grad.clone() for q in model.parameters()]

    mask = h != 0
    hidden = model.hidden(x).detach()
    kept = mask.float().mean().item()
    assert 0.35 < kept < 0.85, kept
    torch.testing.assert_close(h[mask], hidden[mask] / (1 - p))
    # Replay in eager with the mask the fused kernel drew: same output, same gradients.
    model.zero_grad()
    h_ref = model.hidden(x) * mask / (1 - p)
    y_ref = model.fc2(h_ref)
    torch.testing.assert_close(y, y_ref)
    y_ref.square().sum().backward()
    for g, q in zip(grads, model.parameters()):
        torch.testing.assert_close(g, q.grad)

    h2, _ = compiled(x)
    assert not torch.equal(h2 != 0, mask), "each step draws a new mask"
    assert pd.stats().get("fallbacks", 0) == 0


def test_dropout_mask_is_generated_in_the_fused_kernel():
    torch.manual_seed(4)
    model = DropoutMLP(0.5).train()
    torch.compile(model, backend="pyfuser")(torch.randn(4, 16))[1].sum().backward()
    from pyfuser.dynamo.regions import region

    fds = [t.fd for t in region._TRANSLATIONS.values() if not isinstance(t, Exception)]
    random_fds = [fd for fd in fds if any(e.op in ("uniform", "rand_like") for e in fd.ir.exprs)]
    assert random_fds, "the forward's dropout mask should come from a pyfuser random op"
    assert any(o.dtype.torch == torch.bool for fd in random_fds for o in fd.ir.outputs), \
        "the forward saves the mask as bool for the backward"
