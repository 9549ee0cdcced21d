"""Fusions no single kernel can do, split at reductions into kernels connected by
intermediates (no host step): layer-norm backward, a reduction read after a permute."""
import pytest
import torch

from pyfuser import DataType, FusionDefinition

from ..helpers import without_scheduler

FL = DataType.Float


def tensor(fd, rank, dtype=FL):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def steps(fd):
    return list(fd._runtime.plans.values())[-1].steps


def layer_norm_bwd(fd, n, h, dt, stats_inside):
    x, dy, w = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 1)
    xf, dyf = fd.ops.cast(x, dtype=FL), fd.ops.cast(dy, dtype=FL)
    if stats_inside:
        var, mean = fd.ops.var_mean(xf, dims=[1], correction=0, keepdim=False)
        rstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
    else:
        mean, rstd = tensor(fd, 1), tensor(fd, 1)
    bc = lambda t: fd.ops.broadcast_in_dim(t, shape=[n, h], broadcast_dims=[0])  # noqa: E731
    xhat = fd.ops.mul(fd.ops.sub(xf, bc(mean)), bc(rstd))
    g = fd.ops.mul(dyf, fd.ops.broadcast_in_dim(w, shape=[n, h], broadcast_dims=[1]))
    a = fd.ops.sum(g, dims=[1])
    b = fd.ops.sum(fd.ops.mul(g, xhat), dims=[1])
    dx = fd.ops.mul(bc(rstd), fd.ops.sub(fd.ops.sub(g, fd.ops.div(bc(a), h)),
                                         fd.ops.mul(xhat, fd.ops.div(bc(b), h))))
    fd.add_output(fd.ops.cast(dx, dtype=dt))
    fd.add_output(fd.ops.sum(fd.ops.mul(dyf, xhat), dims=[0]))
    fd.add_output(fd.ops.sum(dyf, dims=[0]))


@pytest.mark.parametrize("stats_inside", [False, True])
@pytest.mark.parametrize("dt", [DataType.Float, DataType.Half])
def test_layer_norm_backward_against_autograd(stats_inside, dt):
    n, h = 6, 20
    g = torch.Generator().manual_seed(7)
    tdt = dt.torch
    x = torch.randn(n, h, generator=g).to(tdt)
    dy = torch.randn(n, h, generator=g).to(tdt)
    w = torch.randn(h, generator=g)
    bias = torch.randn(h, generator=g)
    with FusionDefinition() as fd:
        layer_norm_bwd(fd, n, h, dt, stats_inside)
    xr = x.float().requires_grad_()
    wr, br = w.clone().requires_grad_(), bias.clone().requires_grad_()
    y = torch.nn.functional.layer_norm(xr, [h], wr, br, eps=1e-5)
    y.backward(dy.float())
    var, mean = torch.var_mean(x.float(), dim=1, correction=0)
    inputs = [x, dy, w] if stats_inside else [x, dy, w, mean, torch.rsqrt(var + 1e-5)]
    dx, dw, db = fd.execute(inputs)
    tol = dict(rtol=1e-4, atol=1e-5) if dt is FL else dict(rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(dx, xr.grad.to(tdt), **tol)
    torch.testing.assert_close(dw, wr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(db, br.grad, rtol=1e-4, atol=1e-4)
    assert all(s.scheduler is not None for s in steps(fd)), "layer-norm backward must not need a host step"


@without_scheduler("inner_outer")  # several segments to show (one inner-outer kernel otherwise)
def test_layer_norm_backward_dump_shows_segments(capsys, monkeypatch):
    monkeypatch.setenv("PYFUSER_DUMP", "segmented_fusion")
    with FusionDefinition() as fd:
        layer_norm_bwd(fd, 4, 8, FL, True)
    fd.execute([torch.randn(4, 8), torch.randn(4, 8), torch.randn(8)])
    out = capsys.readouterr().out
    assert "Segmented fusion" in out and "host" not in out
    assert out.count("  segment ") == len(steps(fd)) >= 2


def test_reduction_consumed_after_permute():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 7, generator=g)
    y = torch.randn(7, 5, generator=g)
    with FusionDefinition() as fd:
        tx, ty = tensor(fd, 2), tensor(fd, 2)
        s = fd.ops.sum(tx, dims=[1], keepdim=True)
        c = fd.ops.sub(tx, fd.ops.broadcast_in_dim(s, shape=[5, 7], broadcast_dims=[0, 1]))
        p = fd.ops.permute(c, dims=[1, 0])
        fd.add_output(fd.ops.sum(fd.ops.mul(p, ty), dims=[1]))
    (out,) = fd.execute([x, y])
    torch.testing.assert_close(out, ((x - x.sum(1, keepdim=True)).T * y).sum(1))
    assert all(s.scheduler is not None for s in steps(fd))


def test_plain_fusion_keeps_fast_path():
    with FusionDefinition() as fd:
        t = tensor(fd, 2)
        fd.add_output(fd.ops.exp(t))
    x = torch.randn(3, 4)
    fd.execute([x])
    assert fd._runtime.programs, "a one-kernel fusion must take the cached program"
    torch.testing.assert_close(fd.execute([x])[0], torch.exp(x))
