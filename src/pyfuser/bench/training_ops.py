"""The "training_ops" group: single training ops, forward and backward through autograd.

Each case is one closure, ``eager(*tensors) -> outputs``, that a user would write in
PyTorch; ``training_ops_run.py`` runs it forward and then backward
(``torch.autograd.grad`` of every output, with random output gradients; the loss's is
1.0) as

* ``eager``: the closure itself;
* ``inductor``: ``torch.compile(closure)``;
* ``pyfuser``: ``torch.compile(closure, backend="pyfuser")``;
* ``liger``: Liger Kernel's autograd function for the op (``liger(*tensors)``), where
  Liger has one and ``import liger_kernel`` works on a CUDA device; otherwise "n/a".

Every implementation's outputs and gradients are checked against the closure run in
fp32 on the same bf16 inputs (upcast) before it is timed.  The sizes are a LLaMA-like
model's in bf16 (hidden 4096, 8192 or 16384 tokens, intermediate 14336 / 11008,
vocabularies of 32000 and 128256, grouped-query RoPE with 32 query and 8 key/value
heads of 128).

The byte count of "% of copy" is ``bytes_fwd_bwd``: the bytes a fused forward and a
fused backward must move, the same for every implementation.

This group is selected only by name: ``--cases training_ops`` (the whole group), a
case's full name, or an item containing ``fwd_bwd`` that is part of case names; a
run without ``--cases`` (every case) leaves it out.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as Fn

from .training import rand

GROUP = "training_ops"
BF16 = torch.bfloat16
E = 2  # bytes per bf16 element
NORM_EPS = 1e-6
LN_EPS = 1e-5
MASKED = -10000.0  # the additive mask's value for a masked-out score (exp underflows to 0)


@dataclass(frozen=True)
class OpCase:
    name: str
    op: str  # a key of BYTE_MODEL
    full: tuple  # sizes at scale 1
    make_inputs: Callable  # (sizes, device, gen) -> list of tensors; those that get gradients require grad
    eager: Callable  # (*tensors) -> tuple of outputs
    liger: Callable | None  # (*tensors) -> tuple of outputs, through Liger's autograd function
    describe: Callable  # sizes -> "shape/dtype" text
    group: str = GROUP
    note: str = ""

    def sizes(self, scale: float) -> tuple:
        return self.full if scale >= 1 else tuple(_tiny(self.op, self.full, scale))

    def bytes(self, sizes) -> int:
        return BYTE_MODEL[self.op](*sizes)


def _tiny(op: str, full: tuple, scale: float):
    """cases.py's rule for small sizes: rows (batch, tokens, heads) scale linearly,
    row widths by sqrt(scale), multiples of 16 staying multiples of 16."""
    def rows(n, lo=2):
        return max(lo, int(round(n * scale)))

    def width(n):
        w = max(16, int(round(n * math.sqrt(scale))))
        return w - w % 16

    if op == "rope":
        B, S, Hq, Hkv, D = full
        return rows(B, 1), width(S), rows(Hq, 4), rows(Hkv, 2), width(D)
    if op == "masked_softmax":
        B, Hh, S = full
        return rows(B, 1), rows(Hh, 2), width(S)
    return (rows(full[0]), width(full[1])) + tuple(full[2:])


# --- the byte model ---------------------------------------------------------------------
#
# The bytes a fused forward and backward must move.  Forward: read the inputs and
# params, write the outputs and what the backward needs that is not an input (fp32
# per-row statistics: rstd, mean, the loss's log-sum-exp).  Backward: read the
# outputs' gradients and what it needs (inputs, params, saved statistics), write the
# inputs' gradients, each param's gradient once.  An implementation that fuses the
# backward into the forward (Liger's cross-entropy writes the logits' gradient in its
# forward) moves less and can pass 100%.  E is the bf16 element size; R rows.

def _norm_bytes(R, H, stats, bias):
    """RMS norm (stats=1: rstd) and layer norm (stats=2: mean, rstd): fwd x, w (, b) ->
    y, stats; bwd dy, x, w, stats -> dx, dw (, db)."""
    act = R * H * E
    params = H * E * (3 + (2 if bias else 0))  # w read twice, dw written; b read, db written
    return 5 * act + params + 2 * stats * R * 4


BYTE_MODEL = {
    "rms_norm": lambda R, H: _norm_bytes(R, H, 1, False),
    "layer_norm": lambda R, H: _norm_bytes(R, H, 2, True),
    "layer_norm_nobias": lambda R, H: _norm_bytes(R, H, 2, False),
    # fwd a, b -> c; bwd dc, a, b -> da, db
    "glu": lambda R, N: (3 + 5) * R * N * E,
    # fwd logits, target -> loss, lse; bwd dloss, logits, target, lse -> dlogits
    "cross_entropy": lambda R, V: 3 * R * V * E + 2 * R * 8 + 2 * R * 4 + 2 * 4,
    # fwd q, k, cos, sin -> q', k'; bwd dq', dk', cos, sin -> dq, dk
    "rope": lambda B, S, Hq, Hkv, D: 4 * B * S * (Hq + Hkv) * D * E + 4 * S * D * E,
    # fwd scores, mask -> y; bwd dy, y -> dscores (the mask has no gradient)
    "masked_softmax": lambda B, Hh, S: 5 * B * Hh * S * S * E + B * S * S * E,
}


# --- the closures ----------------------------------------------------------------------


def rms_norm(x, w):
    """LLaMA's RMSNorm: fp32 statistics, the normalized row rounded to x's dtype, then * w."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)
    return (w * y.to(x.dtype),)


def layer_norm(x, w, b=None):
    return (Fn.layer_norm(x, (x.shape[-1],), w, b, LN_EPS),)


def swiglu(a, b):
    return (Fn.silu(a) * b,)


def geglu(a, b):
    return (Fn.gelu(a, approximate="tanh") * b,)


def cross_entropy(logits, target):
    """The loss of a causal LM head as transformers computes it: logits upcast to fp32."""
    return (Fn.cross_entropy(logits.float(), target),)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(q, k, cos, sin):
    """q [B, S, Hq, D] and k [B, S, Hkv, D] as the projections lay them out, seen as
    [B, H, S, D] (as attention reads them); cos and sin [1, S, D] (halves repeated)."""
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s


def masked_softmax(scores, mask):
    """Attention probabilities: scores [B, H, S, S] + an additive causal mask [B, 1, S, S]."""
    return (torch.softmax(scores + mask, dim=-1),)


# --- Liger Kernel --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def liger_ops():
    """liger_kernel's ops modules as a namespace, or the reason they cannot be imported."""
    try:
        from liger_kernel.ops import cross_entropy as ce, geglu as gg, layer_norm as ln
        from liger_kernel.ops import rms_norm as rn, rope as rp, swiglu as sw
    except Exception as e:  # not installed, or needs a GPU toolchain it cannot find
        return f"liger_kernel not importable ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
    return dict(rms_norm=rn.LigerRMSNormFunction, layer_norm=ln.LigerLayerNormFunction, swiglu=sw.LigerSiLUMulFunction,
                geglu=gg.LigerGELUMulFunction, cross_entropy=ce.LigerCrossEntropyFunction, rope=rp.LigerRopeFunction)


def _liger(name):
    return liger_ops()[name]


@functools.lru_cache(maxsize=4)
def _zero_bias(n, dtype, device):
    return torch.zeros(n, dtype=dtype, device=device)


def liger_rms_norm(x, w):
    # casting mode "llama" is rms_norm's above; not in place: dy stays the caller's
    return (_liger("rms_norm").apply(x, w, NORM_EPS, 0.0, "llama", False),)


def liger_layer_norm(x, w, b=None):
    """Liger's layer norm always has a bias: without one it gets zeros (no gradient)."""
    if b is None:
        b = _zero_bias(w.shape[0], w.dtype, w.device)
    return (_liger("layer_norm").apply(x, w, b, LN_EPS),)


def liger_swiglu(a, b):
    return (_liger("swiglu").apply(a, b),)


def liger_geglu(a, b):
    return (_liger("geglu").apply(a, b),)


def liger_cross_entropy(logits, target):
    # weight None, ignore_index -100, no z-loss, no label smoothing, mean, no softcap
    return (_liger("cross_entropy").apply(logits, target, None, -100, 0.0, 0.0, "mean", None, False, False, False)[0],)


def liger_rope(q, k, cos, sin):
    return tuple(_liger("rope").apply(q.transpose(1, 2), k.transpose(1, 2), cos, sin))


# --- inputs ------------------------------------------------------------------------------


def _leaf(t):
    return t.requires_grad_(True)


def _weight(n, device, gen):
    return _leaf(rand((n,), BF16, device, gen, 0.5, 1.5, positive=True))


def norm_inputs(sizes, device, gen, bias=False):
    R, H = sizes
    ts = [_leaf(rand((R, H), BF16, device, gen)), _weight(H, device, gen)]
    if bias:
        ts.append(_leaf(rand((H,), BF16, device, gen, 0.05, 0.5)))
    return ts


def glu_inputs(sizes, device, gen):
    R, N = sizes
    return [_leaf(rand((R, N), BF16, device, gen, 0.05, 3.0)), _leaf(rand((R, N), BF16, device, gen, 0.05, 3.0))]


def cross_entropy_inputs(sizes, device, gen):
    R, V = sizes
    target = torch.randint(0, V, (R,), device=device, generator=gen)
    return [_leaf(rand((R, V), BF16, device, gen, 0.01, 4.0)), target]


def rope_inputs(sizes, device, gen):
    B, S, Hq, Hkv, D = sizes
    pos = torch.arange(S, device=device, dtype=torch.float32)
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=device, dtype=torch.float32) / D))
    angles = torch.outer(pos, inv_freq).repeat(1, 2)[None]  # [1, S, D], halves repeated
    return [_leaf(rand((B, S, Hq, D), BF16, device, gen)), _leaf(rand((B, S, Hkv, D), BF16, device, gen)),
            angles.cos().to(BF16), angles.sin().to(BF16)]


def masked_softmax_inputs(sizes, device, gen):
    B, Hh, S = sizes
    causal = torch.ones(S, S, dtype=torch.bool, device=device).tril()
    mask = torch.where(causal, 0.0, MASKED).to(BF16).expand(B, 1, S, S).contiguous()
    return [_leaf(rand((B, Hh, S, S), BF16, device, gen)), mask]


# --- the cases -------------------------------------------------------------------------------


def _rows(what):
    return lambda s: f"[{s[0]},{s[1]}] bf16, {what}"


CASES: list[OpCase] = [
    OpCase("rms_norm_fwd_bwd_bf16", "rms_norm", (16384, 4096), norm_inputs, rms_norm, liger_rms_norm,
           _rows("w -> y; dx, dw")),
    OpCase("layer_norm_fwd_bwd_bf16", "layer_norm", (16384, 4096),
           lambda s, d, g: norm_inputs(s, d, g, bias=True), layer_norm, liger_layer_norm, _rows("w+b -> y; dx, dw, db")),
    OpCase("layer_norm_nobias_fwd_bwd_bf16", "layer_norm_nobias", (16384, 4096), norm_inputs, layer_norm,
           liger_layer_norm, _rows("w -> y; dx, dw"), note="Liger: a zero bias without gradient"),
    OpCase("swiglu_fwd_bwd_bf16", "glu", (8192, 14336), glu_inputs, swiglu, liger_swiglu,
           _rows("silu(a) * b; da, db")),
    OpCase("geglu_fwd_bwd_bf16", "glu", (8192, 11008), glu_inputs, geglu, liger_geglu,
           _rows("gelu_tanh(a) * b; da, db")),
    OpCase("cross_entropy_32000_fwd_bwd_bf16", "cross_entropy", (16384, 32000), cross_entropy_inputs, cross_entropy,
           liger_cross_entropy, _rows("int64 target -> mean loss; dlogits")),
    OpCase("cross_entropy_128256_fwd_bwd_bf16", "cross_entropy", (8192, 128256), cross_entropy_inputs, cross_entropy,
           liger_cross_entropy, _rows("int64 target -> mean loss; dlogits")),
    OpCase("rope_gqa_fwd_bwd_bf16", "rope", (4, 2048, 32, 8, 128), rope_inputs, rope, liger_rope,
           lambda s: f"q [{s[0]},{s[1]},{s[2]},{s[4]}], k [{s[0]},{s[1]},{s[3]},{s[4]}] bf16, cos/sin "
                     f"[1,{s[1]},{s[4]}]; dq, dk"),
    OpCase("masked_softmax_fwd_bwd_bf16", "masked_softmax", (4, 32, 1024), masked_softmax_inputs, masked_softmax,
           None, lambda s: f"[{s[0]},{s[1]},{s[2]},{s[2]}] bf16 + mask [{s[0]},1,{s[2]},{s[2]}]; dscores",
           note="Liger has no masked softmax"),
]

BY_NAME = {c.name: c for c in CASES}


def select(spec: str | None) -> list[OpCase]:
    """The cases an item of ``--cases`` names: ``training_ops`` (all), a full case
    name, or a part of case names that contains ``fwd_bwd``.  No item of the other
    groups' selection (a plain substring such as ``layer_norm``) picks these."""
    subs = [s.strip() for s in (spec or "").split(",") if s.strip()]
    return [c for c in CASES if any(s == GROUP or s == c.name or ("fwd_bwd" in s and s in c.name) for s in subs)]
