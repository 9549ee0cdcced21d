"""The op table: each op pyfuser knows is defined once, here.

A row (``OpDef``) carries what every layer needs to know about an op:

* ``kind``, an ``OpKind``: how the frontend builds it and how the code generator indexes it
  (``unary``/``binary``/``ternary`` elementwise ops, ``cast``, ``reduction``, the
  layout ops, ``full``/``iota``, the random ops, ``host`` ops run by torch between
  kernels, and ``extent`` ops: sizes, evaluated before any kernel, see ``ir.extents``);
* ``ref``: its semantics, as a call into torch; the reference executor runs it and
  dtype inference probes it on ``meta`` tensors, so promotion (tensor vs tensor, tensor
  vs Python scalar, integer and bool handling) is PyTorch's by construction;
* ``emit`` (elementwise rows): its Triton expression, built from argument
  expressions already converted to the op's compute dtype;
* ``compute``: which dtype the Triton code computes in: ``"out"`` (the result dtype,
  e.g. ``truediv`` of ints computes in float) or ``"args"`` (the promoted argument dtype,
  e.g. comparisons); fp16/bf16 always compute in fp32 and round once, like eager.

* ``reduction`` (reduction rows): identity, combine, fold and finish, see ``ir.reductions``;
* ``aten``: the ATen ops with this row's semantics; ``dynamo.rules`` derives their rules.

Adding an elementwise op or a reduction is one row here plus one sample in the op-sweep
test (and one use in the dynamo rule test when it has ``aten`` packets): see
``src/pyfuser/README.md``, "The op table".

The Triton expressions use ``tl`` builtins and, for functions Triton has no
builtin for (expm1, log1p, tan, tanh, erfc, atan2, pow, fmod, rint, trunc), CUDA's
libdevice: accurate and fast on the GPU.  Triton's interpreter, which runs the very
same kernels on CPU, cannot call libdevice; ``runtime.interpreter`` binds those
names to torch's implementations while an interpreted kernel runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

import torch

from . import host_ops as H, host_rows as HR
from . import reductions as R

# --- reference helpers --------------------------------------------------------


def _tensor_first(fn):
    """Call a torch function that takes only tensors (``atan2``, ``maximum``, ...) on a
    tensor and a Python number, in either order, with the dtype PyTorch's promotion
    gives the pair."""

    def call(a, b, *rest):
        a_is_tensor = isinstance(a, torch.Tensor)
        if a_is_tensor != isinstance(b, torch.Tensor):
            t, s = (a, b) if a_is_tensor else (b, a)
            dtype = torch.result_type(t, s)
            t, s = t.to(dtype), torch.tensor(s, dtype=dtype, device=t.device)
            a, b = (t, s) if a_is_tensor else (s, t)
        return fn(a, b, *rest)

    return call


def _integral(x) -> bool:
    if isinstance(x, torch.Tensor):
        return not (x.dtype.is_floating_point or x.dtype.is_complex)
    return isinstance(x, int)


def _is_bool(x) -> bool:
    return x.dtype == torch.bool if isinstance(x, torch.Tensor) else isinstance(x, bool)


def integer_division(a, b) -> bool:
    """Whether nvFuser's ``div`` of ``a`` and ``b`` is an integer division: both operands
    integers (or one a bool), so they promote to an integer dtype, as nvFuser promotes
    them; two bools divide as eager does (to float)."""
    return _integral(a) and _integral(b) and not (_is_bool(a) and _is_bool(b))


_trunc_div = _tensor_first(lambda a, b: torch.div(a, b, rounding_mode="trunc"))


def _div_ref(a, b):
    """nvFuser's ``div``: C's truncating division with an integer result on integers
    (7 / -2 == -3), true division otherwise; ``truediv`` always divides truly."""
    return _trunc_div(a, b) if integer_division(a, b) else a / b


def _exact_fmod(a, b, floor=False):
    """fmod (``floor``: remainder, the divisor's sign) of floats as IEEE defines it, exact.
    On CPU through C's fmod (numpy): torch's vectorized CPU loop computes a - trunc(a / b)
    * b, NaN once the quotient overflows (fmod(3.39e38, 1e-3) in a row of 16 or more)."""
    r = torch.fmod(a, b)
    if r.device.type != "cpu" or not r.is_floating_point():
        return torch.remainder(a, b) if floor else r
    import numpy as np

    x, y = (torch.as_tensor(v).to(r.dtype) for v in (a, b))
    if r.dtype in (torch.float16, torch.bfloat16):
        x, y = x.float(), y.float()
    x, y = np.broadcast_arrays(x.numpy(), y.numpy())
    with np.errstate(all="ignore"):
        out = np.fmod(x, y)
        if floor:
            out = np.where((out != 0) & ((out < 0) != (y < 0)), out + y, out)
    return torch.from_numpy(np.ascontiguousarray(out)).to(r.dtype)


def _prod_ref(x, dims, keepdim=False, dtype=None):
    out = x if dtype is None else x.to(dtype)
    if out.dtype == torch.bool or not out.dtype.is_floating_point:
        out = out.to(torch.int64) if dtype is None else out
    for d in sorted(dims, reverse=True):
        out = torch.prod(out, d, keepdim=True)
    return out if keepdim else out.reshape([s for i, s in enumerate(out.shape) if i not in dims])


def _addcmul_ref(t, t1, t2, value=1.0):
    """torch.addcmul: the three arguments' promoted dtype (``value`` takes no part and
    is converted to it), computed in fp32 for fp16/bf16 and rounded once.  Python
    numbers among the arguments become 0-dim tensors, which promote like numbers."""
    like = next(x for x in (t, t1, t2) if isinstance(x, torch.Tensor))
    t, t1, t2 = (x if isinstance(x, torch.Tensor) else torch.tensor(x, device=like.device) for x in (t, t1, t2))
    return torch.addcmul(t, t1, t2, value=value)


def _lerp_ref(start, end, weight):
    return torch.lerp(start, end, weight)


def _ordered(fn):
    """torch's maximum or minimum with -0.0 ordered below +0.0, as IEEE 754-2019's
    maximum and minimum, CUDA's max/min instructions and so the kernels order them
    (torch on the CPU returns either zero).  Of two zeros the maximum is ``a + b``
    (-0.0 only if both are) and the minimum ``-(-a + -b)`` (+0.0 only if both are)."""
    is_max = fn is torch.maximum

    def call(a, b):
        r = fn(a, b)
        if not r.dtype.is_floating_point:
            return r
        a, b = a.to(r.dtype), b.to(r.dtype)
        zeros = (a == 0) & (b == 0)
        return torch.where(zeros, a + b if is_max else -(-a + -b), r)

    return call


_max_ref, _min_ref = _ordered(torch.maximum), _ordered(torch.minimum)


def _clamp_ref(x, lo=None, hi=None):
    """``minimum(maximum(x, lo), hi)`` in the dtype torch's clamp gives, zeros ordered
    as in ``_ordered``: clamp(-0.0, min=0.0) is +0.0, as on CUDA (nvFuser's kernels,
    eager on the GPU)."""
    r = torch.clamp(x, lo, hi)
    if not r.dtype.is_floating_point:
        return r
    r = x.to(r.dtype)
    for bound, order in ((lo, _max_ref), (hi, _min_ref)):
        if bound is not None:
            r = order(r, torch.as_tensor(bound, dtype=r.dtype, device=r.device))
    return r


# --- Triton emission helpers (multi-statement functions) -----------------------
# ``b`` is the code generator's statement builder: b.tmp(expr) binds a new temporary,
# b.lit(v) spells a constant in the compute dtype, b.cdtype is that dtype's Triton name.


def _is_number(text: str) -> bool:
    """Whether an emitted operand is a numeric literal (not a name or an expression)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _tensor_arg(b, a: str) -> str:
    """A constant argument as a typed 0-d tensor (extern calls, and the interpreter's
    stand-ins for them, take tensors)."""
    return f"tl.full([], {a}, {b.cdtype})" if _is_number(a) else a


def _ld(b, name, *args):
    """A libdevice call."""
    return f"libdevice.{name}({', '.join(_tensor_arg(b, a) for a in args)})"


_POW_BY_MUL = {2.0: "{x} * {x}", 3.0: "{x} * {x} * {x}", 1.0: "{x}"}


def _pow(b, x, y):
    """Constant exponents 1, 2, 3 as products and 0.5 as sqrt (what eager computes); others
    through libdevice.pow, which follows C's pow like torch.  Integer tensors take only
    small constant exponents (unrolled products)."""
    try:
        const = float(y)
    except ValueError:
        const = None
    if b.cdtype == "tl.int1":  # on bools x ** y is x or not y (0 ** 0 == 1), as torch computes
        if y in ("True", "False"):
            return x if y == "True" else f"({x} == {x})"
        return f"({x} | ({y} == 0))"
    if b.cdtype in ("tl.int32", "tl.int64"):
        if const is None or const != int(const) or not 0 <= const <= 8:
            raise NotImplementedError("pow on integer tensors needs a constant exponent in 0..8")
        tx = b.tmp(x)
        return " * ".join([tx] * int(const)) if const else f"({tx} * 0 + 1)"
    if const in _POW_BY_MUL:
        tx = b.tmp(x)
        return "(" + _POW_BY_MUL[const].format(x=tx) + ")"
    if const == 0.5:  # eager takes sqrt for a scalar exponent of 0.5 (so pow(-inf, 0.5) is nan)
        return _sqrt(b, x)
    return _ld(b, "pow", x, y)


def _remainder(b, a, c):
    ta, tc = b.tmp(_tensor_arg(b, a)), b.tmp(_tensor_arg(b, c))
    r = b.tmp(_ld(b, "fmod", ta, tc) if _is_float(b) else f"{ta} % {tc}")
    return f"tl.where(({r} != 0) & (({r} < 0) != ({tc} < 0)), {r} + {tc}, {r})"


def _fmod(b, a, c):
    return _ld(b, "fmod", a, c) if _is_float(b) else f"{a} % {c}"


def _is_float(b):
    return b.cdtype in ("tl.float32", "tl.float64")


def _floor(b, a):
    return f"tl.floor({a})" if _is_float(b) else a


def _ceil(b, a):
    return f"tl.ceil({a})" if _is_float(b) else a


def _trunc(b, a):
    return f"libdevice.trunc({a})" if _is_float(b) else a


def _round(b, a):
    return f"libdevice.rint({a})" if _is_float(b) else a  # rint: halves to even, like torch.round


def _sign(b, a):
    t = b.tmp(a)
    if b.cdtype == "tl.int1":
        return t
    if not _is_float(b):  # in the tensor's own int type (constants would make it an int32)
        return f"(({t} > 0).to({b.cdtype}) - ({t} < 0).to({b.cdtype}))"
    return f"tl.where({t} > 0, 1.0, tl.where({t} < 0, -1.0, 0.0))"  # nan -> 0, like torch


def _neg(b, a):
    # Triton's unary minus is 0 - x, which gives +0.0 for +0.0; times -1 is exact and flips
    # every sign (LLVM folds it to a negation)
    return f"({a} * -1.0)" if _is_float(b) else f"-{a}"


def _abs(b, a):
    return a if b.cdtype == "tl.int1" else f"tl.abs({a})"


def _isfinite(b, a):
    return f"tl.abs({a}) < float('inf')" if _is_float(b) else f"({a} == {a})"


def _isinf(b, a):
    return f"tl.abs({a}) == float('inf')" if _is_float(b) else f"({a} != {a})"


def _isnan(b, a):
    return f"{a} != {a}"


def _max_min(fn):
    def emit(b, x, y):
        if _is_float(b):
            return f"tl.{fn}({x}, {y}, propagate_nan=tl.PropagateNan.ALL)"
        return f"tl.{fn}({x}, {y})"

    return emit


def _clamp(b, x, lo=None, hi=None):
    """Floats: ``minimum(maximum(x, lo), hi)``, NaN-propagating, with -0.0 below +0.0
    (``_ordered``): clamp(-0.0, min=0.0) is +0.0.  Integers: ``x`` unless below ``lo``
    or above ``hi``."""
    r = b.tmp(x)
    for bound, below, order in ((lo, "<", _max_min("maximum")), (hi, ">", _max_min("minimum"))):
        if bound is None:
            continue
        r = b.tmp(order(b, r, bound) if _is_float(b) else f"tl.where({r} {below} {bound}, {bound}, {r})")
    return r


def _lerp(b, s, e, w):
    ts, te, tw = b.tmp(s), b.tmp(e), b.tmp(w)
    d = b.tmp(f"{te} - {ts}")
    return f"tl.where(tl.abs({tw}) < 0.5, {ts} + {tw} * {d}, {te} - {d} * (1.0 - {tw}))"


def _bitwise_not(b, a):
    return f"({a} == 0)" if b.cdtype == "tl.int1" else f"({a} ^ -1)"


def _div(b, x, y):
    if b.cdtype in ("tl.int32", "tl.int64"):
        return f"({x} // {y})"  # Triton's // on signed integers truncates, as C's /
    return f"tl.div_rn({x}, {y})" if b.cdtype == "tl.float32" else f"({x} / {y})"


# fp32 tanh without a branch.  libdevice's tanhf branches on |x| < 0.6 (a polynomial
# below, an exponential above); GELU's arguments straddle 0.6 within every warp, so
# each warp ran both halves, serialized, with the branch's bookkeeping, which held
# bias + GELU-tanh well below copy bandwidth.  Computing both halves and selecting
# one takes fewer instructions and less time (docs/TUNING.md#branchless-tanh).
# Below 0.6, x (1 + x^2 P(x^2)) with P fitted to tanh on [0, 0.6] (weighted least
# squares, iterated toward equal ripple; 1.25 ulp at most in fp32 with fused
# multiply-adds, and -0 stays -0); above, 1 - 2 / (e^2|x| + 1) with x's sign (on x
# itself the subtraction cancelled for x < 0: 3 ulp), whose ex2 and division are the
# approximate instructions libdevice uses there.  On the GPU against float64
# (``benchmarks/tanh_probe.py``): 1.81 ulp at most, as libdevice's.
TANH_FP32 = """@triton.jit
def _pyfuser_tanh(x):
    x2 = x * x
    p = x2 * -0.005908716470003128 + 0.020808501169085503
    p = p * x2 - 0.05378788709640503
    p = p * x2 + 0.13331976532936096
    p = p * x2 - 0.33333301544189453
    small = x * (x2 * p + 1.0)
    a = tl.abs(x)
    big = 1.0 - libdevice.fast_dividef(2.0, tl.exp2(a * 2.8853900817779268) + 1.0)
    sign = x.to(tl.uint32, bitcast=True) & 0x80000000
    big = (big.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return tl.where(a < 0.6, small, big)"""


def _tanh(b, a):
    if b.cdtype != "tl.float32":
        return f"libdevice.tanh({a})"  # fp64: libdevice's double tanh
    return f"{b.helper('_pyfuser_tanh', TANH_FP32)}({a})"


# A divisor below 2^-100 or above 2^100 in magnitude is scaled by 2^100 or 2^-100
# before it is inverted.
_TINY, _HUGE = repr(2.0 ** -100), repr(2.0 ** 100)


def _div_uniform(b, x, y, constant=None):
    """fp32 ``x / y`` for a divisor ``y`` that is uniform along a tile axis ``x`` varies
    on (a softmax's row sum, a runtime scalar, a constant): ``((x * u) * r) * d`` with
    ``r = 1 / (y * u * d)`` rounded once (``div_rn``) where ``y`` lives, so each element
    pays multiplies instead of an IEEE division (a software sequence, a third of the
    BERT attention softmax + dropout's time: docs/TUNING.md#index-math).

    ``u`` (2^100 for a tiny divisor) and ``d`` (2^-100 for a huge one) are powers of
    two, 1 otherwise: they keep ``r`` a normal number, and scaling ``x`` up before the
    product (``u``) or the product down after it (``d``) keeps the one rounded product
    in the normal range whenever the quotient is.  So the result is within one ulp of
    the correctly rounded quotient for every ``x`` and ``y``, subnormals included, and
    zeros, infinities and NaN give IEEE's results.  A ``constant`` divisor's reciprocal
    is rounded here (exact for powers of two).  Other compute dtypes divide as ``_div``."""
    if b.cdtype != "tl.float32":
        return _div(b, x, y)
    if constant is not None:
        c = torch.tensor(constant, dtype=torch.float32)
        if 2.0 ** -100 <= abs(c.item()) <= 2.0 ** 100:
            return f"({x} * {(1 / c).item()!r})"
    ay = b.tmp(f"tl.abs({y})")
    u = b.tmp(f"tl.where({ay} < {_TINY}, {_HUGE}, 1.0)")
    d = b.tmp(f"tl.where({ay} > {_HUGE}, {_TINY}, 1.0)")
    r = b.tmp(f"tl.div_rn(1.0, ({y} * {u}) * {d})")
    return f"(({x} * {u}) * {r}) * {d}"


def _sqrt(b, a):
    return f"tl.sqrt_rn({a})" if b.cdtype == "tl.float32" else f"tl.sqrt({a})"


# --- the table -------------------------------------------------------------------


class OpKind(str, Enum):
    """How the frontend builds an op, how shapes are inferred for it, how the reference
    runs it and how the code generator indexes it.  Every row's ``kind`` is one of
    these; each dispatch over kinds (``ir.infer``, ``reference``) names every member
    (tests/frontend/test_op_table.py checks it).  A ``str`` enum: its members compare
    equal to their names, and prints as one (``lower_{kind}`` handler names)."""

    __str__ = str.__str__
    __format__ = str.__format__

    UNARY = "unary"
    BINARY = "binary"
    TERNARY = "ternary"
    CAST = "cast"
    REDUCTION = "reduction"
    VAR_MEAN = "var_mean"
    BROADCAST_IN_DIM = "broadcast_in_dim"
    RESHAPE = "reshape"
    PERMUTE = "permute"
    SQUEEZE = "squeeze"
    SLICE = "slice"
    PAD = "pad"
    CAT = "cat"
    FULL = "full"
    IOTA = "iota"
    RANDOM = "random"
    HOST = "host"
    GATHER = "gather"
    EXTENT = "extent"


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: OpKind
    ref: Callable  # torch implementation: the semantics
    emit: Callable | None = None  # Triton expression builder (elementwise kinds)
    compute: str = "out"  # "out": compute in the result dtype; "args": in the promoted arg dtype
    shape: Callable | None = None  # host ops: (op, input shapes, attrs) -> output shapes
    # Binary ops: the builder used when the second operand is uniform along a tile axis
    # the result varies on; called with ``constant=`` the operand's value when it is one.
    emit_uniform_rhs: Callable | None = None
    # Elementwise ops that cost tens of instructions per element (range reduction,
    # libdevice polynomials): worth computing once per distinct input where a tile
    # allows (``schedulers.pointwise``'s broadcast tile), not once per output element.
    heavy: bool = False
    # Reductions: identity, combine, fold and finish (``ir.reductions``).
    reduction: R.Reduction | None = None
    # ATen op packets (``torch.ops.aten.<name>``) with this row's operands and semantics:
    # the dynamo backend registers a rule for each from the row (``dynamo.rules``).
    aten: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.kind, OpKind):
            raise TypeError(f"op table row {self.name}: kind must be an OpKind, got {self.kind!r}")
        if (self.reduction is not None) != (self.kind in (OpKind.REDUCTION, OpKind.VAR_MEAN)):
            raise TypeError(f"op table row {self.name}: a reduction row needs a reduction, got {self.reduction!r}")


def _u(name, ref, emit, compute="out", heavy=False, aten=True):
    """A unary row; ``aten``: ATen's op of the same name is this one (False: none is)."""
    return OpDef(name, OpKind.UNARY, ref, emit, compute, heavy=heavy, aten=(name,) if aten else ())


def _b(name, ref, emit, compute="out", heavy=False, aten=True):
    return OpDef(name, OpKind.BINARY, ref, emit, compute, heavy=heavy, aten=(name,) if aten else ())


def _cmp(name, ref, sym):
    return OpDef(name, OpKind.BINARY, ref, lambda b, x, y: f"({x} {sym} {y})", "args", aten=(name,))


_ROWS = [
    # unary
    _u("abs", torch.abs, _abs),
    _u("neg", lambda a: -a, _neg),
    _u("exp", torch.exp, lambda b, a: f"tl.exp({a})"),
    _u("exp2", torch.exp2, lambda b, a: f"tl.exp2({a})"),
    _u("expm1", torch.expm1, lambda b, a: f"libdevice.expm1({a})", heavy=True),
    _u("log", torch.log, lambda b, a: f"tl.log({a})"),
    _u("log1p", torch.log1p, lambda b, a: f"libdevice.log1p({a})", heavy=True),
    _u("log2", torch.log2, lambda b, a: f"tl.log2({a})"),
    _u("log10", torch.log10, lambda b, a: f"(tl.log2({a}) * 0.30102999566398120)"),
    _u("sqrt", torch.sqrt, _sqrt),
    _u("rsqrt", torch.rsqrt, lambda b, a: f"tl.rsqrt({a})"),
    _u("reciprocal", torch.reciprocal, lambda b, a: _div(b, "1.0", a)),
    _u("sin", torch.sin, lambda b, a: f"tl.sin({a})", heavy=True),
    _u("cos", torch.cos, lambda b, a: f"tl.cos({a})", heavy=True),
    _u("tan", torch.tan, lambda b, a: f"libdevice.tan({a})", heavy=True),
    _u("tanh", torch.tanh, _tanh, heavy=True),
    _u("sigmoid", torch.sigmoid, lambda b, a: _div(b, "1.0", f"(1.0 + tl.exp(-{a}))")),
    _u("relu", torch.relu, lambda b, a: f"tl.where({b.tmp(a)} < 0, 0, {b.last})"),
    _u("silu", torch.nn.functional.silu, lambda b, a: _div(b, b.tmp(a), f"(1.0 + tl.exp(-{b.last}))")),
    _u("erf", torch.erf, lambda b, a: f"tl.erf({a})", heavy=True),
    _u("erfc", torch.erfc, lambda b, a: f"libdevice.erfc({a})", heavy=True),
    _u("floor", torch.floor, _floor),
    _u("ceil", torch.ceil, _ceil),
    _u("round", torch.round, _round),
    _u("trunc", torch.trunc, _trunc),
    _u("sign", torch.sign, _sign),
    _u("isfinite", torch.isfinite, _isfinite, "args"),
    _u("isnan", torch.isnan, _isnan, "args"),
    _u("isinf", torch.isinf, _isinf, "args"),
    _u("logical_not", torch.logical_not, lambda b, a: f"({a} == 0)", "args"),
    _u("bitwise_not", torch.bitwise_not, _bitwise_not),
    _u("set", torch.clone, lambda b, a: a, aten=False),  # a copy: the output is a new tensor (nvFuser's ops.set)
    # binary
    # ATen's add and sub take an ``alpha`` (dynamo.rules); its div is truediv
    _b("add", lambda a, b: a + b, lambda b, x, y: f"({x} + {y})", aten=False),
    _b("sub", lambda a, b: a - b, lambda b, x, y: f"({x} - {y})", aten=False),
    _b("mul", lambda a, b: a * b, lambda b, x, y: f"({x} * {y})"),
    OpDef("div", OpKind.BINARY, _div_ref, _div, emit_uniform_rhs=_div_uniform),
    OpDef("truediv", OpKind.BINARY, lambda a, b: a / b, _div, emit_uniform_rhs=_div_uniform, aten=("div",)),
    _b("pow", lambda a, b: a ** b, _pow, heavy=True, aten=False),  # integer powers: dynamo.rules
    _b("fmod", _tensor_first(_exact_fmod), _fmod),
    _b("remainder", _tensor_first(lambda a, b: _exact_fmod(a, b, floor=True)), _remainder),
    _b("atan2", _tensor_first(torch.atan2), lambda b, y, x: _ld(b, "atan2", y, x), heavy=True),
    _b("maximum", _tensor_first(_max_ref), _max_min("maximum")),
    _b("minimum", _tensor_first(_min_ref), _max_min("minimum")),
    _cmp("eq", lambda a, b: a == b, "=="),
    _cmp("ne", lambda a, b: a != b, "!="),
    _cmp("lt", lambda a, b: a < b, "<"),
    _cmp("le", lambda a, b: a <= b, "<="),
    _cmp("gt", lambda a, b: a > b, ">"),
    _cmp("ge", lambda a, b: a >= b, ">="),
    _b("logical_and", _tensor_first(torch.logical_and), lambda b, x, y: f"(({x} != 0) & ({y} != 0))", "args"),
    _b("logical_or", _tensor_first(torch.logical_or), lambda b, x, y: f"(({x} != 0) | ({y} != 0))", "args"),
    _b("bitwise_and", lambda a, b: a & b, lambda b, x, y: f"({x} & {y})"),
    _b("bitwise_or", lambda a, b: a | b, lambda b, x, y: f"({x} | {y})"),
    _b("bitwise_xor", lambda a, b: a ^ b, lambda b, x, y: f"({x} ^ {y})"),
    # ternary
    OpDef("where", OpKind.TERNARY, torch.where, lambda b, c, x, y: f"tl.where({c}, {x}, {y})"),
    OpDef("lerp", OpKind.TERNARY, _lerp_ref, _lerp),
    OpDef("addcmul", OpKind.TERNARY, _addcmul_ref,
          lambda b, t, t1, t2, value: f"({t} + {value} * {t1} * {t2})"),
    OpDef("clamp", OpKind.TERNARY, _clamp_ref, _clamp),
    # casts
    OpDef("cast", OpKind.CAST, lambda x, dtype: x.to(dtype) if isinstance(x, torch.Tensor) else x),
    # reductions
    OpDef("sum", OpKind.REDUCTION, lambda x, dims, keepdim=False, dtype=None: torch.sum(x, dims, keepdim=keepdim, dtype=dtype), reduction=R.SUM_ROW, aten=("sum",)),
    OpDef("max", OpKind.REDUCTION, lambda x, dims, keepdim=False, dtype=None: torch.amax(x, dims, keepdim=keepdim), reduction=R.MAX_ROW, aten=("amax",)),
    OpDef("min", OpKind.REDUCTION, lambda x, dims, keepdim=False, dtype=None: torch.amin(x, dims, keepdim=keepdim), reduction=R.MIN_ROW, aten=("amin",)),
    OpDef("prod", OpKind.REDUCTION, _prod_ref, reduction=R.PROD_ROW),
    # any/all: max/min of the truth values (a bool result: the accumulator is bool, so each
    # element is cast to bool, x != 0, before it is reduced)
    OpDef("any", OpKind.REDUCTION, lambda x, dims, keepdim=False, dtype=None: torch.any(x, dims, keepdim=keepdim), reduction=R.MAX_ROW, aten=("any",)),
    OpDef("all", OpKind.REDUCTION, lambda x, dims, keepdim=False, dtype=None: torch.all(x, dims, keepdim=keepdim), reduction=R.MIN_ROW, aten=("all",)),
    OpDef("var", OpKind.REDUCTION, lambda x, dims, correction=1, keepdim=False: torch.var(x, dims, correction=correction, keepdim=keepdim), reduction=R.VAR_ROW, aten=("var",)),
    OpDef("var_mean", OpKind.VAR_MEAN, lambda x, dims, correction=1, keepdim=False: torch.var_mean(x, dims, correction=correction, keepdim=keepdim), reduction=R.VAR_MEAN_ROW, aten=("var_mean",)),
    # layout ops: pure re-indexing
    OpDef("broadcast_in_dim", OpKind.BROADCAST_IN_DIM, None),
    OpDef("expand", OpKind.BROADCAST_IN_DIM, None),
    OpDef("broadcast", OpKind.BROADCAST_IN_DIM, None),
    OpDef("reshape", OpKind.RESHAPE, None),
    OpDef("permute", OpKind.PERMUTE, lambda x, dims: x.permute(dims)),
    OpDef("squeeze", OpKind.SQUEEZE, None),
    OpDef("slice", OpKind.SLICE, None),
    OpDef("pad", OpKind.PAD, None),
    OpDef("cat", OpKind.CAT, None),
    # creation and random numbers
    OpDef("full", OpKind.FULL, None),
    OpDef("iota", OpKind.IOTA, None),
    OpDef("uniform", OpKind.RANDOM, None),
    OpDef("normal", OpKind.RANDOM, None),
    OpDef("rand_like", OpKind.RANDOM, None),
    OpDef("randn_like", OpKind.RANDOM, None),
    # host ops: torch calls between kernels (ir.host_ops)
    OpDef("matmul", OpKind.HOST, H.matmul_ref, shape=H.matmul_shape),
    OpDef("linear", OpKind.HOST, H.linear_ref, shape=H.linear_shape),
    # gathers along one dim: host ops for integer or bool tensors; for floating-point ones
    # the code generator reads the input at the index's coordinates (lower.lower_gather),
    # which also reaches values computed in the same kernel (cross-entropy's
    # log-softmax).  An index out of range reads nothing and gives NaN (torch raises).
    OpDef("index_select", OpKind.GATHER, H.index_select_ref, shape=H.index_select_shape),
    OpDef("gather", OpKind.GATHER, H.gather_ref, shape=H.gather_shape),
    OpDef("take_along_axis", OpKind.GATHER, H.take_along_axis_ref, shape=H.gather_shape),
    OpDef("embedding_fwd", OpKind.HOST, H.embedding_ref, shape=H.embedding_shape),
    # extent ops: on sizes (a tensor argument is its shape, a tuple), never in a kernel
    OpDef("size", OpKind.EXTENT, lambda shape, dim: shape[dim]),
    OpDef("shape", OpKind.EXTENT, lambda shape: tuple(shape)),
    OpDef("at", OpKind.EXTENT, lambda vector, index: vector[index]),
    OpDef("define_vector", OpKind.EXTENT, lambda *values: tuple(values)),
] + HR.rows(OpDef, OpKind)  # welford, and the slow path's host rows: scans, sorts, complex, attention

OPS: dict[str, OpDef] = {row.name: row for row in _ROWS}


def runs_on_host(e) -> bool:
    """Whether expr ``e`` is a host op: a torch call between kernels."""
    kind = OPS[e.op].kind
    return kind is OpKind.HOST or (kind is OpKind.GATHER and not e.inputs[0].dtype.is_float) or HR.touches_complex(e)


ELEMENTWISE_KINDS = (OpKind.UNARY, OpKind.BINARY, OpKind.TERNARY, OpKind.CAST)
REDUCTION_KINDS = (OpKind.REDUCTION, OpKind.VAR_MEAN)
UNARY_OPS = [r.name for r in _ROWS if r.kind is OpKind.UNARY]
BINARY_OPS = [r.name for r in _ROWS if r.kind is OpKind.BINARY]
REDUCTION_OPS = [r.name for r in _ROWS if r.kind in REDUCTION_KINDS]
