"""pyfuser's random numbers, defined once: Philox-4x32-10 on the logical element index.

Element ``i`` (row-major index in the random op's output) takes word ``i % 4`` of
``Philox(key=seed, counter=(i // 4, offset))``: the 64-bit subsequence ``i // 4`` fills
counter words 0-1 and the 64-bit ``offset`` words 2-3.  Since the value depends only on
(seed, offset, i), it does not depend on how a kernel tiles the tensor, and CPU
(Triton's interpreter) and GPU give the same bits.

* uniform: ``u = (word >> 8) * 2**-24`` in [0, 1), then ``lo + (hi - lo) * u`` in the
  compute dtype (fp64 for an fp64 output, else fp32; ``lo`` and ``hi`` rounded to it)
  and rounded to the output dtype; a value that rounding took to ``hi`` becomes
  ``lo`` (nvFuser's rule), so the range stays [lo, hi) in every dtype;
* normal: Box-Muller on the word pairs (0, 1) and (2, 3) of the same call:
  ``r = sqrt(-2 log(u1))`` with ``u1 = ((w0 >> 8) + 1) * 2**-24`` in (0, 1], then
  ``r * cos(2 pi u2)`` for word 0 and ``r * sin(2 pi u2)`` for word 1, in fp32
  (``|z| <= 5.8``, always finite), then ``mean + std * z`` in the compute dtype.

This module is the torch implementation (the reference executor's); the code
generator emits the same arithmetic in Triton (``codegen.random``).
"""
from __future__ import annotations

import math

import torch

ROUND_A = 0xD2511F53
ROUND_B = 0xCD9E8D57
KEY_A = 0x9E3779B9
KEY_B = 0xBB67AE85
ROUNDS = 10
MASK32 = 0xFFFFFFFF
TWO_POW_M24 = 1.0 / (1 << 24)
TWO_PI = 2.0 * math.pi


def _mulhilo(a: torch.Tensor, m: int):
    """(high, low) 32-bit words of a * m for int64 tensors holding uint32 values."""
    p_lo = a * (m & 0xFFFF)
    p_hi = a * (m >> 16)
    s = p_lo + ((p_hi & 0xFFFF) << 16)
    lo = s & MASK32
    hi = ((p_hi >> 16) + (s >> 32)) & MASK32
    return hi, lo


def philox(seed: int, c0: torch.Tensor, c1, c2, c3):
    """Philox-4x32-10 on int64 tensors holding uint32 words; returns four word tensors."""
    k0, k1 = seed & MASK32, (seed >> 32) & MASK32
    c1 = torch.full_like(c0, c1) if not isinstance(c1, torch.Tensor) else c1
    c2 = torch.full_like(c0, c2) if not isinstance(c2, torch.Tensor) else c2
    c3 = torch.full_like(c0, c3) if not isinstance(c3, torch.Tensor) else c3
    for _ in range(ROUNDS):
        hi_b, lo_b = _mulhilo(c2, ROUND_B)
        hi_a, lo_a = _mulhilo(c0, ROUND_A)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0 = (k0 + KEY_A) & MASK32
        k1 = (k1 + KEY_B) & MASK32
    return c0, c1, c2, c3


def random_words(numel: int, seed: int, offset: int, device) -> torch.Tensor:
    """The four words per subsequence, laid out so word ``i`` belongs to element ``i``."""
    n_sub = (numel + 3) // 4
    sub = torch.arange(n_sub, dtype=torch.int64, device=device)
    words = philox(seed, sub & MASK32, sub >> 32 if n_sub > MASK32 else 0, offset & MASK32, (offset >> 32) & MASK32)
    return torch.stack(words, dim=1).reshape(-1)[:numel], words


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Random values are computed in fp64 for an fp64 output, else in fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def needs_bound(dist: str, lo: float, hi: float, dtype: torch.dtype) -> bool:
    """Whether a uniform draw can reach ``hi`` after rounding: never for U(0, 1)
    stored at the compute precision (``u`` itself is below 1), never for an empty or
    reversed range (there ``hi`` bounds nothing)."""
    if dist != "uniform" or not lo < hi:
        return False
    return (lo, hi) != (0.0, 1.0) or dtype not in (torch.float32, torch.float64)


def reference_random(dist: str, shape, p0: float, p1: float, seed: int, offset: int, dtype, device):
    numel = math.prod(shape)
    flat, words = random_words(numel, seed, offset, device)
    if dist == "uniform":
        z = (flat >> 8).to(torch.float32) * TWO_POW_M24
    else:
        w0, w1, w2, w3 = words
        n = []
        for a, b in ((w0, w1), (w2, w3)):
            u1 = ((a >> 8) + 1).to(torch.float32) * TWO_POW_M24
            u2 = (b >> 8).to(torch.float32) * TWO_POW_M24
            r = torch.sqrt(-2.0 * torch.log(u1))
            n += [r * torch.cos(TWO_PI * u2), r * torch.sin(TWO_PI * u2)]
        z = torch.stack(n, dim=1).reshape(-1)[:numel]
    cdt = compute_dtype(dtype)
    lo, hi = (torch.tensor(p, dtype=cdt, device=device) for p in (p0, p1))
    out = z.to(cdt)
    if (p0, p1) != (0.0, 1.0):
        out = lo + ((hi - lo) if dist == "uniform" else hi) * out
    out = out.to(dtype)
    if needs_bound(dist, lo.item(), hi.item(), dtype):
        # Rounding (of lo + (hi - lo) * u, or to the output dtype) may reach hi; such
        # a value becomes lo, as u = 0 gives: the bound stays exclusive.
        out = torch.where(out >= hi.to(dtype), lo.to(dtype), out)
    return out.reshape(shape)
