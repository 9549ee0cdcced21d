"""The op table's Triton emission helpers: the rows of ``ir.ops`` whose expression is more
than one builtin call build it here.

Each helper takes the code generator's statement builder ``b`` and the argument
expressions, already converted to the op's compute dtype, and returns an expression.
The expressions use ``tl`` builtins and, for functions Triton has no builtin for, CUDA's
libdevice (``ld``): accurate and fast on the GPU.  Triton's interpreter, which runs the
very same kernels on CPU, cannot call libdevice; ``runtime.interpreter`` binds those
names to torch's implementations while an interpreted kernel runs.
"""
from __future__ import annotations

import re

import torch

# ``b`` is the code generator's statement builder: b.tmp(expr) binds a new temporary,
# b.cdtype is the compute dtype's Triton name (``const`` spells a constant in it).


# What a constant is in kernel text: int and float literals, arithmetic of int literals
# (a coordinate along a size-1 dim, "0", or a slice's offset from it, "(0 + 3)") and the
# non-finite floats (``dtype_policy.literal`` spells them ``float('inf')``), and bools.
_CONSTANT = re.compile(r"[\d\s()+*-]+|True|False|\(?-?(\d+\.?\d*(e[-+]?\d+)?|float\('-?(inf|nan)'\))\)?")


def is_number(text: str) -> bool:
    """Whether an emitted operand is a Python constant in the kernel (not a name or a
    tensor expression).  Such a value has no ``.to`` and no dtype of its own, so every
    conversion and every extern call types it first (``tensor_arg``,
    ``codegen.dtype_policy.convert``)."""
    return _CONSTANT.fullmatch(text.strip()) is not None


_TYPED = re.compile(r"tl\.full\(\[\], (.+), tl\.float64\)")


def constant_value(text: str) -> float | None:
    """The value of an emitted float constant, plain (fp32 and narrower) or the typed
    0-d tensor an fp64 constant is spelled as (``dtype_policy.literal``); None for
    anything else.  Rules that special-case a constant (``pow_``) read it here, so an
    fp64 fusion takes the same path as an fp32 one."""
    m = _TYPED.fullmatch(text.strip())
    try:
        return float(m.group(1) if m else text)
    except ValueError:
        return None


def const(b, value: float) -> str:
    """A float constant in the compute dtype.  A Python float in Triton source is an
    fp32 value: alone (``tl.where(c, 1.0, 0.0)``) it makes an fp32 result, which would
    take an fp64 fusion's precision away, so other dtypes get a typed tensor."""
    return repr(value) if b.cdtype == "tl.float32" else f"tl.full([], {value!r}, {b.cdtype})"


def tensor_arg(b, a: str) -> str:
    """A constant argument as a typed 0-d tensor (extern calls, and the interpreter's
    stand-ins for them, take tensors)."""
    return f"tl.full([], {a}, {b.cdtype})" if is_number(a) else a


def ld(b, name, *args):
    """A libdevice call."""
    return f"libdevice.{name}({', '.join(tensor_arg(b, a) for a in args)})"


_POW_BY_MUL = {2.0: "{x} * {x}", 3.0: "{x} * {x} * {x}", 1.0: "{x}"}


def pow_(b, x, y):
    """Constant exponents 1, 2, 3 as products, 0.5 as sqrt and -0.5 as one over sqrt (what
    eager computes: pow(-inf, 0.5) is nan, pow(-0.0, -0.5) is -inf, where C's pow says
    inf); others through libdevice.pow, which follows C's pow like torch (fp32 in double).
    Integer tensors take only small constant exponents (unrolled products)."""
    const = constant_value(y)
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
        return sqrt(b, x)
    if const == -0.5:  # and rsqrt for -0.5, here correctly rounded twice (tl.rsqrt is approximate)
        return div(b, "1.0", sqrt(b, x))
    if b.cdtype == "tl.float32":
        # In double, rounded once to fp32 (a constant exponent rounded to fp32 first, as
        # torch's scalar is): correctly rounded but for the double rounding, and much
        # nearer torch's CUDA powf than libdevice's powf, which is not the same
        # implementation (docs/SEMANTICS.md).
        wide = (f"({tensor_arg(b, a)}).to(tl.float64)" for a in (x, y))
        return f"libdevice.pow({', '.join(wide)}).to(tl.float32)"
    return ld(b, "pow", x, y)


def remainder(b, a, c):
    ta, tc = b.tmp(tensor_arg(b, a)), b.tmp(tensor_arg(b, c))
    r = b.tmp(ld(b, "fmod", ta, tc) if is_float(b) else int_divide(b, ta, tc, "%"))
    return f"tl.where(({r} != 0) & (({r} < 0) != ({tc} < 0)), {r} + {tc}, {r})"


def fmod(b, a, c):
    return ld(b, "fmod", a, c) if is_float(b) else int_divide(b, a, c, "%")


# The int64 quotient or remainder CUDA C gives for a zero divisor, torch's and nvFuser's
# kernels alike: their 64-bit division takes a 32-bit unsigned path when both operands
# lie in [0, 2^32), whose division by zero yields 0xFFFFFFFF (torch's CUDA 7 // 0 is
# 4294967295).  Triton's int64 division gives -1 there.
_CUDA_INT64_BY_ZERO = "4294967295"


def int_divide(b, x, y, sym):
    """Integer ``x // y`` (``sym`` "//", truncating as C's /) or ``x % y`` (``sym`` "%").
    An int64 division by zero of a dividend in [0, 2^32) gives CUDA C's value; other
    zero divisors give what the hardware gives, as in torch (division by zero is
    undefined in C and to LLVM).  LLVM may take the zero out of a check made after the
    division, so the divisor is replaced before it."""
    if b.cdtype != "tl.int64" or (is_number(y) and float(y) != 0):
        return f"({x} {sym} {y})"
    tx, ty = b.tmp(tensor_arg(b, x)), b.tmp(tensor_arg(b, y))
    z = b.tmp(f"({ty} == 0) & (({tx} >> 32) == 0)")
    return f"tl.where({z}, {_CUDA_INT64_BY_ZERO}, {tx} {sym} tl.where({z}, 1, {ty}))"


def is_float(b):
    return b.cdtype in ("tl.float32", "tl.float64")


def floor(b, a):
    return f"tl.floor({a})" if is_float(b) else a


def ceil(b, a):
    return f"tl.ceil({a})" if is_float(b) else a


def trunc(b, a):
    return f"libdevice.trunc({a})" if is_float(b) else a


def round_(b, a):
    return f"libdevice.rint({a})" if is_float(b) else a  # rint: halves to even, like torch.round


def sign(b, a):
    t = b.tmp(a)
    if b.cdtype == "tl.int1":
        return t
    if not is_float(b):  # in the tensor's own int type (constants would make it an int32)
        return f"(({t} > 0).to({b.cdtype}) - ({t} < 0).to({b.cdtype}))"
    one, minus, zero = const(b, 1.0), const(b, -1.0), const(b, 0.0)
    return f"tl.where({t} > 0, {one}, tl.where({t} < 0, {minus}, {zero}))"  # nan -> 0, like torch


def neg(b, a):
    # Triton's unary minus is 0 - x, which gives +0.0 for +0.0; times -1 is exact and flips
    # every sign (LLVM folds it to a negation)
    return f"({a} * -1.0)" if is_float(b) else f"-{a}"


def abs_(b, a):
    return a if b.cdtype == "tl.int1" else f"tl.abs({a})"


def isfinite(b, a):
    return f"tl.abs({a}) < float('inf')" if is_float(b) else f"({a} == {a})"


def isinf(b, a):
    return f"tl.abs({a}) == float('inf')" if is_float(b) else f"({a} != {a})"


def isnan(b, a):
    return f"{a} != {a}"


def max_min(fn):
    def emit(b, x, y):
        if is_float(b):
            return f"tl.{fn}({x}, {y}, propagate_nan=tl.PropagateNan.ALL)"
        return f"tl.{fn}({x}, {y})"

    return emit


def clamp(b, x, lo=None, hi=None):
    """Floats: ``minimum(maximum(x, lo), hi)``, NaN-propagating, with -0.0 below +0.0
    (``op_refs.max_ref``): clamp(-0.0, min=0.0) is +0.0.  Integers: ``x`` unless below ``lo``
    or above ``hi``."""
    r = b.tmp(x)
    for bound, below, order in ((lo, "<", max_min("maximum")), (hi, ">", max_min("minimum"))):
        if bound is None:
            continue
        r = b.tmp(order(b, r, bound) if is_float(b) else f"tl.where({r} {below} {bound}, {bound}, {r})")
    return r


def lerp(b, s, e, w):
    ts, te, tw = b.tmp(s), b.tmp(e), b.tmp(w)
    d = b.tmp(f"{te} - {ts}")
    return f"tl.where(tl.abs({tw}) < 0.5, {ts} + {tw} * {d}, {te} - {d} * (1.0 - {tw}))"


def add(b, x, y):
    # Bools add as torch adds them, to True when either is (a logical or); Triton's
    # 1-bit integer addition would wrap True + True to False.
    return f"({x} | {y})" if b.cdtype == "tl.int1" else f"({x} + {y})"


def bitwise_not(b, a):
    return f"({a} == 0)" if b.cdtype == "tl.int1" else f"({a} ^ -1)"


def div(b, x, y):
    if b.cdtype in ("tl.int32", "tl.int64"):
        return int_divide(b, x, y, "//")  # Triton's // on signed integers truncates, as C's /
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
# approximate instructions libdevice uses there (flushing subnormals: EX2_APPROX).  On
# the GPU it is as accurate as libdevice's (docs/TUNING.md#branchless-tanh).
TANH_FP32 = """@triton.jit
def _pyfuser_tanh(x):
    x2 = x * x
    p = x2 * -0.005908716470003128 + 0.020808501169085503
    p = p * x2 - 0.05378788709640503
    p = p * x2 + 0.13331976532936096
    p = p * x2 - 0.33333301544189453
    small = x * (x2 * p + 1.0)
    a = tl.abs(x)
    big = 1.0 - _pyfuser_fdiv_approx(2.0, _pyfuser_ex2_approx(a * 2.8853900817779268) + 1.0)
    sign = x.to(tl.uint32, bitcast=True) & 0x80000000
    big = (big.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return tl.where(a < 0.6, small, big)"""


# fp32 erf without libdevice's coefficient selection.  libdevice's erff runs one
# polynomial whose coefficients each element selects by |x| < 1.003 (two moves per
# coefficient), then an exponential for the large half; computing both halves with
# fixed coefficients and selecting one takes a quarter fewer instructions, and GELU's
# kernels are bound by instructions, not bytes (docs/TUNING.md#branchless-erf).
# Below 1, x + x P(x^2), P fitted to erf(x)/x - 1 on [0, 1] (relative error, weights
# iterated toward equal ripple); above, 1 - 2^Q(|x|) with x's sign, Q fitted to
# log2(erfc(a)) on [1, 4] weighted by erfc(a) (the error it makes in erf itself); past
# 4, erfc(a) < 2^-25 and erf is 1 in fp32, so |x| is held at 4 there.  With the
# approximate 2^x off by at most 2^-22, 1.9 ulp at most (libdevice's erff: 2); NaN
# stays NaN (the hold keeps it), -0 stays -0.
ERF_FP32 = """@triton.jit
def _pyfuser_erf(x):
    x2 = x * x
    p = x2 * 7.854738214518875e-05 - 0.0008010443416424096
    p = p * x2 + 0.005188354291021824
    p = p * x2 - 0.02685382403433323
    p = p * x2 + 0.1128358542919159
    p = p * x2 - 0.3761262595653534
    p = p * x2 + 0.12837916612625122
    small = x * p + x
    a = tl.abs(x)
    h = tl.where(a > 4.0, 4.0, a)
    q = h * 0.00026768838870339096 - 0.004240565933287144
    q = q * h + 0.03145679831504822
    q = q * h - 0.1486479789018631
    q = q * h - 0.920769214630127
    q = q * h - 1.6259725093841553
    q = q * h - 0.0005109705962240696
    big = 1.0 - _pyfuser_ex2_approx(q)
    sign = x.to(tl.uint32, bitcast=True) & 0x80000000
    big = (big.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return tl.where(a < 1.0, small, big)"""


# The hardware's approximate fp32 2^x and division, flushing subnormals, as PTX.
# Triton emits these (for tl.exp2 and libdevice's fast_dividef) only when libdevice's
# flush-to-zero build is on, which pyfuser's launches turn off (runtime.args.launch_kw);
# the non-flushing forms take more instructions (docs/TUNING.md#branchless-tanh).  The
# tanh forms call them only where flushing cannot change the result: 2^x feeds 1 + 2^x,
# and the divisor is at least 1.  Triton's interpreter cannot run PTX: the CPU copy of
# a kernel calls torch's function instead (runtime.interpreter).
EX2_APPROX = """@triton.jit
def _pyfuser_ex2_approx(x):
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)"""
FDIV_APPROX = """@triton.jit
def _pyfuser_fdiv_approx(x, y):
    return tl.inline_asm_elementwise("div.approx.ftz.f32 $0, $1, $2;", "=f,f,f", [x, y], dtype=tl.float32,
                                     is_pure=True, pack=1)"""


def ex2_approx(b, x):
    """2^x of an fp32 ``x`` whose result is only ever added to 1 (see EX2_APPROX)."""
    return f"{b.helper('_pyfuser_ex2_approx', EX2_APPROX)}({x})"


def erf(b, a):
    if b.cdtype != "tl.float32":
        return f"tl.erf({a})"  # fp64: libdevice's double erf
    b.helper("_pyfuser_ex2_approx", EX2_APPROX)
    return f"{b.helper('_pyfuser_erf', ERF_FP32)}({a})"


def tanh(b, a):
    if b.cdtype != "tl.float32":
        return f"libdevice.tanh({a})"  # fp64: libdevice's double tanh
    b.helper("_pyfuser_ex2_approx", EX2_APPROX)
    b.helper("_pyfuser_fdiv_approx", FDIV_APPROX)
    return f"{b.helper('_pyfuser_tanh', TANH_FP32)}({a})"


# A divisor below 2^-100 or above 2^100 in magnitude is scaled by 2^100 or 2^-100
# before it is inverted.
_TINY, _HUGE = repr(2.0 ** -100), repr(2.0 ** 100)


def div_uniform(b, x, y, constant=None):
    """fp32 ``x / y`` for a divisor ``y`` that is uniform along a tile axis ``x`` varies
    on (a softmax's row sum, a runtime scalar, a constant): ``((x * u) * r) * d`` with
    ``r = 1 / (y * u * d)`` rounded once (``div_rn``) where ``y`` lives, so each element
    pays multiplies instead of an IEEE division (a software sequence, a third of an
    attention softmax + dropout's time: docs/TUNING.md#index-math).

    ``u`` (2^100 for a tiny divisor) and ``d`` (2^-100 for a huge one) are powers of
    two, 1 otherwise: they keep ``r`` a normal number, and scaling ``x`` up before the
    product (``u``) or the product down after it (``d``) keeps the one rounded product
    in the normal range whenever the quotient is.  So the result is within one ulp of
    the correctly rounded quotient for every ``x`` and ``y``, subnormals included, and
    zeros, infinities and NaN give IEEE's results.  A ``constant`` divisor's reciprocal
    is rounded here (exact for powers of two).  Other compute dtypes divide as ``div``."""
    if b.cdtype != "tl.float32":
        return div(b, x, y)
    if constant is not None:
        c = torch.tensor(constant, dtype=torch.float32)
        if 2.0 ** -100 <= abs(c.item()) <= 2.0 ** 100:
            return f"({x} * {(1 / c).item()!r})"
    ay = b.tmp(f"tl.abs({y})")
    u = b.tmp(f"tl.where({ay} < {_TINY}, {_HUGE}, 1.0)")
    d = b.tmp(f"tl.where({ay} > {_HUGE}, {_TINY}, 1.0)")
    r = b.tmp(f"tl.div_rn(1.0, ({y} * {u}) * {d})")
    return f"(({x} * {u}) * {r}) * {d}"


def sqrt(b, a):
    return f"tl.sqrt_rn({a})" if b.cdtype == "tl.float32" else f"tl.sqrt({a})"


def libdevice(name):
    """A unary row computed by libdevice's function of that name."""
    return lambda b, a: ld(b, name, a)


def exact(name):
    """exp, log, sin and friends on float32/float64 through libdevice (CUDA's expf, logf,
    sinf: what torch's CUDA kernels and nvFuser's call, within an ulp or two).  Triton's
    own builtins use the approximate instructions there: ``tl.exp(x)`` is ex2.approx of
    x*log2(e), whose rounded product costs about |x| ulp (60 at x = 80); ``tl.log`` is
    lg2.approx times ln 2, with an absolute error that is a large relative one near 1;
    ``tl.sin`` is sin.approx, accurate only near 0.  Other dtypes keep the builtin, and
    so does an exp whose value only 16-bit stores read (``b.fast_exp``, set from
    ``ir.peephole.fast_exp``)."""
    def emit(b, a):
        if b.cdtype not in ("tl.float32", "tl.float64") or (name == "exp" and b.fast_exp):
            return f"tl.{name}({a})"
        return ld(b, name, a)
    return emit


exp = exact("exp")  # also the exp inside sigmoid and silu


def frac(b, a):
    t = b.tmp(a)
    return f"({t} - libdevice.trunc({t}))"  # frac(+-inf) is NaN, as torch's x - trunc(x)


def signbit(b, a):
    """The sign bit itself (of -0.0 and of a negative NaN too), read through the bits."""
    if b.cdtype == "tl.int1":
        return f"({a} != {a})"
    if not is_float(b):
        return f"({a} < 0)"
    width = 64 if b.cdtype == "tl.float64" else 32
    return f"(({a}).to(tl.int{width}, bitcast=True) < 0)"


def equals_inf(sign):
    """isposinf / isneginf: only floats hold infinities."""
    return lambda b, a: f"({a} == float('{sign}inf'))" if is_float(b) else f"({a} != {a})"


def isreal(b, a):
    return f"(({a} == {a}) | ({a} != {a}))"  # every real number, NaN included


def threshold(b, x, limit, value):
    t = b.tmp(x)
    return f"tl.where({t} <= {limit}, {value}, {t})"  # NaN <= limit is false: NaN stays


def _width(b) -> int:
    return 64 if b.cdtype == "tl.int64" else 32


def _shift(b, x, s, shifted, outside):
    """A shift by ``s`` as torch defines it for every ``s``: ``shifted`` (of x and s,
    with s reduced below the width so no lane shifts by an undefined amount) where
    0 <= s < width, ``outside`` (of x and the top bit's position) elsewhere."""
    tx, ts = b.tmp(tensor_arg(b, x)), b.tmp(tensor_arg(b, s))
    n = _width(b)
    inside = shifted.format(x=tx, s=f"({ts} & {n - 1})")
    return f"tl.where(({ts} >= 0) & ({ts} < {n}), {inside}, {outside.format(x=tx, top=n - 1)})"


def shift_left(b, x, s):
    return _shift(b, x, s, "({x} << {s})", "0")


def shift_right(b, x, s):
    return _shift(b, x, s, "({x} >> {s})", "({x} >> {top})")  # the sign bit fills every bit


def logical_shift_right(b, x, s):
    n = _width(b)
    shifted = f"(({{x}}).to(tl.uint{n}, bitcast=True) >> ({{s}}).to(tl.uint{n})).to(tl.int{n}, bitcast=True)"
    return _shift(b, x, s, shifted, "0")


# Euclid's algorithm on |a| and |b| (|INT_MIN| wraps to INT_MIN, as torch's std::abs
# does), a fixed number of steps: consecutive Fibonacci numbers take the most, 46 below
# 2^31 and 92 below 2^63; a lane that reached a zero remainder keeps its answer.
GCD = """@triton.jit
def {name}(a, b):
    a, b = tl.broadcast(tl.abs(a), tl.abs(b))
    for _ in range({steps}):
        nonzero = a != 0
        r = b % tl.where(nonzero, a, 1)
        b = tl.where(nonzero, a, b)
        a = tl.where(nonzero, r, 0)
    return b"""


def gcd(b, x, y):
    steps = 95 if b.cdtype == "tl.int64" else 48
    name = f"_pyfuser_gcd{_width(b)}"
    return f"{b.helper(name, GCD.format(name=name, steps=steps))}({tensor_arg(b, x)}, {tensor_arg(b, y)})"


def nextafter(b, x, y):
    """The float after ``x`` toward ``y``, on the bits: one unit up or down in the last
    place, the smallest subnormal (with ``y``'s sign) from zero, ``y`` when the two are
    equal, NaN from NaN.  On the bits, so that it holds in any libdevice build: the
    flush-to-zero one Triton links by default returns the smallest normal from zero."""
    tx, ty = b.tmp(tensor_arg(b, x)), b.tmp(tensor_arg(b, y))
    n = 64 if b.cdtype == "tl.float64" else 32
    bits = f"{tx}.to(tl.int{n}, bitcast=True)"
    step = b.tmp(f"({bits} + tl.where(({ty} > {tx}) == ({tx} > 0), 1, -1)).to(tl.float{n}, bitcast=True)")
    # the bits of the smallest subnormal, positive or negative (the sign bit and a 1)
    tiny = f"tl.where({ty} > 0, 1, {1 - 2 ** (n - 1)}).to(tl.int{n}).to(tl.float{n}, bitcast=True)"
    pick = f"tl.where({tx} == {ty}, {ty}, tl.where({tx} == 0, {tiny}, {step}))"
    return f"tl.where(({tx} != {tx}) | ({ty} != {ty}), {tx} + {ty}, {pick})"
