"""Real training fusions (forward and backward) against torch autograd on small
shapes, in fp32 and bf16 (computed in fp32 inside the fusion): RMS norm, softmax and
log-softmax backward, GELU (tanh and erf) backward, rotary position embedding, an
Adam step, dropout + residual + layer norm.  Each asserts its kernel-launch count
and that no host (reference) step ran."""
import math

import pytest
import torch
import torch.nn.functional as F

import pyfuser
from pyfuser import DataType, FusionDefinition

FL = DataType.Float
N, H = 8, 64
DTYPES = [DataType.Float, DataType.BFloat16]


def tol(dt):
    return dict(rtol=1e-5, atol=1e-5) if dt is FL else dict(rtol=1.6e-2, atol=1.6e-2)


def tensor(fd, rank, dtype=FL):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def upcast(fd, t):
    return t if t.dtype is FL else fd.ops.cast(t, dtype=FL)


def downcast(fd, t, dt):
    return t if dt is FL else fd.ops.cast(t, dtype=dt)


def run(fd, inputs, launches=None):
    """Execute (twice: the second is the cached path) and check the launch count and
    that every segment is a generated kernel."""
    fd.execute(list(inputs))
    before = pyfuser.cache_info()["launches"]
    out = fd.execute(list(inputs))
    n = pyfuser.cache_info()["launches"] - before
    plan = list(fd._runtime.plans.values())[-1]
    assert all(s.scheduler is not None for s in plan.steps), \
        [s.reason for s in plan.steps if s.scheduler is None]
    if launches is not None:
        assert n == launches, f"{n} kernel launches, expected {launches}"
    return out


def data(*shapes, dt=FL, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dt.torch) for s in shapes]


def row_bcast(fd, t):  # [N] -> [N, H]
    return fd.ops.broadcast_in_dim(t, shape=[N, H], broadcast_dims=[0])


def col_bcast(fd, t):  # [H] -> [N, H]
    return fd.ops.broadcast_in_dim(t, shape=[N, H], broadcast_dims=[1])


# -- RMS norm --------------------------------------------------------------------------
EPS = 1e-6


@pytest.mark.parametrize("dt", DTYPES)
def test_rms_norm_forward(dt):
    x, w = data((N, H), (H,), dt=dt, seed=1)
    with FusionDefinition() as fd:
        tx, tw = tensor(fd, 2, dt), tensor(fd, 1, dt)
        xf = upcast(fd, tx)
        ms = fd.ops.div(fd.ops.sum(fd.ops.mul(xf, xf), dims=[1]), H)
        rstd = fd.ops.rsqrt(fd.ops.add(ms, EPS))
        y = fd.ops.mul(fd.ops.mul(xf, row_bcast(fd, rstd)), col_bcast(fd, upcast(fd, tw)))
        fd.add_output(downcast(fd, y, dt))
        fd.add_output(rstd)
    y, rstd = run(fd, [x, w], launches=1)
    xr, wr = x.float(), w.float()
    ref_rstd = torch.rsqrt(xr.pow(2).mean(1) + EPS)
    torch.testing.assert_close(y, F.rms_norm(xr, [H], wr, EPS).to(dt.torch), **tol(dt))
    torch.testing.assert_close(rstd, ref_rstd, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", DTYPES)
def test_rms_norm_backward(dt):
    x, w, dy = data((N, H), (H,), (N, H), dt=dt, seed=2)
    rstd = torch.rsqrt(x.float().pow(2).mean(1) + EPS)
    with FusionDefinition() as fd:
        tx, tw, tdy, tr = tensor(fd, 2, dt), tensor(fd, 1, dt), tensor(fd, 2, dt), tensor(fd, 1)
        xf, dyf = upcast(fd, tx), upcast(fd, tdy)
        xhat = fd.ops.mul(xf, row_bcast(fd, tr))
        g = fd.ops.mul(dyf, col_bcast(fd, upcast(fd, tw)))
        proj = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), dims=[1]), H)
        dx = fd.ops.mul(row_bcast(fd, tr), fd.ops.sub(g, fd.ops.mul(xhat, row_bcast(fd, proj))))
        fd.add_output(downcast(fd, dx, dt))
        fd.add_output(downcast(fd, fd.ops.sum(fd.ops.mul(dyf, xhat), dims=[0]), dt))
    dx, dw = run(fd, [x, w, dy, rstd], launches=2)  # per-row and per-column sums: two kernels
    xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
    F.rms_norm(xr, [H], wr, EPS).backward(dy.float())
    torch.testing.assert_close(dx, xr.grad.to(dt.torch), **tol(dt))
    torch.testing.assert_close(dw, wr.grad.to(dt.torch), rtol=1e-4 if dt is FL else 1.6e-2,
                               atol=1e-4 if dt is FL else 1.6e-2)


# -- softmax / log-softmax backward --------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward(dt, log):
    x, dy = data((N, H), (N, H), dt=dt, seed=3)
    xr = x.float().requires_grad_()
    y = (F.log_softmax if log else F.softmax)(xr, dim=-1)
    y.backward(dy.float())
    with FusionDefinition() as fd:
        ty, tdy = tensor(fd, 2, dt), tensor(fd, 2, dt)
        yf, dyf = upcast(fd, ty), upcast(fd, tdy)
        if log:  # dx = dy - exp(y) * sum(dy)
            s = fd.ops.sum(dyf, dims=[-1], keepdim=True)
            dx = fd.ops.sub(dyf, fd.ops.mul(fd.ops.exp(yf), fd.ops.expand(s, shape=[N, H])))
        else:  # dx = y * (dy - sum(dy * y))
            s = fd.ops.sum(fd.ops.mul(dyf, yf), dims=[-1], keepdim=True)
            dx = fd.ops.mul(yf, fd.ops.sub(dyf, fd.ops.expand(s, shape=[N, H])))
        fd.add_output(downcast(fd, dx, dt))
    (dx,) = run(fd, [y.detach().to(dt.torch), dy], launches=1)
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
    with FusionDefinition() as fd:
        tx, tdy = tensor(fd, 2, dt), tensor(fd, 2, dt)
        xf, dyf = upcast(fd, tx), upcast(fd, tdy)
        if approximate == "tanh":
            k, c = math.sqrt(2 / math.pi), 0.044715
            x3 = fd.ops.mul(fd.ops.mul(xf, xf), xf)
            t = fd.ops.tanh(fd.ops.mul(fd.ops.add(xf, fd.ops.mul(x3, c)), k))
            left = fd.ops.mul(fd.ops.add(t, 1.0), 0.5)
            dt_dx = fd.ops.mul(fd.ops.add(fd.ops.mul(fd.ops.mul(xf, xf), 3 * c), 1.0), k)
            right = fd.ops.mul(fd.ops.mul(fd.ops.mul(xf, 0.5), fd.ops.sub(1.0, fd.ops.mul(t, t))), dt_dx)
            grad = fd.ops.add(left, right)
        else:
            cdf = fd.ops.mul(fd.ops.add(fd.ops.erf(fd.ops.mul(xf, 1 / math.sqrt(2))), 1.0), 0.5)
            pdf = fd.ops.mul(fd.ops.exp(fd.ops.mul(fd.ops.mul(xf, xf), -0.5)), 1 / math.sqrt(2 * math.pi))
            grad = fd.ops.add(cdf, fd.ops.mul(xf, pdf))
        fd.add_output(downcast(fd, fd.ops.mul(dyf, grad), dt))
    (dx,) = run(fd, [x, dy], launches=1)
    xr = x.float().requires_grad_()
    F.gelu(xr, approximate=approximate).backward(dy.float())
    torch.testing.assert_close(dx, xr.grad.to(dt.torch), **tol(dt))


# -- rotary position embedding -------------------------------------------------------
def _rotate_half(fd, t, sign_first):
    """cat([-x2, x1]) (sign_first=-1) or its transpose cat([x2, -x1]) (sign_first=+1)."""
    h = H // 2
    x1 = fd.ops.slice(t, start_indices=[0, 0], end_indices=[N, h])
    x2 = fd.ops.slice(t, start_indices=[0, h], end_indices=[N, H])
    if sign_first < 0:
        return fd.ops.cat([fd.ops.neg(x2), x1], dim=-1)
    return fd.ops.cat([x2, fd.ops.neg(x1)], dim=-1)


def _rope_ref(x, theta):
    cos, sin = torch.cat([theta, theta], -1).cos(), torch.cat([theta, theta], -1).sin()
    x1, x2 = x[..., : H // 2], x[..., H // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


@pytest.mark.parametrize("dt", DTYPES)
def test_rope_forward_and_backward(dt):
    x, dy = data((N, H), (N, H), dt=dt, seed=5)
    theta = torch.arange(N)[:, None] * (10000.0 ** (-torch.arange(H // 2) * 2 / H))[None, :]
    with FusionDefinition() as fd:
        tx, tdy, tth = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 2)
        ang = fd.ops.cat([tth, tth], dim=-1)
        cos, sin = fd.ops.cos(ang), fd.ops.sin(ang)
        xf, dyf = upcast(fd, tx), upcast(fd, tdy)
        y = fd.ops.add(fd.ops.mul(xf, cos), fd.ops.mul(_rotate_half(fd, xf, -1), sin))
        dx = fd.ops.add(fd.ops.mul(dyf, cos), _rotate_half(fd, fd.ops.mul(dyf, sin), +1))
        fd.add_output(downcast(fd, y, dt))
        fd.add_output(downcast(fd, dx, dt))
    y, dx = run(fd, [x, dy, theta], launches=1)
    xr = x.float().requires_grad_()
    ref = _rope_ref(xr, theta)
    ref.backward(dy.float())
    torch.testing.assert_close(y, ref.detach().to(dt.torch), **tol(dt))
    torch.testing.assert_close(dx, xr.grad.to(dt.torch), **tol(dt))


# -- Adam step -------------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
def test_adam_step(dt):
    """One Adam step (fp32 moments; params and grads in ``dt``), as torch.optim.Adam."""
    lr, b1, b2, eps, step = 1e-2, 0.9, 0.999, 1e-8, 3
    p, gr, m, v = data((N, H), (N, H), (N, H), (N, H), seed=6)
    v = v.abs()
    p, gr = p.to(dt.torch), gr.to(dt.torch)
    with FusionDefinition() as fd:
        tp, tg, tm, tv = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 2), tensor(fd, 2)
        slr, sb1, sb2 = fd.define_scalar(dtype=FL), fd.define_scalar(dtype=FL), fd.define_scalar(dtype=FL)
        sc1, sc2 = fd.define_scalar(dtype=FL), fd.define_scalar(dtype=FL)  # bias corrections
        gf = upcast(fd, tg)
        m2 = fd.ops.add(fd.ops.mul(tm, sb1), fd.ops.mul(gf, fd.ops.sub(1.0, sb1)))
        v2 = fd.ops.add(fd.ops.mul(tv, sb2), fd.ops.mul(fd.ops.mul(gf, gf), fd.ops.sub(1.0, sb2)))
        denom = fd.ops.add(fd.ops.div(fd.ops.sqrt(v2), fd.ops.sqrt(sc2)), eps)
        upd = fd.ops.div(fd.ops.div(fd.ops.mul(m2, slr), sc1), denom)
        fd.add_output(downcast(fd, fd.ops.sub(upcast(fd, tp), upd), dt))
        fd.add_output(m2)
        fd.add_output(v2)
    c1, c2 = 1 - b1 ** step, 1 - b2 ** step
    p_new, m_new, v_new = run(fd, [p, gr, m, v, lr, b1, b2, c1, c2], launches=1)

    param = torch.nn.Parameter(p.float().clone())
    opt = torch.optim.Adam([param], lr=lr, betas=(b1, b2), eps=eps, foreach=False)
    param.grad = gr.float().clone()
    opt.state[param] = {"step": torch.tensor(float(step - 1)), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
    opt.step()
    st = opt.state[param]
    torch.testing.assert_close(m_new, st["exp_avg"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v_new, st["exp_avg_sq"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(p_new, param.detach().to(dt.torch), **tol(dt))


# -- dropout + residual + layer norm ----------------------------------------------------
P = 0.25


def dropout_residual_ln(fd, dt):
    tx, tres, tw, tb = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 1), tensor(fd, 1)
    seed, offset = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
    xf = upcast(fd, tx)
    r = fd.ops.rand_like(xf, rng_seed=seed, rng_offset=offset)
    keep = fd.ops.ge(r, P)
    dropped = fd.ops.mul(fd.ops.where(keep, xf, 0.0), 1.0 / (1.0 - P))
    h = fd.ops.add(dropped, upcast(fd, tres))
    var, mean = fd.ops.var_mean(h, dims=[1], correction=0)
    rstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
    xhat = fd.ops.mul(fd.ops.sub(h, row_bcast(fd, mean)), row_bcast(fd, rstd))
    y = fd.ops.add(fd.ops.mul(xhat, col_bcast(fd, tw)), col_bcast(fd, tb))
    fd.add_output(downcast(fd, y, dt))
    fd.add_output(keep)
    fd.add_output(downcast(fd, h, dt))
    fd.add_output(mean)
    fd.add_output(rstd)


@pytest.mark.parametrize("dt", DTYPES)
def test_dropout_residual_layer_norm(dt):
    x, res = data((N, H), (N, H), dt=dt, seed=7)
    w, b = data((H,), (H,), seed=8)
    with FusionDefinition() as fd:
        dropout_residual_ln(fd, dt)
    inputs = [x, res, w, b, 1234, 0]
    y, keep, h, mean, rstd = run(fd, inputs, launches=1)
    # Same seed and offset: the same mask and outputs on every execute and in the
    # reference executor.
    ref = fd.reference(inputs)
    assert torch.equal(keep, ref[1])
    for got, want in zip([y, h, mean, rstd], [ref[0], ref[2], ref[3], ref[4]]):
        torch.testing.assert_close(got, want, **tol(dt))
    frac = keep.float().mean().item()
    assert keep.dtype == torch.bool and 0.6 < frac < 0.9, frac
    # Eager with pyfuser's own keep mask.
    xr = x.float().requires_grad_()
    hr = torch.where(keep, xr, 0.0) / (1 - P) + res.float()
    yr = F.layer_norm(hr, [H], w, b, eps=1e-5)
    torch.testing.assert_close(h, hr.detach().to(dt.torch), **tol(dt))
    torch.testing.assert_close(y, yr.detach().to(dt.torch), **tol(dt))
    var, mu = torch.var_mean(hr.detach(), 1, correction=0)
    torch.testing.assert_close(mean, mu, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd, torch.rsqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
    # Another offset: another mask.
    y2, keep2, *_ = fd.execute([x, res, w, b, 1234, N * H])
    assert not torch.equal(keep, keep2)


def test_dropout_residual_layer_norm_backward():
    """The backward of the fusion above (dx through the mask, dw/db column sums)."""
    x, res, dy = data((N, H), (N, H), (N, H), seed=9)
    w, b = data((H,), (H,), seed=10)
    with FusionDefinition() as fwd:
        dropout_residual_ln(fwd, FL)
    y, keep, h, mean, rstd = fwd.execute([x, res, w, b, 99, 0])
    with FusionDefinition() as fd:
        tdy, th, tk, tw, tm, tr = (tensor(fd, 2), tensor(fd, 2), tensor(fd, 2, DataType.Bool), tensor(fd, 1),
                                   tensor(fd, 1), tensor(fd, 1))
        xhat = fd.ops.mul(fd.ops.sub(th, row_bcast(fd, tm)), row_bcast(fd, tr))
        g = fd.ops.mul(tdy, col_bcast(fd, tw))
        a = fd.ops.div(fd.ops.sum(g, dims=[1]), H)
        c = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), dims=[1]), H)
        dh = fd.ops.mul(row_bcast(fd, tr), fd.ops.sub(fd.ops.sub(g, row_bcast(fd, a)),
                                                        fd.ops.mul(xhat, row_bcast(fd, c))))
        fd.add_output(fd.ops.mul(fd.ops.where(tk, dh, 0.0), 1.0 / (1.0 - P)))  # dx
        fd.add_output(dh)  # dres
        fd.add_output(fd.ops.sum(fd.ops.mul(tdy, xhat), dims=[0]))  # dw
        fd.add_output(fd.ops.sum(tdy, dims=[0]))  # db
    dx, dres, dw, db = run(fd, [dy, h, keep, w, mean, rstd], launches=2)
    xr, rr = x.clone().requires_grad_(), res.clone().requires_grad_()
    wr, br = w.clone().requires_grad_(), b.clone().requires_grad_()
    F.layer_norm(torch.where(keep, xr, 0.0) / (1 - P) + rr, [H], wr, br, eps=1e-5).backward(dy)
    torch.testing.assert_close(dx, xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dres, rr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw, wr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(db, br.grad, rtol=1e-4, atol=1e-4)
