"""Real training fusions (forward and backward) against torch autograd on small
shapes, in fp32 and bf16 (computed in fp32 inside the fusion): layer norm and RMS
norm, softmax and log-softmax backward, GELU (tanh and erf) backward, rotary position
embedding, cross-entropy, an Adam step, dropout + residual + layer norm.  The
fusions are the benchmark's (pyfuser.bench.training).  Each asserts its
kernel-launch count and that no reference step ran (and no host step, except
cross-entropy's take_along_axis)."""
import pytest
import torch
import torch.nn.functional as F

import pyfuser
from pyfuser import DataType, FusionDefinition
from pyfuser.bench import training as T

FL = DataType.Float
N, H = 8, 64
DTYPES = [DataType.Float, DataType.BFloat16]
EPS = T.EPS


def tol(dt):
    return dict(rtol=1e-5, atol=1e-5) if dt is FL else dict(rtol=1.6e-2, atol=1.6e-2)


def define(build, *args):
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


def run(fd, inputs, launches=None, host_steps=0):
    """Execute (twice: the second is the cached path) and check the launch count and
    that every segment is a generated kernel or (``host_steps`` of them) a host op."""
    fd.execute(list(inputs))
    before = pyfuser.cache_info()["launches"]
    out = fd.execute(list(inputs))
    n = pyfuser.cache_info()["launches"] - before
    plan = list(fd._runtime.plans.values())[-1]
    others = [s for s in plan.steps if s.scheduler is None]
    assert all(s.is_host for s in others), [s.reason for s in others if not s.is_host]
    assert len(others) == host_steps, len(others)
    if launches is not None:
        assert n == launches, f"{n} kernel launches, expected {launches}"
    return out


def data(*shapes, dt=FL, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dt.torch) for s in shapes]


def grads_close(got, want, dt, sums=False):
    """Column sums (dw, db) add N rounded terms: a looser fp32 tolerance."""
    if sums and dt is FL:
        torch.testing.assert_close(got, want.to(dt.torch), rtol=1e-4, atol=1e-4)
    else:
        torch.testing.assert_close(got, want.to(dt.torch), **tol(dt))


# -- layer norm ------------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
def test_layer_norm_backward(dt):
    x, w, dy = data((N, H), (H,), (N, H), dt=dt, seed=11)
    b = data((H,), dt=dt, seed=12)[0]
    mean, rstd = T.row_stats(x)
    fd = define(T.build_layer_norm_backward, (N, H, dt))
    dx, dw, db = run(fd, [dy, x, w, mean, rstd], launches=1)  # per-row and per-column sums: one inner-outer kernel
    xr, wr, br = (t.float().requires_grad_() for t in (x, w, b))
    F.layer_norm(xr, [H], wr, br, eps=EPS).backward(dy.float())
    grads_close(dx, xr.grad, dt)
    grads_close(dw, wr.grad, dt, sums=True)
    grads_close(db, br.grad, dt, sums=True)


# -- RMS norm --------------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
def test_rms_norm_forward(dt):
    x, w = data((N, H), (H,), dt=dt, seed=1)
    y, rstd = run(define(T.build_rms_norm, (N, H, dt)), [x, w], launches=1)
    xr, wr = x.float(), w.float()
    ref_rstd = torch.rsqrt(xr.pow(2).mean(1) + EPS)
    torch.testing.assert_close(y, F.rms_norm(xr, [H], wr, EPS).to(dt.torch), **tol(dt))
    torch.testing.assert_close(rstd, ref_rstd, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", DTYPES)
def test_rms_norm_backward(dt):
    x, w, dy = data((N, H), (H,), (N, H), dt=dt, seed=2)
    rstd = torch.rsqrt(x.float().pow(2).mean(1) + EPS)
    fd = define(T.build_rms_norm_backward, (N, H, dt))
    dx, dw = run(fd, [dy, x, w, rstd], launches=1)  # per-row and per-column sums: one inner-outer kernel
    xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
    F.rms_norm(xr, [H], wr, EPS).backward(dy.float())
    grads_close(dx, xr.grad, dt)
    grads_close(dw, wr.grad, dt, sums=True)


# -- softmax / log-softmax backward --------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward(dt, log):
    x, dy = data((N, H), (N, H), dt=dt, seed=3)
    xr = x.float().requires_grad_()
    y = (F.log_softmax if log else F.softmax)(xr, dim=-1)
    y.backward(dy.float())
    (dx,) = run(define(T.build_softmax_backward, (N, H, dt), log), [dy, y.detach().to(dt.torch)], launches=1)
    ref = xr.grad if dt is FL else _bwd_from_rounded(y.detach().to(dt.torch), dy, log)
    torch.testing.assert_close(dx, ref.to(dt.torch), **tol(dt))


def _bwd_from_rounded(y, dy, log):
    """Autograd's formula applied to the 16-bit y the fusion reads."""
    y, dy = y.float(), dy.float()
    if log:
        return dy - y.exp() * dy.sum(-1, keepdim=True)
    return y * (dy - (dy * y).sum(-1, keepdim=True))


# -- GELU backward ---------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_backward(dt, approximate):
    x, dy = data((N, H), (N, H), dt=dt, seed=4)
    (dx,) = run(define(T.build_gelu_backward, (N, H, dt), approximate), [dy, x], launches=1)
    xr = x.float().requires_grad_()
    F.gelu(xr, approximate=approximate).backward(dy.float())
    torch.testing.assert_close(dx, xr.grad.to(dt.torch), **tol(dt))


# -- rotary position embedding -------------------------------------------------------
def _rope_ref(x, theta):
    ang = torch.cat([theta, theta], -1)
    if x.dim() == 3:
        ang = ang[:, None, :]
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * ang.cos() + torch.cat([-x2, x1], -1) * ang.sin()


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(N, H), (N, 3, H)], ids=["rows", "heads"])
def test_rope_forward_and_backward(dt, shape):
    x, dy = data(shape, shape, dt=dt, seed=5)
    theta = T.rope_angles(N, H)
    y, dx = run(define(T.build_rope, (*shape, dt), True), [x, dy, theta], launches=1)
    xr = x.float().requires_grad_()
    ref = _rope_ref(xr, theta)
    ref.backward(dy.float())
    torch.testing.assert_close(y, ref.detach().to(dt.torch), **tol(dt))
    torch.testing.assert_close(dx, xr.grad.to(dt.torch), **tol(dt))


# -- cross-entropy -----------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
def test_cross_entropy(dt):
    """Log-softmax with take_along_axis read in its kernel (no host step, the fp32
    log-probabilities never stored), the mean in a second kernel."""
    (logits,) = data((N, 101), dt=dt, seed=13)
    target = torch.randint(0, 101, (N,), generator=torch.Generator().manual_seed(14))
    (loss,) = run(define(T.build_cross_entropy, (N, 101, dt)), [logits, target], launches=2)
    assert loss.dtype == torch.float32 and loss.shape == ()
    torch.testing.assert_close(loss, F.cross_entropy(logits.float(), target), rtol=1e-5, atol=1e-5)


# -- Adam step -------------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
def test_adam_step(dt):
    """One Adam step (fp32 moments; params and grads in ``dt``), as torch.optim.Adam."""
    lr, b1, b2, c1, c2 = T.adam_scalars()
    p, gr, m, v = data((N, H), (N, H), (N, H), (N, H), seed=6)
    v = v.abs()
    p, gr = p.to(dt.torch), gr.to(dt.torch)
    p_new, m_new, v_new = run(define(T.build_adam_step, (N, H, dt)), [p, gr, m, v, lr, b1, b2, c1, c2], launches=1)

    param = torch.nn.Parameter(p.float().clone())
    opt = torch.optim.Adam([param], lr=lr, betas=(b1, b2), eps=T.ADAM_EPS, foreach=False)
    param.grad = gr.float().clone()
    opt.state[param] = {"step": torch.tensor(float(T.ADAM_STEP - 1)), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
    opt.step()
    st = opt.state[param]
    torch.testing.assert_close(m_new, st["exp_avg"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v_new, st["exp_avg_sq"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(p_new, param.detach().to(dt.torch), **tol(dt))


# -- dropout + residual + layer norm ----------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
def test_dropout_residual_layer_norm(dt):
    x, res, w, b = data((N, H), (N, H), (H,), (H,), dt=dt, seed=7)
    fd = define(T.build_dropout_residual_layer_norm, (N, H, dt))
    inputs = [x, res, w, b, 1234, 0]
    keep, h, y, mean, rstd = run(fd, inputs, launches=1)
    # Same seed and offset: the same mask and outputs on every execute and in the
    # reference executor.
    ref = fd.reference(inputs)
    assert torch.equal(keep, ref[0])
    for got, want in zip([h, y, mean, rstd], ref[1:]):
        torch.testing.assert_close(got, want, **tol(dt))
    frac = keep.float().mean().item()
    assert keep.dtype == torch.bool and 0.75 < frac < 0.99, frac
    # Eager with pyfuser's own keep mask.
    xr = x.float().requires_grad_()
    hr = torch.where(keep, xr, 0.0) * T.KEEP_SCALE + res.float()
    yr = F.layer_norm(hr, [H], w.float(), b.float(), eps=EPS)
    torch.testing.assert_close(h, hr.detach().to(dt.torch), **tol(dt))
    torch.testing.assert_close(y, yr.detach().to(dt.torch), **tol(dt))
    var, mu = torch.var_mean(h.float(), 1, correction=0)  # the statistics of the stored h
    torch.testing.assert_close(mean, mu, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd, torch.rsqrt(var + EPS), rtol=1e-4, atol=1e-4)
    # Another offset: another mask.
    keep2, *_ = fd.execute([x, res, w, b, 1234, N * H])
    assert not torch.equal(keep, keep2)


@pytest.mark.parametrize("dt", DTYPES)
def test_dropout_residual_layer_norm_backward(dt):
    """The backward of the fusion above (dx through the mask, dw/db column sums)."""
    x, res, dy, w, b = data((N, H), (N, H), (N, H), (H,), (H,), dt=dt, seed=9)
    keep, h, y, mean, rstd = define(T.build_dropout_residual_layer_norm, (N, H, dt)).execute([x, res, w, b, 99, 0])
    fd = define(T.build_dropout_residual_layer_norm_backward, (N, H, dt))
    dx, dres, dw, db = run(fd, [dy, h, keep, w, mean, rstd], launches=1)
    hr = h.float().requires_grad_()
    wr, br = w.float().requires_grad_(), b.float().requires_grad_()
    F.layer_norm(hr, [H], wr, br, eps=EPS).backward(dy.float())
    grads_close(dres, hr.grad, dt)
    # the residual's gradient is dh; dropout's backward masks and scales the stored dh
    torch.testing.assert_close(dx, torch.where(keep, dres.float() * T.KEEP_SCALE, 0.0).to(dt.torch), **tol(dt))
    grads_close(dw, wr.grad, dt, sums=True)
    grads_close(db, br.grad, dt, sums=True)
    if dt is FL:  # end to end through autograd: x and the residual
        xr, rr = x.clone().requires_grad_(), res.clone().requires_grad_()
        wr2, br2 = w.clone().requires_grad_(), b.clone().requires_grad_()
        F.layer_norm(torch.where(keep, xr, 0.0) * T.KEEP_SCALE + rr, [H], wr2, br2, eps=EPS).backward(dy)
        torch.testing.assert_close(dx, xr.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(dres, rr.grad, rtol=1e-4, atol=1e-5)
