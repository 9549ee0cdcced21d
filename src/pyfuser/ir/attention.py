"""Attention and grouped matmuls as host ops (``ir.host_rows``): torch calls between kernels.

``sdpfa_fwd(query, key, value, bias, mask, dropout_p, is_causal, scale)`` returns
nvFuser's four outputs: the attention ``output`` ([N*, H, Q, Ev], the query's dtype, in
the query's memory layout), ``logsumexp`` ([N*, H, Q], Float: the log of each softmax
row's sum of exponentials, scores scaled), ``philox_seed`` ([2]) and ``philox_offset``
([]), UInt64: the random state of the dropout, which ``sdpfa_bwd`` takes to draw the same
mask.  ``sdpfa_bwd`` returns the gradients of query, key and value.

Both call what nvFuser calls, so the results are its results bit for bit: on CUDA,
fp16/bf16, rank 4, a head dim that is a multiple of 8 and no bias or mask, ATen's flash
attention (forward and backward; its dropout draws from torch's CUDA generator, as
nvFuser's does); with a bias or a mask, ATen's math attention
(``_scaled_dot_product_attention_math``) of ``bias + where(mask, 0, -inf)`` in the query's
dtype, as nvFuser forms it.  Elsewhere (the CPU, other dtypes or ranks) the formula is
the math one, in fp32 for fp16/bf16 inputs with the output rounded once:
``softmax(q @ k^T * scale + bias + mask)`` with the upper triangle (top-left aligned, as
torch) masked for ``is_causal`` and a Bool ``mask`` keeping where True; ``scale``
defaults to ``1 / sqrt(E)``; a query row the masks leave no key attends to nothing (its
output 0, its logsumexp -inf), as in ATen's math attention; a ``dropout_p`` other than 0 raises there (only flash
attention returns the random state the backward needs).
"""
from __future__ import annotations

import math

import torch

from ..compat import grouped_mm
from ..errors import DefinitionError, InputError
from .shapes import broadcast_shapes


def _scores(q, k, bias, mask, is_causal, scale):
    qf = q.float() if q.dtype in (torch.float16, torch.bfloat16) else q
    kf = k.to(qf.dtype)
    s = qf @ kf.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else float(scale))
    if bias is not None:
        s = s + bias.to(s.dtype)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.to(s.dtype)
    if is_causal:
        lq, lk = s.shape[-2], s.shape[-1]
        keep = torch.ones(lq, lk, dtype=torch.bool, device=s.device).tril()  # top-left aligned, as torch
        s = s.masked_fill(~keep, float("-inf"))
    return s


def _safe_softmax(s):
    """Softmax over the last dim whose rows masked out entirely (every score -inf) are 0,
    not NaN: what nvFuser computes (ATen's math attention, which softmaxes that way)
    and what eager's ``scaled_dot_product_attention`` returns."""
    p = torch.softmax(s, -1)
    return p.masked_fill((s == float("-inf")).all(-1, keepdim=True), 0.0)


def _no_dropout(op, dropout_p):
    if dropout_p not in (None, 0, 0.0):
        raise InputError(f"{op}: dropout_p {dropout_p} needs flash attention (CUDA, fp16/bf16, rank 4, a head dim "
                         f"that is a multiple of 8, no bias or mask): only it returns the random state the backward "
                         f"replays; here only 0")


def _flash_ok(*ts) -> bool:
    q = ts[0]
    return (q.device.type == "cuda" and q.dtype in (torch.float16, torch.bfloat16) and q.dim() == 4
            and all(t.dim() == 4 and t.dtype == q.dtype for t in ts) and q.shape[-1] % 8 == 0
            and ts[2].shape[-1] == q.shape[-1])


def _like_query(out, q):
    """``out`` in ``q``'s memory layout (dims ordered by ``q``'s strides), as nvFuser lays
    the attention output out."""
    order = sorted(range(q.dim()), key=lambda d: -q.stride(d))
    inverse = sorted(range(q.dim()), key=lambda d: order[d])
    return out.permute(order).contiguous().permute(inverse)


def _rng_state(device):
    return torch.zeros(2, dtype=torch.uint64, device=device), torch.zeros((), dtype=torch.uint64, device=device)


def sdpfa_fwd_ref(q, k, v, *bias_and_mask, bias_mask=(), dropout_p=None, is_causal=None, scale=None):
    """``bias_and_mask``: the optional tensors given, which ``bias_mask`` names."""
    given = dict(zip(bias_mask, bias_and_mask))
    bias, mask = given.get("bias"), given.get("mask")
    p, causal, sc = float(dropout_p or 0.0), bool(is_causal), None if scale is None else float(scale)
    if bias is None and mask is None and _flash_ok(q, k, v):
        out, lse, *_, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, p, causal, return_debug_mask=False, scale=sc)
        return _like_query(out, q), lse, seed, offset
    _no_dropout("sdpfa_fwd", dropout_p)
    s = _scores(q, k, bias, mask, causal, scale)
    lse = torch.logsumexp(s, -1).float()
    if q.device.type == "cuda" and (bias is not None or mask is not None):
        attn_bias = bias
        if mask is not None:
            mask_bias = torch.where(mask, 0.0, float("-inf")).to(q.dtype)
            attn_bias = mask_bias if attn_bias is None else attn_bias + mask_bias
        out = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_bias, 0.0, causal, None, scale=sc)[0]
    else:
        out = (_safe_softmax(s) @ v.to(s.dtype)).to(q.dtype)
    return (_like_query(out, q), lse, *_rng_state(q.device))


def sdpfa_bwd_ref(grad, q, k, v, out, lse, seed, offset, dropout_p=None, is_causal=None, scale=None):
    causal = bool(is_causal)
    if _flash_ok(q, k, v, grad, out) and seed.dtype == torch.uint64:
        return torch.ops.aten._scaled_dot_product_flash_attention_backward(
            grad, q, k, v, out, lse, None, None, q.shape[2], k.shape[2], float(dropout_p or 0.0), causal, seed,
            offset, scale=None if scale is None else float(scale))
    _no_dropout("sdpfa_bwd", dropout_p)
    with torch.enable_grad():
        qs, ks, vs = (t.detach().requires_grad_(True) for t in (q, k, v))
        s = _scores(qs, ks, None, None, causal, scale)
        o = torch.softmax(s, -1) @ vs.to(s.dtype)
        gq, gk, gv = torch.autograd.grad(o, (qs, ks, vs), grad.to(o.dtype))
    return gq.to(q.dtype), gk.to(k.dtype), gv.to(v.dtype)


def _check_qkv(op, q, k, v):
    if not len(q) == len(k) == len(v) or len(q) < 4:
        raise DefinitionError(f"{op}: query, key and value must have one rank >= 4 ([N*, H, L, E]), got ranks "
                              f"{len(q)}, {len(k)} and {len(v)}")
    batch = broadcast_shapes(op, q[:-2], k[:-2], v[:-2])
    return tuple(batch)


def sdpfa_fwd_shape(op, shapes, attrs):
    q, k, v = shapes[:3]
    batch = _check_qkv(op, q, k, v)
    return [batch + (q[-2], v[-1]), batch + (q[-2],), (2,), ()]


def sdpfa_bwd_shape(op, shapes, attrs):
    _, q, k, v = shapes[:4]
    _check_qkv(op, q, k, v)
    return [tuple(q), tuple(k), tuple(v)]


def grouped_mm_ref(mat1, mat2, offsets):
    """torch's grouped matmul: groups along the dim that ``offsets`` (Int32 group ends) cuts."""
    if mat1.device.type == "cuda":
        return grouped_mm(mat1, mat2, offsets)
    return _grouped_mm_loop(mat1, mat2, offsets)


def _grouped_mm_loop(a, b, offsets):
    """The same result as a loop of matmuls (torch's kernel is CUDA only)."""
    ends = offsets.tolist()
    starts = [0] + ends[:-1]
    if a.dim() == 3 and b.dim() == 3:
        return a @ b
    if a.dim() == 2 and b.dim() == 3:  # rows of a in groups, one matrix of b each
        out = torch.empty(a.shape[0], b.shape[-1], dtype=a.dtype, device=a.device)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[s:e] = a[s:e] @ b[g]
        return out
    if a.dim() == 3 and b.dim() == 2:  # columns of b in groups
        out = torch.empty(a.shape[1], b.shape[-1], dtype=a.dtype, device=a.device)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[:, s:e] = a[g] @ b[:, s:e]
        return out
    # 2D x 2D: the contracted dim in groups, one output matrix per group
    return torch.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, ends)])


def grouped_mm_shape(op, shapes, attrs):
    a, b, off = shapes
    g = off[0] if len(off) == 1 else None
    if len(off) != 1 or len(a) not in (2, 3) or len(b) not in (2, 3):
        raise DefinitionError(f"{op}: mat1 and mat2 must have rank 2 or 3 and offsets rank 1, got ranks "
                              f"{len(a)}, {len(b)} and {len(off)}")
    if len(a) == 3 and len(b) == 3:
        return [(a[0], a[1], b[2])]
    if len(a) == 2 and len(b) == 3:
        return [(a[0], b[2])]
    if len(a) == 3:
        return [(a[1], b[1])]
    return [(g, a[0], b[1])]
