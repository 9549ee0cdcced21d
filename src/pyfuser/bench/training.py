"""The fusions of a transformer's training step, forward and backward, defined once.

The benchmark cases (``cases.py``) and the tests against torch autograd
(``tests/segment/test_training_fusions.py``) both build their fusions here.  Each
fusion has

* ``build_<name>(fd, sizes, ...)``: records it into a current-API FusionDefinition;
  ``sizes`` ends with the storage dtype (a ``DataType``), e.g. ``(R, N, dt)``;
* ``eager_<name>(tensors, sizes, keep=None)``: the same math in torch, the
  benchmark's eager and ``torch.compile`` baseline and its correctness oracle
  (``tensors`` are the tensor inputs only; runtime scalars are pyfuser's business);
* ``<name>_inputs(sizes, device, gen)``: random inputs, never zero, with the saved
  statistics (mean, rstd) consistent with the activations they describe.

Dtypes are those of bf16 mixed-precision training: activations, gradients and
weights stored in ``dt`` (bf16 in the benchmark), statistics saved for backward
(mean, rstd) and the optimizer's master weights and moments in fp32; every fusion
computes in fp32 and rounds each stored value once.

Worked example, layer norm backward at [R, N]: one row reduction (dx needs the row
sums of g = dy * w and of g * xhat) and two column reductions (dw = sum over rows of
dy * xhat, db = sum over rows of dy).
"""
from __future__ import annotations

import math

import torch

from ..ir.dtypes import DataType

F, H, BF = DataType.Float, DataType.Half, DataType.BFloat16
TORCH = {F: torch.float32, H: torch.float16, BF: torch.bfloat16}
EPS = 1e-5
DROPOUT_P = 0.1
KEEP_SCALE = 1.0 / (1.0 - DROPOUT_P)
GELU_C = math.sqrt(2.0 / math.pi)
# One Adam step: lr, betas, eps, and the step number (bias corrections 1 - beta^step).
ADAM_LR, ADAM_B1, ADAM_B2, ADAM_EPS, ADAM_STEP = 1e-3, 0.9, 0.999, 1e-8, 10
ADAM_C1, ADAM_C2 = 1 - ADAM_B1 ** ADAM_STEP, 1 - ADAM_B2 ** ADAM_STEP
ROPE_BASE, ROPE_SEQ = 10000.0, 2048  # positions restart every ROPE_SEQ tokens (a batch of sequences)


# --- definition helpers -----------------------------------------------------------------


def tensor(fd, rank, dtype=F):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def up(fd, t):
    """``t`` in fp32 (no cast when it is fp32 already)."""
    return t if t.dtype is F else fd.ops.cast(t, F)


def down(fd, t, dt):
    """``t`` stored as ``dt`` (no cast for fp32)."""
    return t if dt is F else fd.ops.cast(t, dt)


def bcast_rows(fd, t, shape):
    """A per-row value [R] (or [.., R]) broadcast over the last dim of ``shape``."""
    return fd.ops.broadcast_in_dim(t, shape=list(shape), broadcast_dims=list(range(len(shape) - 1)))


def bcast_cols(fd, t, shape):
    """A per-column value [N] broadcast over the rows of ``shape``."""
    return fd.ops.broadcast_in_dim(t, shape=list(shape), broadcast_dims=[len(shape) - 1])


def rand(shape, dtype, device, gen, lo=0.25, hi=4.0, positive=False):
    """Magnitudes in [lo, hi), random signs unless ``positive``: never 0."""
    mag = torch.rand(shape, device=device, generator=gen) * (hi - lo) + lo
    if not positive:
        mag = torch.where(torch.rand(shape, device=device, generator=gen) > 0.5, mag, -mag)
    return mag.to(dtype)


def _weight(n, dt, device, gen):
    return rand((n,), TORCH[dt], device, gen, 0.5, 1.5, positive=True)


def row_stats(x):
    """fp32 mean and rstd over the last dim, flat, as layer norm's forward saves them."""
    var, mean = torch.var_mean(x.float(), dim=-1, correction=0)
    return mean.reshape(-1), torch.rsqrt(var + EPS).reshape(-1)


# --- layer norm -----------------------------------------------------------------------------


def layer_norm(fd, xf, w, b, R, N, dt):
    """y (stored as dt), mean and rstd (fp32) of the fp32 value ``xf`` [R, N]."""
    var, mean = fd.ops.var_mean(xf, dims=[1], correction=0)
    rstd = fd.ops.rsqrt(fd.ops.add(var, EPS))
    y = fd.ops.mul(fd.ops.sub(xf, bcast_rows(fd, mean, (R, N))), bcast_rows(fd, rstd, (R, N)))
    y = fd.ops.add(fd.ops.mul(y, bcast_cols(fd, up(fd, w), (R, N))), bcast_cols(fd, up(fd, b), (R, N)))
    return down(fd, y, dt), mean, rstd


def build_layer_norm(fd, sizes):
    """Training forward: y (input dtype), mean and rstd (fp32, saved for backward)."""
    R, N, dt = sizes
    x, w, b = tensor(fd, 2, dt), tensor(fd, 1, dt), tensor(fd, 1, dt)
    for t in layer_norm(fd, up(fd, x), w, b, R, N, dt):
        fd.add_output(t)


def native_layer_norm(x, w, b):
    """y (x's dtype), mean and rstd (fp32, flat).  CUDA's native_layer_norm returns fp32
    mean/rstd for fp16/bf16 inputs; the CPU kernel returns them in the input dtype, so
    on CPU (dry runs) the oracle computes in fp32 and rounds y once."""
    if x.device.type == "cuda":
        y, mean, rstd = torch.native_layer_norm(x, [x.shape[-1]], w, b, EPS)
    else:
        y, mean, rstd = torch.native_layer_norm(x.float(), [x.shape[-1]], w.float(), b.float(), EPS)
        y = y.to(x.dtype)
    return y, mean.view(-1), rstd.view(-1)


def eager_layer_norm(tensors, sizes, keep=None):
    return native_layer_norm(*tensors)


def norm_inputs(sizes, device, gen, bias=True):
    R, N, dt = sizes
    ts = [rand((R, N), TORCH[dt], device, gen), _weight(N, dt, device, gen)]
    if bias:
        ts.append(rand((N,), TORCH[dt], device, gen, 0.05, 0.5))
    return ts


def layer_norm_grads(fd, dy, x, mean, rstd, w, R, N):
    """fp32 (dx, dw, db) of y = (x - mean) * rstd * w + b, for the loss gradient dy:
    dx = rstd * (g - mean_row(g) - xhat * mean_row(g * xhat)) with g = dy * w."""
    shape = (R, N)
    dyf = up(fd, dy)
    xhat = fd.ops.mul(fd.ops.sub(up(fd, x), bcast_rows(fd, mean, shape)), bcast_rows(fd, rstd, shape))
    g = fd.ops.mul(dyf, bcast_cols(fd, up(fd, w), shape))
    a = fd.ops.div(fd.ops.sum(g, dims=[1]), N)
    c = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), dims=[1]), N)
    dx = fd.ops.mul(bcast_rows(fd, rstd, shape),
                    fd.ops.sub(fd.ops.sub(g, bcast_rows(fd, a, shape)), fd.ops.mul(xhat, bcast_rows(fd, c, shape))))
    return dx, fd.ops.sum(fd.ops.mul(dyf, xhat), dims=[0]), fd.ops.sum(dyf, dims=[0])


def build_layer_norm_backward(fd, sizes):
    """Inputs dy, x, w (dt), mean, rstd (fp32); outputs dx, dw, db (dt)."""
    R, N, dt = sizes
    dy, x, w = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 1, dt)
    mean, rstd = tensor(fd, 1), tensor(fd, 1)
    for t in layer_norm_grads(fd, dy, x, mean, rstd, w, R, N):
        fd.add_output(down(fd, t, dt))


def layer_norm_backward_inputs(sizes, device, gen):
    R, N, dt = sizes
    x = rand((R, N), TORCH[dt], device, gen)
    return [rand((R, N), TORCH[dt], device, gen), x, _weight(N, dt, device, gen), *row_stats(x)]


def native_layer_norm_backward(dy, x, w, mean, rstd):
    """What eager autograd runs.  The bias only gives db its shape and dtype, so w
    stands in for it.  CPU's kernel wants mean/rstd in the input dtype: fp32 there."""
    R, N = x.shape
    mean, rstd = mean.view(R, 1), rstd.view(R, 1)
    if x.device.type == "cuda":
        return torch.ops.aten.native_layer_norm_backward(dy, x, [N], mean, rstd, w, w, [True, True, True])
    grads = torch.ops.aten.native_layer_norm_backward(dy.float(), x.float(), [N], mean, rstd, w.float(), w.float(),
                                                      [True, True, True])
    return tuple(g.to(x.dtype) for g in grads)


def eager_layer_norm_backward(tensors, sizes, keep=None):
    return native_layer_norm_backward(*tensors)


# --- RMS norm -----------------------------------------------------------------------------


def build_rms_norm(fd, sizes):
    """y = x * rsqrt(mean(x^2) + eps) * w (stored as dt); rstd (fp32)."""
    R, N, dt = sizes
    x, w = tensor(fd, 2, dt), tensor(fd, 1, dt)
    xf = up(fd, x)
    ms = fd.ops.div(fd.ops.sum(fd.ops.mul(xf, xf), dims=[1]), N)
    rstd = fd.ops.rsqrt(fd.ops.add(ms, EPS))
    y = fd.ops.mul(fd.ops.mul(xf, bcast_rows(fd, rstd, (R, N))), bcast_cols(fd, up(fd, w), (R, N)))
    fd.add_output(down(fd, y, dt))
    fd.add_output(rstd)


def eager_rms_norm(tensors, sizes, keep=None):
    x, w = tensors
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    return (xf * rstd * w.float()).to(x.dtype), rstd.view(-1)


def build_rms_norm_backward(fd, sizes):
    """Inputs dy, x, w (dt), rstd (fp32); outputs dx, dw (dt).
    dx = rstd * (g - xhat * mean_row(g * xhat)) with g = dy * w, xhat = x * rstd."""
    R, N, dt = sizes
    shape = (R, N)
    dy, x, w, rstd = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 1, dt), tensor(fd, 1)
    dyf = up(fd, dy)
    xhat = fd.ops.mul(up(fd, x), bcast_rows(fd, rstd, shape))
    g = fd.ops.mul(dyf, bcast_cols(fd, up(fd, w), shape))
    proj = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), dims=[1]), N)
    dx = fd.ops.mul(bcast_rows(fd, rstd, shape), fd.ops.sub(g, fd.ops.mul(xhat, bcast_rows(fd, proj, shape))))
    fd.add_output(down(fd, dx, dt))
    fd.add_output(down(fd, fd.ops.sum(fd.ops.mul(dyf, xhat), dims=[0]), dt))


def rms_norm_backward_inputs(sizes, device, gen):
    R, N, dt = sizes
    x = rand((R, N), TORCH[dt], device, gen)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
    return [rand((R, N), TORCH[dt], device, gen), x, _weight(N, dt, device, gen), rstd]


def eager_rms_norm_backward(tensors, sizes, keep=None):
    """Autograd's formula for the composite rms_norm, in fp32, each result rounded once."""
    dy, x, w, rstd = tensors
    dyf, r = dy.float(), rstd.view(-1, 1)
    xhat = x.float() * r
    g = dyf * w.float()
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dyf * xhat).sum(0).to(w.dtype)


# --- softmax / log-softmax backward -------------------------------------------------------


def build_softmax_backward(fd, sizes, log=False):
    """Inputs dy, y (the forward's output), both dt; output dx (dt).
    softmax: dx = y * (dy - sum(dy * y)); log-softmax: dx = dy - exp(y) * sum(dy)."""
    R, N, dt = sizes
    dy, y = tensor(fd, 2, dt), tensor(fd, 2, dt)
    dyf, yf = up(fd, dy), up(fd, y)
    if log:
        s = fd.ops.sum(dyf, dims=[-1], keepdim=True)
        dx = fd.ops.sub(dyf, fd.ops.mul(fd.ops.exp(yf), fd.ops.expand(s, shape=[R, N])))
    else:
        s = fd.ops.sum(fd.ops.mul(dyf, yf), dims=[-1], keepdim=True)
        dx = fd.ops.mul(yf, fd.ops.sub(dyf, fd.ops.expand(s, shape=[R, N])))
    fd.add_output(down(fd, dx, dt))


def softmax_backward_inputs(sizes, device, gen, log=False):
    R, N, dt = sizes
    logits = rand((R, N), torch.float32, device, gen, 0.1, 3.0)
    y = (torch.log_softmax if log else torch.softmax)(logits, dim=-1).to(TORCH[dt])
    return [rand((R, N), TORCH[dt], device, gen), y]


def eager_softmax_backward(tensors, sizes, keep=None, log=False):
    """The ATen kernel autograd runs (fp32 math inside, one rounding)."""
    dy, y = tensors
    fn = torch._log_softmax_backward_data if log else torch._softmax_backward_data
    return (fn(dy, y, -1, dy.dtype),)


# --- GELU backward -------------------------------------------------------------------------


def build_gelu_backward(fd, sizes, approximate="tanh"):
    """Inputs dy, x (dt); output dx = dy * gelu'(x) (dt)."""
    R, N, dt = sizes
    dy, x = tensor(fd, 2, dt), tensor(fd, 2, dt)
    xf, dyf = up(fd, x), up(fd, dy)
    if approximate == "tanh":
        c = 0.044715
        x3 = fd.ops.mul(fd.ops.mul(xf, xf), xf)
        t = fd.ops.tanh(fd.ops.mul(fd.ops.add(xf, fd.ops.mul(x3, c)), GELU_C))
        left = fd.ops.mul(fd.ops.add(t, 1.0), 0.5)
        dt_dx = fd.ops.mul(fd.ops.add(fd.ops.mul(fd.ops.mul(xf, xf), 3 * c), 1.0), GELU_C)
        right = fd.ops.mul(fd.ops.mul(fd.ops.mul(xf, 0.5), fd.ops.sub(1.0, fd.ops.mul(t, t))), dt_dx)
        grad = fd.ops.add(left, right)
    else:
        cdf = fd.ops.mul(fd.ops.add(fd.ops.erf(fd.ops.mul(xf, 1 / math.sqrt(2))), 1.0), 0.5)
        pdf = fd.ops.mul(fd.ops.exp(fd.ops.mul(fd.ops.mul(xf, xf), -0.5)), 1 / math.sqrt(2 * math.pi))
        grad = fd.ops.add(cdf, fd.ops.mul(xf, pdf))
    fd.add_output(down(fd, fd.ops.mul(dyf, grad), dt))


def gelu_backward_inputs(sizes, device, gen):
    R, N, dt = sizes
    return [rand((R, N), TORCH[dt], device, gen), rand((R, N), TORCH[dt], device, gen, 0.01, 4.0)]


def eager_gelu_backward(tensors, sizes, keep=None, approximate="tanh"):
    dy, x = tensors
    return (torch.ops.aten.gelu_backward(dy, x, approximate=approximate),)


# --- rotary position embedding ---------------------------------------------------------------


def _rotate_half(fd, t, shape, sign_first):
    """cat([-x2, x1]) (sign_first=-1) or its transpose cat([x2, -x1]) (+1), over the last dim."""
    *lead, d = shape
    zeros, h = [0] * len(lead), d // 2
    x1 = fd.ops.slice(t, start_indices=zeros + [0], end_indices=list(lead) + [h])
    x2 = fd.ops.slice(t, start_indices=zeros + [h], end_indices=list(lead) + [d])
    if sign_first < 0:
        return fd.ops.cat([fd.ops.neg(x2), x1], dim=-1)
    return fd.ops.cat([x2, fd.ops.neg(x1)], dim=-1)


def build_rope(fd, sizes, backward=False):
    """Rotary embedding of x [T, D] or [T, heads, D] with angles theta [T, D/2] (fp32,
    shared by the heads): y = x * cos + rotate_half(x) * sin, cos/sin of cat([theta,
    theta]).  Output y (dt); with ``backward``, also the input dy and the output dx."""
    *shape, dt = sizes
    rank = len(shape)
    x = tensor(fd, rank, dt)
    dy = tensor(fd, rank, dt) if backward else None
    theta = tensor(fd, 2)
    ang = fd.ops.cat([theta, theta], dim=-1)
    if rank > 2:
        ang = fd.ops.broadcast_in_dim(ang, shape=list(shape), broadcast_dims=[0, rank - 1])
    cos, sin = fd.ops.cos(ang), fd.ops.sin(ang)
    xf = up(fd, x)
    fd.add_output(down(fd, fd.ops.add(fd.ops.mul(xf, cos), fd.ops.mul(_rotate_half(fd, xf, shape, -1), sin)), dt))
    if backward:
        dyf = up(fd, dy)
        dx = fd.ops.add(fd.ops.mul(dyf, cos), _rotate_half(fd, fd.ops.mul(dyf, sin), shape, +1))
        fd.add_output(down(fd, dx, dt))


def rope_angles(T, D, device=None):
    """theta[t, i] = position(t) * base^(-2i/D), positions restarting every ROPE_SEQ tokens."""
    pos = (torch.arange(T, device=device) % ROPE_SEQ).float()
    inv_freq = ROPE_BASE ** (-torch.arange(D // 2, device=device).float() * 2 / D)
    return pos[:, None] * inv_freq[None, :]


def rope_inputs(sizes, device, gen):
    *shape, dt = sizes
    return [rand(tuple(shape), TORCH[dt], device, gen), rope_angles(shape[0], shape[-1], device)]


def eager_rope(tensors, sizes, keep=None):
    x, theta = tensors
    ang = torch.cat([theta, theta], -1)
    if x.dim() == 3:
        ang = ang[:, None, :]
    xf = x.float()
    h = x.shape[-1] // 2
    rot = torch.cat([-xf[..., h:], xf[..., :h]], -1)
    return ((xf * ang.cos() + rot * ang.sin()).to(x.dtype),)


# --- cross-entropy ---------------------------------------------------------------------------


def build_cross_entropy(fd, sizes):
    """Mean cross-entropy of logits [R, V] (dt) against int64 targets [R]: fp32
    log-softmax, take_along_axis (read inside the log-softmax's kernel, at each row's
    target), the negated mean.  Output: the fp32 loss (0-d)."""
    R, V, dt = sizes
    x, target = tensor(fd, 2, dt), tensor(fd, 1, DataType.Int)
    xf = up(fd, x)
    sh = fd.ops.sub(xf, fd.ops.max(xf, dims=[1], keepdim=True))
    logp = fd.ops.sub(sh, fd.ops.log(fd.ops.sum(fd.ops.exp(sh), dims=[1], keepdim=True)))
    picked = fd.ops.take_along_axis(logp, fd.ops.broadcast_in_dim(target, shape=[R, 1], broadcast_dims=[0]), 1)
    fd.add_output(fd.ops.div(fd.ops.neg(fd.ops.sum(picked, dims=[0, 1])), float(R)))


def cross_entropy_inputs(sizes, device, gen):
    R, V, dt = sizes
    return [rand((R, V), TORCH[dt], device, gen), torch.randint(0, V, (R,), device=device, generator=gen)]


def eager_cross_entropy(tensors, sizes, keep=None):
    """As autocast runs it: the logits upcast to fp32."""
    x, target = tensors
    return (torch.nn.functional.cross_entropy(x.float(), target),)


# --- Adam step -------------------------------------------------------------------------------


def build_adam_step(fd, sizes):
    """One Adam step as torch.optim.Adam: param and grad in dt, moments fp32; runtime
    scalars lr, beta1, beta2 and the bias corrections c1, c2.  Outputs: the new param
    (dt), exp_avg and exp_avg_sq (fp32)."""
    R, N, dt = sizes
    p, g, m, v = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 2), tensor(fd, 2)
    lr, b1, b2, c1, c2 = (fd.define_scalar(dtype=F) for _ in range(5))
    gf = up(fd, g)
    m2 = fd.ops.add(fd.ops.mul(m, b1), fd.ops.mul(gf, fd.ops.sub(1.0, b1)))
    v2 = fd.ops.add(fd.ops.mul(v, b2), fd.ops.mul(fd.ops.mul(gf, gf), fd.ops.sub(1.0, b2)))
    denom = fd.ops.add(fd.ops.div(fd.ops.sqrt(v2), fd.ops.sqrt(c2)), ADAM_EPS)
    upd = fd.ops.div(fd.ops.div(fd.ops.mul(m2, lr), c1), denom)
    fd.add_output(down(fd, fd.ops.sub(up(fd, p), upd), dt))
    fd.add_output(m2)
    fd.add_output(v2)


def adam_scalars():
    """The runtime scalars of build_adam_step, in order."""
    return [ADAM_LR, ADAM_B1, ADAM_B2, ADAM_C1, ADAM_C2]


def adam_step_inputs(sizes, device, gen):
    R, N, dt = sizes
    p, g = rand((R, N), TORCH[dt], device, gen), rand((R, N), TORCH[dt], device, gen, 1e-3, 1.0)
    m = rand((R, N), torch.float32, device, gen, 1e-3, 0.1)
    v = rand((R, N), torch.float32, device, gen, 1e-6, 0.01, positive=True)
    return [p, g, m, v, *adam_scalars()]


def eager_adam_step(tensors, sizes, keep=None):
    """torch.optim.Adam's single-tensor update, written functionally (no in-place)."""
    p, g, m, v = tensors
    gf = g.float()
    m2 = m.lerp(gf, 1 - ADAM_B1)
    v2 = v * ADAM_B2 + gf * gf * (1 - ADAM_B2)
    denom = v2.sqrt() / math.sqrt(ADAM_C2) + ADAM_EPS
    return (p.float() - (ADAM_LR / ADAM_C1) * m2 / denom).to(p.dtype), m2, v2


# --- dropout + residual + layer norm ---------------------------------------------------------


def build_dropout_residual_layer_norm(fd, sizes):
    """h = residual + dropout(x); y = layer_norm(h) * w + b; explicit RNG seed/offset
    (runtime scalars).  Outputs: keep mask, h, y, mean, rstd (what backward needs).
    Roundings follow eager: dropout's output and h are stored in the input dtype."""
    R, N, dt = sizes
    x, res, w, b = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 1, dt), tensor(fd, 1, dt)
    seed = fd.define_scalar(dtype=DataType.Int)
    offset = fd.define_scalar(dtype=DataType.Int)
    xf = up(fd, x)
    keep = fd.ops.lt(fd.ops.rand_like(xf, rng_seed=seed, rng_offset=offset), 1.0 - DROPOUT_P)
    d = down(fd, fd.ops.where(keep, fd.ops.mul(xf, KEEP_SCALE), 0.0), dt)
    h = down(fd, fd.ops.add(up(fd, res), up(fd, d)), dt)
    y, mean, rstd = layer_norm(fd, up(fd, h), w, b, R, N, dt)
    for t in (keep, h, y, mean, rstd):
        fd.add_output(t)


def dropout_residual_inputs(sizes, device, gen):
    R, N, dt = sizes
    x, w, b = norm_inputs(sizes, device, gen)
    res = rand((R, N), TORCH[dt], device, gen)
    seed = int(torch.randint(0, 2**31, (1,), device=device, generator=gen).item())
    return [x, res, w, b, seed, 4 * int(torch.randint(0, 2**20, (1,), device=device, generator=gen).item())]


def eager_dropout_residual_layer_norm(tensors, sizes, keep=None):
    x, res, w, b = tensors
    if keep is None:
        d, keep = torch.native_dropout(x, DROPOUT_P, True)
    else:
        d = torch.where(keep, x.float() * KEEP_SCALE, 0.0).to(x.dtype)
    h = res + d
    return (keep, h) + native_layer_norm(h, w, b)


def build_dropout_residual_layer_norm_backward(fd, sizes):
    """The backward of build_dropout_residual_layer_norm.  Inputs dy, h, w (dt), keep
    (bool), mean, rstd (fp32); outputs dx (through the mask), dres (= dh), dw, db (dt).
    dh is rounded to dt before dropout's backward reads it, as eager's two kernels do."""
    R, N, dt = sizes
    dy, h, keep, w = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 2, DataType.Bool), tensor(fd, 1, dt)
    mean, rstd = tensor(fd, 1), tensor(fd, 1)
    dh, dw, db = layer_norm_grads(fd, dy, h, mean, rstd, w, R, N)
    dres = down(fd, dh, dt)
    fd.add_output(down(fd, fd.ops.where(keep, fd.ops.mul(up(fd, dres), KEEP_SCALE), 0.0), dt))
    fd.add_output(dres)
    fd.add_output(down(fd, dw, dt))
    fd.add_output(down(fd, db, dt))


def dropout_residual_layer_norm_backward_inputs(sizes, device, gen):
    R, N, dt = sizes
    h = rand((R, N), TORCH[dt], device, gen)
    keep = torch.rand((R, N), device=device, generator=gen) >= DROPOUT_P
    return [rand((R, N), TORCH[dt], device, gen), h, keep, _weight(N, dt, device, gen), *row_stats(h)]


def eager_dropout_residual_layer_norm_backward(tensors, sizes, keep=None):
    """Eager autograd: layer norm's backward gives dh (the residual's gradient as is),
    dropout's backward masks and scales it."""
    dy, h, keep, w, mean, rstd = tensors
    dh, dw, db = native_layer_norm_backward(dy, h, w, mean, rstd)
    return torch.ops.aten.native_dropout_backward(dh, keep, KEEP_SCALE), dh, dw, db
