"""Peephole rewrites: patterns of a kernel's exprs that the code generator computes in a
cheaper form.  Each pass looks at the exprs a kernel computes, before lowering, and
returns the sites it found (expr -> what to emit instead); ``codegen.lower`` emits
the rewritten form at those sites.  A pass decides no sizes and changes no result
beyond the rounding its docstring states.

``find(outputs)`` runs every pass over the exprs that the kernel's ``outputs`` depend
on; a walk without outputs (the pointwise scheduler's probe) rewrites nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .dtypes import DataType
from .ops import OPS, OpKind
from .values import ScalarVal, TensorVal

COMPARISONS = ("gt", "ge", "lt", "le")

# ops whose lowering is their input's value at other coordinates (or the value itself):
# the value a comparison reads through them is the draw's own
_SAME_VALUE_KINDS = (OpKind.BROADCAST_IN_DIM, OpKind.RESHAPE, OpKind.PERMUTE, OpKind.SQUEEZE, OpKind.SLICE)


@dataclass(frozen=True)
class ShiftedTanh:
    """``1 + tanh(u)`` (``sign`` +1) or ``1 - tanh(u)`` (``sign`` -1), computed as
    ``2 / (1 + e^(-2 sign u))``; ``tanh`` is the skipped tanh's value."""
    tanh: TensorVal
    u: TensorVal
    sign: int


@dataclass(frozen=True)
class DrawComparison:
    """A uniform draw (operand ``operand`` of the comparison) compared with the finite
    ``constant``: a test of the draw's 24-bit integers."""
    operand: int
    constant: float


@dataclass(frozen=True)
class NarrowComparison:
    """``i == x`` or ``i != x`` of an int64 iota ``i`` (operand ``iota``) whose values
    all lie in [0, 2**31) and an int64 tensor ``x``: a comparison of 32-bit integers."""
    iota: int


@dataclass(frozen=True)
class Rewrites:
    """The sites of one kernel: expr -> the rewrite that computes it."""
    shifted_tanh: dict = field(default_factory=dict)
    draw_comparisons: dict = field(default_factory=dict)
    fast_exp: frozenset = frozenset()
    narrow_comparisons: dict = field(default_factory=dict)


def find(outputs) -> Rewrites:
    """The rewrites of a kernel storing ``outputs`` (none for an empty tuple)."""
    if not outputs:
        return Rewrites()
    exprs = outputs[0].fusion.live_exprs(list(outputs))
    return Rewrites(shifted_tanh(exprs, use_counts(exprs, outputs)), draw_comparisons(exprs),
                    fast_exp(exprs, outputs), narrow_comparisons(exprs))


def use_counts(exprs, outputs) -> dict:
    """value -> how many of ``exprs`` read it, plus one for each store of it."""
    uses: dict = {}
    for x in exprs:
        for i in x.inputs:
            uses[i] = uses.get(i, 0) + 1
    for o in outputs:
        uses[o] = uses.get(o, 0) + 1
    return uses


def _is_one(v) -> bool:
    return isinstance(v, ScalarVal) and v.is_constant and type(v.value) in (int, float) and v.value == 1


def _fp32_tanh(t) -> bool:
    return isinstance(t, TensorVal) and t.definition is not None and t.definition.op == "tanh" \
        and t.dtype is DataType.Float


def shifted_tanh(exprs, uses: dict) -> dict:
    """Rule: ``1 + tanh(u)`` and ``tanh(u) + 1`` become ``2 / (1 + e^-2u)``, ``1 - tanh(u)``
    becomes ``2 / (1 + e^2u)``, all in fp32, where the kernel reads that tanh nowhere
    else (GELU-tanh's ``0.5 x (1 + tanh(u))``).  Why: one exponential and one division
    instead of a tanh and an add, about as fast as the kernel with the tanh deleted
    (docs/TUNING.md#shifted-tanh); and the more accurate form, since where tanh(u)
    nears -1, ``1 + tanh(u)`` keeps few of its bits.  ``tanh(u) - 1`` is not of this
    form.  A tanh read elsewhere too is computed anyway, so it is left alone."""
    sites = {}
    for e in exprs:
        if e.op not in ("add", "sub") or e.outputs[0].dtype is not DataType.Float:
            continue
        orders = ((e.inputs[0], e.inputs[1]), (e.inputs[1], e.inputs[0]))
        for one, t in orders if e.op == "add" else orders[:1]:
            if not (_is_one(one) and _fp32_tanh(t)):
                continue
            u = t.definition.inputs[0]
            if isinstance(u, TensorVal) and u.dtype is DataType.Float and uses.get(t, 0) == 1:
                sites[e] = ShiftedTanh(t, u, 1 if e.op == "add" else -1)
            break
    return sites


def _finite_constant(v) -> float | None:
    if isinstance(v, ScalarVal) and v.is_constant and isinstance(v.value, (int, float)) \
            and not isinstance(v.value, bool) and math.isfinite(v.value) and abs(v.value) < 2.0**100:
        return float(v.value)
    return None


def is_unit_draw(v) -> bool:
    """Whether ``v`` is an fp32 U(0, 1) draw (``rand``, ``rand_like``, ``uniform(0, 1)``),
    possibly read through layout ops, ``set`` or a cast to its own dtype: the values
    n * 2**-24 of the draw's integers n.  ``codegen.lower`` also checks that the
    operand's code is the draw's (``Lowering.draw_comparison``)."""
    while isinstance(v, TensorVal) and v.definition is not None:
        e = v.definition
        kind = OPS[e.op].kind
        if kind in _SAME_VALUE_KINDS or e.op == "set" or (kind is OpKind.CAT and len(e.inputs) == 1) \
                or (kind is OpKind.CAST and e.attrs["dtype"] is e.inputs[0].dtype):
            v = e.inputs[0]
            continue
        if kind is not OpKind.RANDOM or e.attrs["dist"] != "uniform" or v.dtype is not DataType.Float:
            return False
        if e.attrs.get("like"):
            return True
        lo, hi = e.inputs[:2]
        return lo.is_constant and hi.is_constant and (float(lo.value), float(hi.value)) == (0.0, 1.0)
    return False


def draw_comparisons(exprs) -> dict:
    """Rule: ``u op c`` or ``c op u`` (op one of gt, ge, lt, le) for a U(0, 1) draw
    ``u`` and a finite constant ``c`` compares the draw's integers with a bound
    (``codegen.random.integer_comparison``).  Why: the same truth as the fp32
    comparison, without converting each integer to a float (dropout's keep test).
    A constant past 2**100 is left to the float comparison."""
    sites = {}
    for e in exprs:
        if e.op not in COMPARISONS:
            continue
        for i in (0, 1):
            c = _finite_constant(e.inputs[1 - i])
            if c is not None and is_unit_draw(e.inputs[i]):
                sites[e] = DrawComparison(i, c)
                break
    return sites


def _int32_iota(v) -> bool:
    """Whether ``v`` is an int64 iota of static length whose every value lies in
    [0, 2**31), possibly read through layout ops."""
    while isinstance(v, TensorVal) and v.definition is not None and OPS[v.definition.op].kind in _SAME_VALUE_KINDS:
        v = v.definition.inputs[0]
    e = v.definition if isinstance(v, TensorVal) else None
    if e is None or e.op != "iota" or v.dtype is not DataType.Int:
        return False
    (start, step), length = e.inputs, e.attrs["length"]
    if not (start.is_constant and step.is_constant and isinstance(length, int) and length > 0):
        return False
    first, last = start.value, start.value + step.value * (length - 1)
    return 0 <= min(first, last) and max(first, last) < 2**31


def narrow_comparisons(exprs) -> dict:
    """Rule: ``i == x`` and ``i != x`` for an int64 iota ``i`` whose values all lie in
    [0, 2**31) and an int64 tensor ``x`` compare 32-bit integers: ``i`` truncated, and
    ``x`` where it lies in [0, 2**31), else -1, which equals no value of ``i``: the
    same truth as the 64-bit comparison.  ``codegen.lower`` takes the site only where
    ``x`` is uniform along an axis the comparison varies on (a label per row against
    the column index: the loss backward's one-hot), so ``x``'s conversion is paid once
    per row and each element saves the 64-bit index arithmetic and compare
    (docs/TUNING.md#narrow-comparisons)."""
    sites = {}
    for e in exprs:
        if e.op not in ("eq", "ne"):
            continue
        for i in (0, 1):
            x = e.inputs[1 - i]
            if isinstance(x, TensorVal) and x.dtype is DataType.Int and _int32_iota(e.inputs[i]):
                sites[e] = NarrowComparison(i)
                break
    return sites


_EXP_OPS = ("exp", "sigmoid", "silu")
_HALF = (DataType.Half, DataType.BFloat16)


def _low_precision(dt) -> bool:
    return dt in _HALF or dt.is_fp8


def fast_exp(exprs, outputs) -> frozenset:
    """Rule: an fp32 ``exp`` (and the exp inside ``sigmoid`` and ``silu``) whose every
    path to the kernel's stores keeps float values and reaches a 16-bit float (fp16,
    bf16 or fp8) value is computed by the GPU's ex2.approx of ``x * log2(e)``
    (``tl.exp``) instead of libdevice's expf.  Why: libdevice's range reduction costs
    6-15% on 16-bit softmax kernels (docs/TUNING.md#fast-exp), and the fast form's
    relative error, at most about (|x| + 4) * 2**-24 (5.5e-6 over expf's finite range),
    is 44 times below half an fp16 ulp: once rounded to 16 bits, the value differs
    from expf's at most by the rare rounding flip that any reordering of fp32 work
    gives.  An exp with a path to an fp32 or fp64 store that passes no 16-bit value, or
    to a comparison or an integer, keeps expf."""
    consumers: dict = {}
    for e in exprs:
        for i in e.inputs:
            if isinstance(i, TensorVal):
                consumers.setdefault(i, []).append(e)
    stored = set(outputs)
    rounded: dict = {}  # value -> every path from it to a store reaches a 16-bit float value
    for e in reversed(exprs):  # consumers first (program order), without recursion on long chains
        for v in e.outputs:
            rounded[v] = isinstance(v, TensorVal) and (_low_precision(v.dtype) or (
                v.dtype.is_float and v not in stored
                and all(rounded.get(o, False) for c in consumers.get(v, ()) for o in c.outputs)))
    return frozenset(e for e in exprs if e.op in _EXP_OPS and e.outputs[0].dtype in (DataType.Float, *_HALF)
                     and rounded[e.outputs[0]])
