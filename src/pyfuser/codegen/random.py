"""Triton emission of pyfuser's random numbers (the definition is in ``pyfuser.rng``).

Philox-4x32-10 is written out inline: Triton's interpreter cannot call ``tl.philox``
(a nested jit function) and the kernels must run there unchanged.  The value of
element ``i`` depends only on (seed, offset, i), so any tiling gives the same bits.
"""
from __future__ import annotations

import math
import struct

import torch

from .. import rng as R
from ..ir.dtypes import TRITON_NAME, DataType
from .dtype_policy import scalar_cast


def philox_words(w, sub: str, seed_lo: str, seed_hi: str, off_lo: str, off_hi: str):
    """Emit Philox on counter (sub, 0, off_lo, off_hi); returns the four word names."""
    c0 = w.tmp(f"({sub}).to(tl.uint32)", "c")
    c1 = w.tmp(f"(({sub}).to(tl.int64) >> 32).to(tl.uint32)", "c")
    c2 = w.tmp(f"tl.full([], 0, tl.uint32) + ({off_lo}).to(tl.uint32)", "c")
    c3 = w.tmp(f"tl.full([], 0, tl.uint32) + ({off_hi}).to(tl.uint32)", "c")
    k0 = w.tmp(f"({seed_lo}).to(tl.uint32)", "k")
    k1 = w.tmp(f"({seed_hi}).to(tl.uint32)", "k")
    for r in range(R.ROUNDS):
        # Each 32 x 32 -> 64-bit product as one 64-bit multiply: one wide multiply
        # instruction instead of mul.hi and mul.lo (docs/TUNING.md#index-math).
        pb = w.tmp(f"{c2}.to(tl.uint64) * {R.ROUND_B}", "p")
        hb, lb = w.tmp(f"({pb} >> 32).to(tl.uint32)", "p"), w.tmp(f"{pb}.to(tl.uint32)", "p")
        pa = w.tmp(f"{c0}.to(tl.uint64) * {R.ROUND_A}", "p")
        ha, la = w.tmp(f"({pa} >> 32).to(tl.uint32)", "p"), w.tmp(f"{pa}.to(tl.uint32)", "p")
        c0 = w.tmp(f"{hb} ^ {c1} ^ {k0}", "c")
        c2 = w.tmp(f"{ha} ^ {c3} ^ {k1}", "c")
        c1, c3 = lb, la
        if r + 1 < R.ROUNDS:
            k0 = w.tmp(f"{k0} + {R.KEY_A}", "k")
            k1 = w.tmp(f"{k1} + {R.KEY_B}", "k")
    return c0, c1, c2, c3


def _unit(w, ints: str) -> str:
    """The uniform floats of the 24-bit integers ``ints`` (exact: n * 2**-24)."""
    return w.tmp(f"{ints}.to(tl.float32) * {R.TWO_POW_M24!r}", "r")


def _unit_noting_ints(w, ints_code: str, ints: dict) -> str:
    """``_unit`` of ``ints_code``, noted in ``ints`` (value -> its integers) so that a
    comparison with a constant can test the integers (``integer_comparison``)."""
    z = _unit(w, ints_code)
    ints[z] = ints_code
    return z


def _uniform(w, word: str) -> str:
    return _unit(w, f"({word} >> 8)")


def _box_muller(w, a: str, b: str) -> tuple[str, str]:
    """The two normals of the word pair (a, b): r cos(theta), r sin(theta)."""
    u1 = w.tmp(f"(({a} >> 8) + 1).to(tl.float32) * {R.TWO_POW_M24!r}", "r")
    u2 = _uniform(w, b)
    rad = w.tmp(f"tl.sqrt(-2.0 * tl.log({u1}))", "r")
    theta = w.tmp(f"{R.TWO_PI!r} * {u2}", "r")
    return w.tmp(f"{rad} * tl.cos({theta})", "r"), w.tmp(f"{rad} * tl.sin({theta})", "r")


def random_value(w, dist: str, lin: str, seed_lo, seed_hi, off_lo, off_hi, ints=None) -> str:
    """The fp32 draw of the element with logical index ``lin``, before its parameters
    (``distribution``): U(0, 1) or N(0, 1).  ``ints``: a dict that gets value -> its
    24-bit integers n (the value is n * 2**-24) of a uniform draw, so a comparison with
    a constant can test n instead."""
    sub = w.tmp(f"{lin} // 4", "r")
    word = w.tmp(f"{lin} % 4", "r")
    c0, c1, c2, c3 = philox_words(w, sub, seed_lo, seed_hi, off_lo, off_hi)
    if dist == "uniform":
        bits = w.tmp(f"tl.where({word} == 0, {c0}, tl.where({word} == 1, {c1}, tl.where({word} == 2, {c2}, {c3})))", "r")
        if ints is not None:
            return _unit_noting_ints(w, w.tmp(f"({bits} >> 8).to(tl.int32)", "r"), ints)
        return _uniform(w, bits)
    a = w.tmp(f"tl.where({word} < 2, {c0}, {c2})", "r")
    b = w.tmp(f"tl.where({word} < 2, {c1}, {c3})", "r")
    cos, sin = _box_muller(w, a, b)
    return w.tmp(f"tl.where(({word} % 2) == 0, {cos}, {sin})", "r")


def random_quads(w, dist: str, sub: str, shape: str, seed_lo, seed_hi, off_lo, off_hi, ints=None) -> str:
    """The same values as ``random_value``, one Philox call per 4 consecutive elements:
    ``sub`` is a block of subsequence indices (a quarter of the tile); the four words
    of each call are interleaved back into the tile of shape ``shape``."""
    c0, c1, c2, c3 = philox_words(w, sub, seed_lo, seed_hi, off_lo, off_hi)
    if dist == "uniform" and ints is not None:
        n0, n1, n2, n3 = (w.tmp(f"({c} >> 8).to(tl.int32)", "r") for c in (c0, c1, c2, c3))
        n = w.tmp(f"tl.reshape(tl.join(tl.join({n0}, {n2}), tl.join({n1}, {n3})), {shape})", "r")
        return _unit_noting_ints(w, n, ints)
    if dist == "uniform":
        v0, v1, v2, v3 = (_uniform(w, c) for c in (c0, c1, c2, c3))
    else:
        (v0, v1), (v2, v3) = _box_muller(w, c0, c1), _box_muller(w, c2, c3)
    return w.tmp(f"tl.reshape(tl.join(tl.join({v0}, {v2}), tl.join({v1}, {v3})), {shape})", "r")


def distribution(w, dist: str, z: str, p0, p1, dtype: DataType) -> str:
    """The output value of the fp32 draw ``z`` (``pyfuser.rng``'s rule): scaled by the
    parameters in the compute dtype, rounded to ``dtype``, and for uniform, a value
    that rounding took to ``hi`` replaced by ``lo``.  ``p0``, ``p1``: floats for
    constants, else the code of runtime scalars."""
    cdt = DataType.Double if dtype is DataType.Double else DataType.Float
    const = isinstance(p0, float) and isinstance(p1, float)
    if const:
        lo, hi = (torch.tensor(p, dtype=cdt.torch).item() for p in (p0, p1))
        lo_c, hi_c = _constant(lo, cdt), _constant(hi, cdt)
        span = _constant(torch.tensor(hi, dtype=cdt.torch).sub(lo).item(), cdt) if dist == "uniform" else hi_c
    else:
        lo_c, hi_c = (w.tmp(f"tl.cast({p}, {TRITON_NAME[cdt]})", "r") for p in (p0, p1))
        span = w.tmp(f"{hi_c} - {lo_c}", "r") if dist == "uniform" else hi_c
    v = z if cdt is DataType.Float else w.tmp(f"{z}.to(tl.float64)", "r")
    if not const or (p0, p1) != (0.0, 1.0):
        v = w.tmp(f"{lo_c} + {span} * {v}", "r")
    if dtype is not cdt:
        v = w.tmp(f"{v}.to({TRITON_NAME[dtype]})", "r")
    if dist != "uniform" or (const and not R.needs_bound(dist, lo, hi, dtype.torch)):
        return v
    return _below_hi(w, v, lo_c, hi_c, const and (lo, hi), dtype, cdt)


def _below_hi(w, v: str, lo_c: str, hi_c: str, const, dtype: DataType, cdt: DataType) -> str:
    """``v``, or ``lo`` where ``v`` (rounded to ``dtype``) reached ``hi``; compared in
    fp32 or fp64, where every value of ``dtype`` is exact.  ``const``: (lo, hi) when
    the parameters are constants."""
    narrow = dtype is not cdt
    if const:
        lo, hi = const
        hi_d = _constant(torch.tensor(hi, dtype=cdt.torch).to(dtype.torch).item(), cdt)
        lo_d = f"tl.full([], {_constant(lo, cdt)}, tl.float32).to({TRITON_NAME[dtype]})" if narrow else lo_c
        cond = f"{v}.to(tl.float32) >= {hi_d}" if narrow else f"{v} >= {hi_d}"
    else:  # a reversed range has no bound: its threshold is inf
        hi_d = w.tmp(f"{hi_c}.to({TRITON_NAME[dtype]}).to(tl.float32)", "r") if narrow else hi_c
        hi_d = w.tmp(f"tl.where({lo_c} < {hi_c}, {hi_d}, float('inf'))", "r")
        lo_d = w.tmp(f"{lo_c}.to({TRITON_NAME[dtype]})", "r") if narrow else lo_c
        cond = f"{v}.to(tl.float32) >= {hi_d}" if narrow else f"{v} >= {hi_d}"
    return w.tmp(f"tl.where({cond}, {lo_d}, {v})", "r")


def _constant(value: float, cdt: DataType) -> str:
    """A parameter already rounded to the compute dtype, as exact source text."""
    text = repr(float(value)) if math.isfinite(value) else f"float('{value}')"
    return f"tl.full([], {text}, tl.float64)" if cdt is DataType.Double else text


def integer_comparison(op: str, ints: str, constant: float, random_left: bool) -> str:
    """``u op c`` (or ``c op u``) for a uniform draw u = n * 2**-24 with its integers
    ``ints`` (n in [0, 2**24)) and a constant compared in fp32: the same truth as the
    float comparison, without converting each n.  With x = fp32(c) * 2**24 (exact),
    u > c iff n > floor(x), u >= c iff n >= ceil(x), and so on.  Dropout's keep test."""
    if not random_left:
        op = {"gt": "lt", "lt": "gt", "ge": "le", "le": "ge"}[op]
    x = struct.unpack("f", struct.pack("f", constant))[0] * 2.0**24
    bound = math.floor(x) if op in ("gt", "le") else math.ceil(x)
    bound = min(max(bound, -1), 2**24 + 1)  # the same truth for every n in range
    sym = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}[op]
    return f"({ints} {sym} {bound})"


def lower_random(low, e, v, idx):
    """The value of random op ``e`` (output ``v``) at ``idx`` for lowering ``low``: its
    seed and offset (arguments, or the generator's words), the draw at the element's
    logical index, and the distribution's parameters (``distribution``)."""
    w = low.w
    a = e.attrs
    lin = low.linear_of(v, idx)
    rest = e.inputs[1:] if a.get("like") else e.inputs[2:]
    if a.get("like"):
        p0, p1 = 0.0, 1.0
    else:
        p0, p1 = (float(p.value) if p.is_constant else low.scalar(p)[0] for p in e.inputs[:2])
    if a["has_seed"]:
        seed, off = (low.scalar(s)[0] for s in rest)
        seed, off = scalar_cast(seed, DataType.Int), scalar_cast(off, DataType.Int)
        seed_lo = w.tmp(f"{seed} & 0xFFFFFFFF", "s")
        seed_hi = w.tmp(f"({seed} >> 32) & 0xFFFFFFFF", "s")
        off_lo = w.tmp(f"{off} & 0xFFFFFFFF", "s")
        off_hi = w.tmp(f"({off} >> 32) & 0xFFFFFFFF", "s")
    else:
        # Seed and offset arrive as eight 16-bit pieces: Triton types a Python int
        # argument by its range, so full 32-bit words would change the signature
        # (and recompile) as the generator's state moves.
        p = [w.arg(f"rng{v.index}_{i}", "rng", ("rng", e, i)) for i in range(8)]
        seed_lo, seed_hi, off_lo, off_hi = (
            w.tmp(f"({p[2 * i]}.to(tl.uint32) << 16) | {p[2 * i + 1]}.to(tl.uint32)", "s") for i in range(4))
    quads = low.tile.quads(lin)
    if quads is not None:
        sub, shape = quads
        z = random_quads(w, a["dist"], sub, shape, seed_lo, seed_hi, off_lo, off_hi, low.random_ints)
    else:
        z = random_value(w, a["dist"], lin.code, seed_lo, seed_hi, off_lo, off_hi, low.random_ints)
    return distribution(w, a["dist"], z, p0, p1, v.dtype), lin.axes
