"""The model zoo (``pyfuser.bench.zoo``) through the backend against eager.

Each model is built twice with the same random weights (every dropout probability
0, training mode), one copy compiled with ``backend="pyfuser"``; both run the same
batches (padded attention masks, labels ignored at the padding and at random
positions) and their losses and every parameter's gradient are compared after each
step.  Two steps, so the second call of every region takes the prepared-launch path
and the views between regions are rebuilt from their traced strides (the fast paths
that run in training).  The MLP trains for several AdamW steps, with the optimizer's
step compiled too: its loss curve and final parameters are compared.

Tolerances (fp32 throughout): pyfuser's kernels compute in fp32 but sum in another
order than ATen (a tile's tree reduction, a row split across programs), and
rewrites such as the fused log-softmax gather or the one-hot sum reassociate the
math, so results differ from eager by rounding: about 1e-7 absolute on gradients
whose largest element is 0.2 - 1 at these sizes.  Gradients compare with
``rtol=1e-4, atol=1e-5``, two orders of magnitude above that rounding and two or
more below the size of a real bug (the view-offset bug in GPT-2's fused QKV, which
this file catches, was off by 0.07); the loss with ``rtol=1e-5, atol=1e-6``.
Adam's step normalises the gradient, so an element's update moves by up to ``lr``
whatever its gradient's size; at ``lr=1e-3`` the final parameters compare with
``atol=1e-5``, which a sign flip of a single update would exceed.

Each model prints its differences, fused regions and fallbacks (``pytest -s``), and
must have formed regions: a zoo passing with nothing fused would test nothing.
"""
import copy
import warnings

import pytest
import torch

import pyfuser.dynamo as pd
from pyfuser.bench import zoo

pytest.importorskip("transformers")

GRAD_TOL = dict(rtol=1e-4, atol=1e-5)
LOSS_TOL = dict(rtol=1e-5, atol=1e-6)
STEPS = 2
# At least this many regions per model (each forms more: a floor that an accidental
# "nothing fused" cannot pass, not a count to keep in step with the partitioner).
MIN_REGIONS = dict(bert=10, gpt2=10, llama=10, t5=20, vit=10, mlp=4)


def differences(reference, model):
    """Max abs difference of the gradients, and max over parameters of that
    difference relative to the parameter's largest eager gradient element, or to
    ``atol`` where that is smaller (a key bias's gradient is zero up to rounding)."""
    worst_abs = worst_rel = 0.0
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is None:
            continue
        d = (q.grad - p.grad).abs().max().item()
        worst_abs = max(worst_abs, d)
        worst_rel = max(worst_rel, d / max(p.grad.abs().max().item(), GRAD_TOL["atol"]))
    return worst_abs, worst_rel


def assert_grads_match(reference, model, step):
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, **GRAD_TOL, msg=lambda m: f"step {step}, {name}.grad: {m}")


def no_fallbacks(caught):
    """No region fell back to ATen; returns how many warned (0)."""
    ours = [str(w.message) for w in caught if issubclass(w.category, pd.FallbackWarning)]
    assert not ours, ours
    return len(ours)


def report(name, loss_diff, grad_abs, grad_rel, warned):
    s = pd.stats()
    print(f"\nzoo {name}: loss diff {loss_diff:.3g}, grad max abs diff {grad_abs:.3g}, max rel diff {grad_rel:.3g}; "
          f"regions {s.get('regions', 0)}, fusions {s.get('fusions_created', 0)}, fallbacks {s.get('fallbacks', 0)}")
    assert s.get("regions", 0) >= MIN_REGIONS[name], s
    assert s.get("fallbacks", 0) == 0 and not warned, s


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "t5", "vit"])
def test_transformer_matches_eager(name):
    built = zoo.build(name, layers=2)
    reference, model = built.model, copy.deepcopy(built.model)
    compiled = torch.compile(model, backend="pyfuser")
    g = torch.Generator().manual_seed(1)
    loss_diff = grad_abs = grad_rel = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.FallbackWarning)
        for step in range(STEPS):
            batch = built.batch(3, g)
            got = zoo.loss(compiled(**batch))
            got.backward()
            want = zoo.loss(reference(**batch))
            want.backward()
            torch.testing.assert_close(got, want, **LOSS_TOL, msg=lambda m: f"step {step}, loss: {m}")
            assert_grads_match(reference, model, step)
            d_abs, d_rel = differences(reference, model)
            loss_diff, grad_abs, grad_rel = max(loss_diff, abs(got.item() - want.item())), max(grad_abs, d_abs), \
                max(grad_rel, d_rel)
            reference.zero_grad()
            model.zero_grad()
    report(name, loss_diff, grad_abs, grad_rel, no_fallbacks(caught))


def test_mlp_trains_like_eager_with_adamw():
    built = zoo.build("mlp")
    reference, model = built.model, copy.deepcopy(built.model)
    compiled = torch.compile(model, backend="pyfuser")
    opt_ref = torch.optim.AdamW(reference.parameters(), lr=1e-3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_step = torch.compile(opt.step, backend="pyfuser")
    g = torch.Generator().manual_seed(1)
    batches = [built.batch(8, g)] * 5
    got, want, grad_abs, grad_rel = [], [], 0.0, 0.0
    for step, batch in enumerate(batches):
        got.append(zoo.loss(compiled(**batch)))
        got[-1].backward()
        want.append(zoo.loss(reference(**batch)))
        want[-1].backward()
        assert_grads_match(reference, model, step)
        d_abs, d_rel = differences(reference, model)
        grad_abs, grad_rel = max(grad_abs, d_abs), max(grad_rel, d_rel)
        opt_ref.step()
        opt_step()
        opt_ref.zero_grad()
        opt.zero_grad()
    torch.testing.assert_close(torch.stack(got), torch.stack(want), **LOSS_TOL)
    assert want[-1] < want[0], "five AdamW steps on one batch should lower its loss"
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(q, p, rtol=0, atol=1e-5, msg=lambda m: f"{name}: {m}")
    loss_diff = (torch.stack(got) - torch.stack(want)).abs().max().item()
    report("mlp", loss_diff, grad_abs, grad_rel, 0)
    assert pd.stats()["region_calls"] > pd.stats()["regions"], "the optimizer's regions ran every step"
