"""Random fusions checked against PyTorch eager, op by op: an oracle independent of
pyfuser's reference executor and of its op table.

``fuzz_fusions.py`` compares execute with ``fd.reference``, so a wrong rule in the op
table (a dtype, a torch reference) passes there.  Here each op's meaning is written
out again in torch (``_eager``), with nvFuser's semantics where they differ from
torch's: ``div`` of two integers truncates and stays an integer, ``truediv``
divides; sums and products of integers or bools are Int (int64); an output aliased
to an input is written into it and not returned.

A fusion is drawn from ``random.Random((seed, index))``, so one index reproduces it
(``python -m tests.segment.eager_fuzz --seed S --only I --show``).  While drawing,
each value is computed in eager at once, so the generator knows its dtype and
whether it is exact (see ``Val``).  Values are [rows, cols] tensors (broadcast inputs
and reductions are broadcast back) or scalars: runtime ``define_scalar`` inputs and
Python constants.  Inputs hold special values (-0.0, NaN, +-inf, subnormals of their
dtype, extremes of ints) and arrive contiguous, transposed, sliced with a step,
expanded (stride 0) or as a lower-rank tensor broadcast in the fusion.

Comparison (``compare``): dtype and shape exact; integers and bools exact; NaN
positions equal; floats within ``tol``.  The tolerance is an error bound carried
along the chain, element by element: every float op adds the unit roundoff of its
result dtype (4 units for fp32, whose transcendental functions may be a few ulp off
correct rounding), an op that amplifies its input's error (exp, pow, sin, ...)
multiplies the incoming bound by its input's magnitude, a reduction by its length,
and the bound is relative to the largest finite magnitude along the chain at that
element (a subtraction's error is relative to its operands, not its result).  Ops that jump (floor, round, comparisons, casts to integers, sign,
isnan, ...) take only exact values, so a rounding difference never becomes a
different integer.  Signed zeros are compared where the chain is exact and holds no
op whose zero sign IEEE leaves open (max/min, reductions).

A difference is classified (``classify``) as known when the fusion holds a feature
of a bug in ``KNOWN``; otherwise it is new and the run reports it.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from pyfuser import DataType, FusionDefinition

FLOATS = [DataType.Float, DataType.Half, DataType.BFloat16, DataType.Double]
INTS = [DataType.Int32, DataType.Int]
DTYPES = FLOATS + INTS + [DataType.Bool]
LAYOUTS = ["contig", "contig", "transposed", "strided", "expand_rows", "expand_cols", "row", "col", "size1"]

# The unit roundoff of a dtype's rounding, per op (fp32: a few ulp for libdevice).
EPS = {DataType.Float: 4 * 2.0 ** -24, DataType.Half: 2.0 ** -11, DataType.BFloat16: 2.0 ** -8,
       DataType.Double: 2.0 ** -50}

UNARY_SMOOTH = ["exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
                "tanh", "sigmoid", "erf", "silu"]
# An input error e becomes about |x| * e after these (relative to the result).
AMPLIFY = {"exp", "exp2", "expm1", "sin", "cos", "pow", "silu", "sigmoid"}
# Near a pole or a domain edge a tiny input difference becomes any difference.
POLE = {"log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "div", "truediv", "pow", "fmod", "remainder",
        "atan2"}
UNARY_EXACT = ["neg", "abs", "relu", "floor", "ceil", "round", "trunc", "sign"]
UNARY_PRED = ["isnan", "isinf", "isfinite", "logical_not"]
ARITH = ["add", "sub", "mul", "div", "truediv", "maximum", "minimum", "pow", "fmod", "remainder", "atan2"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
LOGIC = ["logical_and", "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor"]
REDUCE = ["sum", "max", "min", "prod", "var", "var_mean"]
# Ops whose zero sign is not defined by the math (IEEE max/min of +-0, sums' start value).
LOOSE_ZERO = {"maximum", "minimum", "max", "min", "sum", "prod", "var", "var_mean", "clamp", "relu"}
# Ops whose result depends on the sign of a zero input (atan2(-0.0, -0.0) is -pi, 1 / -0.0 -inf).
ZERO_SIGN = {"atan2", "div", "truediv", "reciprocal", "rsqrt", "pow"}
# Ops that jump at some input (remainder(x, y) at multiples of y: from about 0 to about y).
JUMP = {"remainder", "fmod"}
# Ops that are correctly rounded (or exact): their exact inputs give the same bits everywhere.
# Not div: an fp32 division by a tile-uniform divisor is a product with its reciprocal,
# within one ulp (ops._div_uniform).  Not sqrt: PyTorch's CPU fp32 sqrt is not correctly
# rounded (sqrt(0.5794f) is one ulp above the nearest float; pyfuser's sqrt_rn is).
EXACT_OPS = {"add", "sub", "mul", "neg", "abs", "relu", "floor", "ceil", "round",
             "trunc", "sign", "maximum", "minimum", "fmod", "remainder", "where", "clamp", "cast", "max", "min",
             "bcast"} | set(UNARY_PRED) | set(COMPARE) | set(LOGIC)


def _specials(dt: DataType):
    if dt.is_float:
        fi = torch.finfo(dt.torch)
        return [-0.0, 0.0, math.nan, math.inf, -math.inf, fi.tiny * fi.eps, -fi.tiny * fi.eps * 3,
                fi.tiny / 2, fi.tiny, fi.max, -fi.max, 1.0, -1.0, 0.5]
    if dt is DataType.Bool:
        return [True, False]
    ii = torch.iinfo(dt.torch)
    return [ii.min, ii.max, 0, -1, 1, ii.max - 1, ii.min + 1]


def _random_tensor(rng: random.Random, shape, dt: DataType, special: float):
    n = math.prod(shape)
    if dt.is_float:
        vals = [rng.uniform(-3, 3) for _ in range(n)]
    elif dt is DataType.Bool:
        vals = [rng.random() < 0.5 for _ in range(n)]
    else:
        vals = [rng.randint(-6, 6) for _ in range(n)]
    sp = _specials(dt)
    vals = [rng.choice(sp) if rng.random() < special else v for v in vals]
    return torch.tensor(vals, dtype=torch.float64 if dt.is_float else dt.torch).to(dt.torch).reshape(shape)


def _random_scalar(rng: random.Random, dt: DataType, special: float):
    if dt is DataType.Bool:
        return rng.random() < 0.5
    if dt is DataType.Int:
        return rng.choice([0, -1, 2**31, -2**63]) if rng.random() < special else rng.randint(-5, 5)
    if rng.random() < special:
        return rng.choice([-0.0, 0.0, math.nan, math.inf, -math.inf, 1e-40, 70000.0, 3.0e38])
    return round(rng.uniform(-3, 3), 3)


@dataclass
class Val:
    """A value while drawing: its eager result (a [rows, cols] tensor or a Python
    number), its dtype, whether it is exact (the same bits on any correct
    implementation), its error bound ``rel`` (relative to ``mag``, the largest finite
    magnitude along its chain) and the ops and features along its chain."""
    eager: object
    dtype: DataType
    exact: bool = True
    rel: object = 0.0
    mag: object = 1.0
    ops: frozenset = frozenset()
    scalar: bool = False
    const: bool = False


def _mag(x) -> torch.Tensor:
    """Elementwise magnitude of a value, infinities and NaN as 0 (they compare exactly)."""
    f = torch.as_tensor(x).double().abs()
    return torch.where(torch.isfinite(f), f, 0.0)


def _emax(xs) -> torch.Tensor:
    """Elementwise maximum of tensors and numbers, broadcast."""
    ts = torch.broadcast_tensors(*[torch.as_tensor(x, dtype=torch.float64) for x in xs])
    return torch.stack(ts).amax(0)


def _is_int(v) -> bool:
    """Integral (not bool) in nvFuser's sense: an int tensor or an Int scalar."""
    return v.dtype in INTS


def _t(x, other=None):
    """A number as a 0-d tensor of the dtype torch gives ``op(other, x)`` for the Python
    number (an fp64 tensor keeps a Double scalar's bits, an int tensor takes the default
    float dtype), its value rounded once to that dtype."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(other, torch.Tensor):
        return torch.tensor(x, dtype=torch.result_type(other, x))
    return torch.tensor(x)


LOW = (torch.float16, torch.bfloat16)


def _fmod(op, a, b):
    """fmod and remainder as IEEE defines them (exact): C's fmod through numpy.  torch's
    CPU loop computes a - trunc(a / b) * b, NaN once the quotient overflows."""
    out = torch.fmod(a, b) if isinstance(a, torch.Tensor) else torch.fmod(_t(a, b), b)
    if not out.is_floating_point():
        return torch.remainder(a, b) if op == "remainder" else out
    wide = torch.float64 if out.dtype == torch.float64 else torch.float32
    x, y = (torch.tensor(v, dtype=torch.float64) if isinstance(v, float) else torch.as_tensor(v)
            for v in (a, b))
    x, y = (v.to(out.dtype).to(wide).numpy() for v in (x, y))
    with np.errstate(all="ignore"):
        r = np.fmod(*np.broadcast_arrays(x, y))
        if op == "remainder":
            y = np.broadcast_to(y, r.shape)
            r = np.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)
    return torch.from_numpy(np.ascontiguousarray(r)).to(out.dtype)


def _eager(op, args, attrs):
    """nvFuser's meaning of one op, in torch, on eager values (tensors or numbers).

    Operands are cast to the op's common dtype, as torch does, except a float scalar:
    nvFuser does not round it to a 16-bit common dtype (``optionalCast`` leaves float
    scalars alone) but computes with it in fp32, so ``half + 70000.0`` is 60000, not
    inf: such an op runs here on fp32 copies of its operands, rounded once at the end.
    An integer scalar meeting such an op is cast to the 16-bit dtype first (nvFuser's
    promoteValues: fp16 ``0.5 * 70000`` is inf; eager multiplies and divides with the
    unrounded number), then taken as a float scalar."""
    scalar = lambda a: isinstance(a, (float, int)) and not isinstance(a, bool)  # noqa: E731
    if op not in ("cast", "sum", "prod", "max", "min", "var", "var_mean") and any(scalar(a) for a in args):
        tensors = [a for a in args if isinstance(a, torch.Tensor) and a.dtype is not torch.bool]
        common = None
        for a in tensors:
            common = a.dtype if common is None else torch.promote_types(common, a.dtype)
        for a in args:
            if common is not None and not isinstance(a, torch.Tensor):
                common = torch.result_type(torch.empty(1, dtype=common), a)
        if common in LOW:
            args = [float(torch.tensor(a).float().to(common)) if scalar(a) and isinstance(a, int) else a for a in args]
            up = [a.to(common).float() if isinstance(a, torch.Tensor) and a.dtype is not torch.bool else a for a in args]
            r = _eager_op(op, up, attrs)
            return r.to(common) if r.is_floating_point() else r
    return _eager_op(op, args, attrs)


def _eager_op(op, args, attrs):
    if op in UNARY_SMOOTH or op in UNARY_EXACT or op in UNARY_PRED or op == "bitwise_not":
        fn = {"neg": lambda a: -a, "relu": torch.relu, "silu": torch.nn.functional.silu}.get(op) or getattr(torch, op)
        r = fn(args[0])
        if op in UNARY_SMOOTH and r.is_floating_point():
            # in fp64, rounded once: torch's own CPU loops are not always accurate (its
            # bf16 erf of the smallest normal number is 0)
            return fn(args[0].double()).to(r.dtype)
        return r
    a, b = (args + [None])[:2]
    if op == "div":
        if attrs["int"]:  # nvFuser: integer / integer truncates toward zero, an integer result
            return torch.div(_t(a), b, rounding_mode="trunc") if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else a
        return torch.true_divide(a, b)
    if op == "truediv":
        return torch.true_divide(a, b)
    if op in ("add", "sub", "mul", "pow", "fmod", "remainder") or op in COMPARE or op.startswith("bitwise"):
        if op in ("fmod", "remainder"):
            return _fmod(op, a, b)
        if op == "pow" and a.dtype == torch.bool:  # 1**b = 1, 0**1 = 0, 0**0 = 1
            return a | ~_t(b)
        if op == "pow" and not isinstance(a, torch.Tensor):
            return torch.pow(a, b)
        return getattr(torch, op)(a, b)
    if op in ("maximum", "minimum", "atan2", "logical_and", "logical_or"):
        return getattr(torch, op)(a, _t(b, a))
    if op == "where":
        return torch.where(args[0], args[1], args[2])
    if op == "clamp":
        return torch.clamp(a, attrs["lo"], attrs["hi"])
    if op == "lerp":
        return torch.lerp(a, b, args[2])
    if op == "cast":
        return a.to(attrs["dtype"].torch)
    if op in ("sum", "prod"):  # nvFuser: integers and bools sum to Int, 16-bit floats in fp32
        x = a.to(torch.int64) if a.dtype in (torch.bool, torch.int32) else a.float() if a.dtype in LOW else a
        if op == "sum":
            r = torch.sum(x, attrs["dims"], keepdim=attrs["keepdim"])
            return r.to(a.dtype) if a.dtype in LOW else r
        for d in sorted(attrs["dims"], reverse=True):
            x = torch.prod(x, d, keepdim=True)
        x = x.to(a.dtype) if a.dtype in LOW else x
        return x if attrs["keepdim"] else x.reshape([s for i, s in enumerate(a.shape) if i not in attrs["dims"]])
    if op in ("max", "min"):
        return getattr(torch, "a" + op)(a, attrs["dims"], keepdim=attrs["keepdim"])
    if op in ("var", "var_mean"):
        var = torch.var(a, attrs["dims"], correction=attrs["correction"], keepdim=attrs["keepdim"])
        # The mean as the math and torch.mean have it: torch.var_mean's own is NaN once a row
        # holds an infinity (its running update subtracts inf from inf); the mean is +-inf.
        return var if op == "var" else (var, torch.mean(a, attrs["dims"], keepdim=attrs["keepdim"]))
    raise AssertionError(op)


@dataclass
class Recipe:
    rows: int
    cols: int
    inputs: list  # ("tensor", dtype, layout) or ("scalar", dtype)
    steps: list  # (op, [arg refs], attrs); a ref is a value index, ("const", value) or ("py", value)
    outputs: list  # value indices
    alias: tuple | None = None  # (value index, input index): written into that input
    rand: tuple | None = None  # (dtype, lo, hi): a uniform draw output last, checked for its range
    special: float = 0.0
    seed: object = None
    features: set = field(default_factory=set)


class _Drawer:
    """Draws one recipe, computing eager values as it goes."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        r = rng
        # Now and then 16 or more on both axes, so the pointwise scheduler's 2-D tiles run.
        big = r.random() < 0.1
        self.rows = r.randint(16, 20) if big else r.choice([1, 2, 3, 4, 5])
        self.cols = r.randint(16, 40) if big else r.choice([1, 3, 4, 6, 8])
        self.special = r.choice([0.0, 0.0, 0.15, 0.4])
        self.vals: list[Val] = []
        self.inputs, self.steps, self.feeds = [], [], []
        self.features: set = set()

    # -- inputs -------------------------------------------------------------------
    def draw_inputs(self):
        r, R, C = self.rng, self.rows, self.cols
        for _ in range(r.randint(1, 3)):
            dt = r.choice(DTYPES)
            layout = r.choice(LAYOUTS)
            base = {"contig": (R, C), "transposed": (C, R), "strided": (R, 2 * C), "expand_rows": (1, C),
                    "expand_cols": (R, 1), "row": (C,), "col": (R,), "size1": (1, C)}[layout]
            x = _random_tensor(r, base, dt, self.special)
            if dt is DataType.BFloat16 and self.special and bool((x.abs() < torch.finfo(dt.torch).tiny).logical_and(x != 0).any()):
                self.features.add("bf16_subnormal")
            self.inputs.append(("tensor", dt, layout))
            self.feeds.append(x)
            full = {"transposed": lambda t: t.t(), "strided": lambda t: t[:, ::2],
                    "expand_rows": lambda t: t.expand(R, C), "expand_cols": lambda t: t.expand(R, C),
                    "row": lambda t: t.expand(R, C), "col": lambda t: t[:, None].expand(R, C),
                    "size1": lambda t: t.expand(R, C)}.get(layout, lambda t: t)
            self.vals.append(Val(full(x), dt, mag=_mag(full(x)), ops=frozenset({"in:" + layout})))
        for _ in range(r.choice([0, 0, 1, 2])):
            dt = r.choice([DataType.Double] * 4 + [DataType.Int] * 3 + [DataType.Bool])
            v = _random_scalar(r, dt, self.special)
            if dt is DataType.Bool:
                self.features.add("runtime_bool")
            self.inputs.append(("scalar", dt))
            self.feeds.append(v)
            self.vals.append(Val(v, dt, mag=_mag(v), scalar=True))

    # -- helpers ------------------------------------------------------------------
    def pick(self, want=lambda v: True, tensor=True):
        full = (self.rows, self.cols)
        cands = [i for i, v in enumerate(self.vals) if want(v) and (v.scalar and not tensor or
                                                                     not v.scalar and tuple(v.eager.shape) == full)]
        return self.rng.choice(cands) if cands else None

    def const(self, dt_kind):
        r = self.rng
        if dt_kind == "float":
            v = r.choice([2.0, 0.5, -1.5, 3.0, -0.0, 1e-3, 100.0] + ([math.nan, math.inf, -math.inf] if self.special else []))
        elif dt_kind == "int":
            v = r.choice([2, 3, -1, 0, 7])
        else:
            v = r.choice([True, False])
        return (r.choice(["const", "py"]), v)  # define_scalar(v), or v itself as the op's argument

    def operand(self, i_or_const):
        if isinstance(i_or_const, tuple):
            v = i_or_const[1]
            if isinstance(v, float) and v == 0 and math.copysign(1, v) < 0:
                self.features.add("neg_zero_const")
            return Val(v, DataType.Bool if isinstance(v, bool) else DataType.Int if isinstance(v, int)
                       else DataType.Double, mag=_mag(v), scalar=True, const=True)
        return self.vals[i_or_const]

    def second(self, first: Val, want=lambda v: True):
        """A second operand: a tensor, a runtime scalar or a constant."""
        r = self.rng.random()
        if r < 0.55:
            j = self.pick(want)
            if j is not None:
                return j
        if r < 0.8:
            j = self.pick(lambda v: v.scalar and want(v), tensor=False)
            if j is not None:
                return j
        kind = "float" if first.dtype.is_float else "int" if first.dtype in INTS else "bool"
        c = self.const(self.rng.choice([kind, kind, "float", "int"]))
        return c if want(self.operand(c)) else self.pick(want)

    # -- one step -----------------------------------------------------------------
    def add(self, op, refs, attrs=None, n_out=1):
        attrs = attrs or {}
        args = [self.operand(x) for x in refs]
        out = _eager(op, [a.eager for a in args], attrs)
        outs = list(out) if n_out == 2 else [out]
        self.steps.append((op, refs, attrs))
        tensors = [a for a in args if not a.scalar or not a.const]
        exact = all(a.exact for a in args) and op in EXACT_OPS and not (op in ("sum",) and outs[0].is_floating_point())
        rel_in = _emax([a.rel for a in args] + [0.0])
        mag = _emax([a.mag for a in args])
        overflow = False
        if op in AMPLIFY and not all(a.exact for a in args):
            rel_in = rel_in * mag
        if op == "lerp" and not all(a.exact for a in args):
            # start * (1 - weight) + end * weight: an error in start or end comes out times
            # up to 1 + |weight| (on the GPU a fused multiply-add makes one that is exactly
            # 0 in eager, end - start of equal values, the product's rounding residual)
            rel_in = rel_in * (1 + _emax([args[2].mag, torch.as_tensor(args[2].eager).double().abs()]))
        if op in REDUCE:  # a reduction's error is relative to its inputs' largest magnitude
            red = lambda t: torch.as_tensor(t).expand(args[0].eager.shape).amax(attrs["dims"], keepdim=attrs["keepdim"])  # noqa: E731
            rel_in, mag = red(rel_in), red(mag)
            if op in ("var", "var_mean"):
                mag = mag * mag
            if outs[0].is_floating_point():
                n = math.prod(args[0].eager.shape[d] for d in attrs["dims"])
                rel_in = rel_in * n + n * EPS.get(DataType.Float)
                # partial sums (products) that may overflow: NaN or inf then depends on the order
                big, top = max(float(mag.max()), 1e-300), torch.finfo(torch.float32).max / 2
                overflow = (n * math.log(big) >= math.log(top)) if op == "prod" else (
                    op not in ("max", "min") and big * n >= top)
                if op == "prod":  # small values whose partial product underflows to 0, and an
                    # infinity: NaN where they meet first, an infinity in another order
                    x = torch.as_tensor(args[0].eager).double().abs()
                    # (16-bit products are computed in fp32)
                    fi = torch.finfo(torch.float64 if outs[0].dtype == torch.float64 else torch.float32)
                    small = x[(x > 0) & (x < 1)]
                    overflow |= bool(x.isinf().any()) and float(small.log().sum()) <= math.log(fi.smallest_normal * fi.eps)
        if op == "lerp" and outs[0].is_floating_point():
            # end - (end - start) * (1 - weight): a product that may overflow where the
            # result does not, on one side of rounding only; and on the GPU end - start of
            # one overflowing product is its fused multiply-add's residual (inf, not nan)
            big = float(_emax([a.mag for a in args]).max())
            overflow = 2 * big * (big + 1) >= torch.finfo(outs[0].dtype).max / 4
        mag = _emax([mag] + [_mag(o) for o in outs])
        ops = frozenset().union(*[a.ops for a in tensors], {op})
        if overflow:
            ops = ops | {"overflow_inexact"}
        if op in POLE and not all(a.exact for a in args):
            ops = ops | {"pole_inexact"}
        if op in JUMP and not all(a.exact for a in args):
            ops = ops | {"jump_inexact"}
        if op in ZERO_SIGN and any(a.ops & LOOSE_ZERO and bool((torch.as_tensor(a.eager) == 0).any()) for a in args):
            ops = ops | {"zero_sign"}
        for o in outs:
            dt = _dtype_of(o)
            if dt is DataType.BFloat16 and bool(((o.abs() < torch.finfo(o.dtype).tiny) & (o != 0)).any()):
                self.features.add("bf16_subnormal")
            rel = 0.0 if exact else rel_in + EPS.get(dt, 0.0) * (2 if op not in EXACT_OPS else 1)
            self.vals.append(Val(o, dt, exact=exact, rel=rel, mag=mag, ops=ops))
        return len(self.vals) - 1

    def bcast_back(self, i, dims, keepdim):
        """A reduction result broadcast back to [rows, cols]."""
        v = self.vals[i]
        kept = [d for d in (0, 1) if d not in dims]
        bdims = [0, 1] if keepdim else kept
        self.steps.append(("bcast", [i], {"bdims": bdims}))
        shape = [self.rows if 0 in kept else 1, self.cols if 1 in kept else 1]
        back = lambda t: torch.as_tensor(t).reshape(shape).expand(self.rows, self.cols)  # noqa: E731
        self.vals.append(Val(back(v.eager), v.dtype, v.exact, back(torch.as_tensor(v.rel).expand(v.eager.shape)),
                             back(v.mag), v.ops | {"bcast"}))

    def step(self):
        r = self.rng
        kind = r.choice(["smooth", "exact", "pred", "arith", "arith", "arith", "compare", "logic", "where",
                         "cast", "cast", "reduce", "reduce", "clamp", "lerp", "bitwise_not"])
        saved = len(self.steps), len(self.vals), set(self.features)
        try:
            getattr(self, "_" + kind)()
        except RuntimeError:  # torch refuses the draw (an integer scalar out of its tensor's range): undo it
            del self.steps[saved[0]:], self.vals[saved[1]:]
            self.features = saved[2]

    def _smooth(self):
        i = self.pick(lambda v: v.dtype is not DataType.Bool or True)
        op = self.rng.choice(UNARY_SMOOTH)
        if op == "silu" and not self.vals[i].dtype.is_float:
            op = "sigmoid"
        self.add(op, [i])

    def _exact(self):
        op = self.rng.choice(UNARY_EXACT)
        i = self.pick(lambda v: v.dtype is not DataType.Bool and (v.exact or op in ("neg", "abs")))
        if i is not None:
            if op == "neg":
                self.features.add("neg")
            self.add(op, [i])

    def _pred(self):
        i = self.pick(lambda v: v.exact)
        if i is not None:
            self.add(self.rng.choice(UNARY_PRED), [i])

    def _bitwise_not(self):
        i = self.pick(lambda v: not v.dtype.is_float)
        if i is not None:
            self.add("bitwise_not", [i])

    def _arith(self):
        op = self.rng.choice(ARITH)
        num = lambda v: v.dtype is not DataType.Bool  # noqa: E731
        if op == "pow" and self.rng.random() < 0.1:
            i = self.pick(lambda v: v.dtype is DataType.Bool)
            if i is not None:
                self.features.add("bool_pow")
                self.add("pow", [i, ("const", self.rng.random() < 0.5)])
                return
        i = self.pick(num)
        if i is None:
            return
        a = self.vals[i]
        if op == "pow" and _is_int(a):
            if self.rng.random() < 0.5:  # constant exponent, sometimes beyond 0..8
                self.features.add("int_pow")
                j = ("const", self.rng.choice([0, 1, 2, 3, 8, 9, 12]))
            else:  # a tensor exponent 0..3: remainder by 4 is never negative
                j = self.add("remainder", [self.pick(_is_int), ("const", 4)])
                self.features.add("int_pow")
        elif op in ("div", "fmod", "remainder", "pow", "atan2") and _is_int(a):
            j = self.second(a, lambda v: v.dtype is not DataType.Bool)
            if _is_int(self.operand(j)) and op != "pow":  # never divide an integer by 0 or -1
                j = self._safe_divisor(j)
            if op == "pow":
                j = ("const", 2.5)
        else:
            j = self.second(a, num)
        if j is None:
            return
        b = self.operand(j)
        if op == "div" and _is_int(a) and _is_int(b):
            self.features.add("int_div")
        if op == "atan2" and b.scalar:
            j = self.pick(num)
        self.add(op, [i, j], {"int": _is_int(a) and _is_int(b)} if op == "div" else None)

    def _safe_divisor(self, j):
        """where(|b| <= 1, 3, b): an integer divisor that is never 0 or -1 (or INT_MIN)."""
        b = self.operand(j)
        if b.scalar:
            return ("const", 3) if abs(b.eager) <= 1 or b.eager == -2**63 else j
        k = self.add("abs", [j])
        k = self.add("le", [k, ("const", 1)])
        return self.add("where", [k, ("const", 3), j])

    def _compare(self):
        i = self.pick(lambda v: v.exact)
        if i is not None:
            j = self.second(self.vals[i], lambda v: v.exact)
            if j is not None:
                self.add(self.rng.choice(COMPARE), [i, j])

    def _logic(self):
        op = self.rng.choice(LOGIC)
        want = (lambda v: v.exact) if op.startswith("logical") else (lambda v: not v.dtype.is_float)
        i = self.pick(want)
        if i is None:
            return
        if op.startswith("bitwise"):  # both bools or both integers
            same = (lambda v: v.dtype is DataType.Bool) if self.vals[i].dtype is DataType.Bool else _is_int
            j = self.second(self.vals[i], same)
        else:
            j = self.second(self.vals[i], want)
        if j is None:
            return
        b = self.operand(j)
        uniform = {"bcast", "in:row", "in:col", "in:expand_rows", "in:expand_cols", "in:size1"}
        if op in ("bitwise_and", "bitwise_or", "logical_and", "logical_or") and (
                b.scalar or (b.ops | self.vals[i].ops) & uniform):
            self.features.add("logic_uniform")
        if b.const and _is_int(b) and self.vals[i].dtype is DataType.Int32 and self.rng.random() < 0.3:
            j = ("const", self.rng.choice([2**40, -2**35]))
            self.features.add("int_const_range")
        self.add(op, [i, j])

    def _where(self):
        c = self.pick(lambda v: v.dtype is DataType.Bool and v.exact)
        if c is None:
            i = self.pick(lambda v: v.exact)
            if i is None:
                return
            c = self.add("ne", [i, self.second(self.vals[i], lambda v: v.exact)])
        a = self.pick()
        b = self.second(self.vals[a])
        if self.rng.random() < 0.5:
            a, b = b, a
        if isinstance(a, tuple) and isinstance(b, tuple):
            return
        self.add("where", [c, a, b])

    def _cast(self):
        dt = self.rng.choice(DTYPES)
        i = self.pick()
        v = self.vals[i]
        if v.dtype.is_float and not dt.is_float:
            if dt is DataType.Bool and not v.exact:
                return
            if dt is not DataType.Bool:  # float -> int of NaN, inf or out of range is undefined: clamp first
                if not v.exact:
                    return
                k = self.add("isnan", [i])
                i = self.add("where", [k, ("const", 0.0), i])
                i = self.add("clamp", [i], {"lo": -1000.0, "hi": 1000.0})
        self.add("cast", [i], {"dtype": dt})

    def _clamp(self):
        i = self.pick(lambda v: v.dtype is not DataType.Bool)
        if i is None:
            return
        lo = self.rng.choice([-1.0, 0.0, -2.5]) if self.vals[i].dtype.is_float else self.rng.choice([-3, 0])
        self.add("clamp", [i], {"lo": lo, "hi": lo + self.rng.choice([1, 2, 4])})

    def _lerp(self):
        i = self.pick(lambda v: v.dtype.is_float)
        if i is None:
            return
        dt = self.vals[i].dtype
        j = self.pick(lambda v: v.dtype is dt)
        w = self.pick(lambda v: v.dtype is dt) if self.rng.random() < 0.5 else ("const", self.rng.choice([0.25, 0.5, 1.5]))
        self.add("lerp", [i, j, w])

    def _reduce(self):
        op = self.rng.choice(REDUCE)
        if op in ("var", "var_mean"):
            i = self.pick(lambda v: v.dtype.is_float)
        elif op in ("max", "min", "prod"):
            i = self.pick(lambda v: v.dtype is not DataType.Bool)
        else:
            i = self.pick()
        if i is None:
            return
        dims = self.rng.choice([[0], [1], [1], [0, 1]])
        keepdim = self.rng.random() < 0.5
        attrs = {"dims": dims, "keepdim": keepdim}
        if op in ("var", "var_mean"):
            attrs["correction"] = self.rng.choice([0, 1])
            if self.special:
                self.features.add("var_special")
        if op == "var_mean":
            self.add(op, [i], attrs, n_out=2)
            first = len(self.vals) - 2
            if self.rng.random() < 0.3:
                self.reduced_outs.append(first + self.rng.randint(0, 1))
            self.bcast_back(first, dims, keepdim)
            self.bcast_back(first + 1, dims, keepdim)
        else:
            k = self.add(op, [i], attrs)
            if self.rng.random() < 0.3:
                self.reduced_outs.append(k)
            self.bcast_back(k, dims, keepdim)

    # -- the whole recipe ---------------------------------------------------------
    def draw(self, seed) -> Recipe:
        self.reduced_outs = []
        self.draw_inputs()
        n_in = len(self.vals)
        target = self.rng.randint(1, 7)
        for _ in range(40):  # some kinds find no operand they accept: draw again
            if len(self.steps) >= target:
                break
            self.step()
        full = [i for i in range(n_in, len(self.vals)) if not self.vals[i].scalar and
                tuple(self.vals[i].eager.shape) == (self.rows, self.cols)]
        if not full:
            full = [self.add("abs" if self.vals[0].dtype is not DataType.Bool else "logical_not", [0])]
        outs = sorted(set(self.rng.sample(full, min(len(full), self.rng.randint(1, 3)))))
        if self.reduced_outs:
            self.features.add("reduction_and_other_shape")
        outs = sorted(set(outs) | set(self.reduced_outs))
        alias = None
        if self.rng.random() < 0.08:
            cands = [k for k, inp in enumerate(self.inputs) if inp[0] == "tensor" and inp[2] == "contig"]
            ok = [o for o in outs if self.vals[o].eager.shape == (self.rows, self.cols)]
            if cands and ok:
                k, o = self.rng.choice(cands), self.rng.choice(ok)
                if self.vals[o].dtype is self.inputs[k][1]:
                    alias = (o, k)
                    self.features.add("alias")
        rand = None
        if self.rng.random() < 0.1:
            lo = self.rng.choice([0.0, -1.0, 2.0])
            rand = (self.rng.choice(FLOATS), lo, lo + self.rng.choice([1.0, 0.5, 3.0]))
            if rand[0] is not DataType.Float:
                self.features.add("uniform_16bit")
        return Recipe(self.rows, self.cols, self.inputs, self.steps, outs, alias, special=self.special, seed=seed,
                      features=self.features,
                      rand=rand)


def _dtype_of(x) -> DataType:
    from pyfuser.ir.dtypes import from_torch
    return from_torch(x.dtype) if isinstance(x, torch.Tensor) else DataType.Double


def draw(seed, index, avoid_known=False) -> tuple[Recipe, list, list[Val]]:
    """Fusion ``index`` of run ``seed``: its recipe, its inputs and its eager values.
    ``avoid_known`` draws again until the fusion holds no feature of a known bug, so
    those bugs hide nothing else."""
    for again in range(100):
        d = _Drawer(random.Random(f"{seed}:{index}" + (f":{again}" if again else "")))
        rec = d.draw((seed, index))
        if not avoid_known or not rec.features & set(KNOWN):
            break
    return rec, d.feeds, d.vals


def build(rec: Recipe) -> FusionDefinition:
    """The FusionDefinition of a recipe."""
    R, C = rec.rows, rec.cols
    with FusionDefinition() as fd:
        vals = []
        for inp in rec.inputs:
            if inp[0] == "scalar":
                vals.append(fd.define_scalar(dtype=inp[1]))
                continue
            _, dt, layout = inp
            if layout in ("row", "col"):
                x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dt)
                vals.append(fd.ops.broadcast_in_dim(x, shape=[R, C], broadcast_dims=[1 if layout == "row" else 0]))
            elif layout == "size1":
                x = fd.define_tensor(shape=[1, -1], contiguity=[None, True], dtype=dt)
                vals.append(fd.ops.broadcast_in_dim(x, shape=[R, C], broadcast_dims=[0, 1]))
            else:
                contig = layout == "contig"
                vals.append(fd.define_tensor(shape=[-1, -1], contiguity=[contig, contig], dtype=dt))
        for op, refs, attrs in rec.steps:
            args = [vals[x] if not isinstance(x, tuple) else x[1] if x[0] == "py" else fd.define_scalar(x[1])
                    for x in refs]
            if op == "bcast":
                vals.append(fd.ops.broadcast_in_dim(args[0], shape=[R, C], broadcast_dims=attrs["bdims"]))
            elif op == "cast":
                vals.append(fd.ops.cast(args[0], dtype=attrs["dtype"]))
            elif op == "clamp":
                vals.append(fd.ops.clamp(args[0], fd.define_scalar(attrs["lo"]), fd.define_scalar(attrs["hi"])))
            elif op in ("sum", "prod", "max", "min"):
                vals.append(getattr(fd.ops, op)(args[0], dims=attrs["dims"], keepdim=attrs["keepdim"]))
            elif op == "var":
                vals.append(fd.ops.var(args[0], dims=attrs["dims"], correction=attrs["correction"],
                                       keepdim=attrs["keepdim"]))
            elif op == "var_mean":
                vals.extend(fd.ops.var_mean(args[0], dims=attrs["dims"], correction=attrs["correction"],
                                            keepdim=attrs["keepdim"]))
            else:
                vals.append(getattr(fd.ops, op)(*args))
        for o in rec.outputs:
            if rec.alias is None or o != rec.alias[0]:
                fd.add_output(vals[o])
        if rec.alias is not None:
            fd.add_output(vals[rec.alias[0]], alias_input=vals[rec.alias[1]])
        if rec.rand is not None:
            dt, lo, hi = rec.rand
            fd.add_output(fd.ops.uniform(fd.define_scalar(lo), fd.define_scalar(hi), shape=[R, C], dtype=dt))
    return fd


# Known bugs: feature -> (the kinds of difference it causes, reason).  A difference of
# those kinds in a fusion holding the feature is counted as that bug's; once a fix
# merges, delete its row and the fusions holding it must pass.
KNOWN: dict = {}


def tol(v: Val) -> torch.Tensor:
    """The elementwise bound on |pyfuser - eager| for a float value: its error bound (at
    least a unit of its dtype, doubled: either side may round) times the largest
    magnitude along its chain at that element, at least the smallest normal number."""
    shape = v.eager.shape
    rel = _emax([v.rel, EPS.get(v.dtype, 0.0)]).expand(shape) * 2
    return rel * _emax([v.mag, v.eager.double().abs().nan_to_num(0.0, 0.0, 0.0)]).expand(shape) + \
        torch.finfo(v.eager.dtype).tiny

ZERO_SIGN_TAG = (" (documented: the sign of a zero from max, min or clamp, -0.0 below +0.0 as nvFuser's kernels "
                 "order it where eager's CPU loops may keep either, taken by an op that tells the zeros apart)")


def compare(got, want: Val, name: str) -> list[str]:
    """What differs between a pyfuser output and its eager value ([] if nothing)."""
    w = want.eager
    if got.dtype != w.dtype or tuple(got.shape) != tuple(w.shape):
        return [("dtype", f"{name}: dtype/shape {got.dtype}{list(got.shape)}, eager {w.dtype}{list(w.shape)}")]
    if not w.is_floating_point():
        bad = got != w
        return [("int", f"{name}: {int(bad.sum())} of {w.numel()} differ: got {got[bad][:4].tolist()} eager {w[bad][:4].tolist()}")] if bad.any() else []
    g, e = got.double(), w.double()
    gn, en = torch.isnan(g), torch.isnan(e)
    if (gn != en).any():
        tag = (ZERO_SIGN_TAG if "zero_sign" in want.ops else
               " (numerical: a pole met by an inexact value)" if "pole_inexact" in want.ops else
               " (numerical: partial sums or products that overflow, in another order)"
               if "overflow_inexact" in want.ops else "")
        return [("nan", f"{name}: NaN positions differ{tag}: got {g[gn != en][:4].tolist()} eager {e[gn != en][:4].tolist()}")]
    ok = ~gn
    bound = tol(want)
    rtol = float((bound / (e.abs() + 1)).max())
    g, e, bound = g[ok], e[ok], bound[ok]
    inf = torch.isinf(e) | torch.isinf(g)
    if (g[inf] != e[inf]).any():
        # An inexact value may round past the dtype's largest finite number on one side only.
        gi, ei = g[inf], e[inf]
        off = gi != ei
        top = torch.finfo(w.dtype).max / (1 + 4 * rtol)
        gi, ei = gi[off], ei[off]
        near = (gi.isinf() & ei.isfinite() & (ei.abs() >= top)) | (ei.isinf() & gi.isfinite() & (gi.abs() >= top))
        tag = (" (numerical: overflow of an inexact value)" if not want.exact and bool(near.all()) else
               ZERO_SIGN_TAG if "zero_sign" in want.ops else
               " (numerical: partial sums or products that overflow, in another order)"
               if "overflow_inexact" in want.ops else
               " (numerical: a pole met by an inexact value)" if "pole_inexact" in want.ops else "")
        return [("inf", f"{name}: infinities differ{tag}: got {gi[:4].tolist()} eager {ei[:4].tolist()}")]
    g, e, bound = g[~inf], e[~inf], bound[~inf]
    bad = (g - e).abs() > bound
    if want.exact:
        bad |= g != e
    if bad.any():
        tag = (ZERO_SIGN_TAG if "zero_sign" in want.ops else
               " (numerical: an inexact value near a jump of remainder or fmod)" if "jump_inexact" in want.ops else "")
        return [("value", f"{name}: {int(bad.sum())} of {w.numel()} beyond their bounds {bound[bad][:4].tolist()} "
                f"({'exact' if want.exact else 'inexact'}){tag}: got {g[bad][:4].tolist()} eager {e[bad][:4].tolist()}")]
    if want.exact and not (want.ops & LOOSE_ZERO):
        z = (e == 0) & (g == 0)
        if (torch.signbit(g[z]) != torch.signbit(e[z])).any():
            return [("zero", f"{name}: sign of zero differs: got {g[z].tolist()[:4]} eager {e[z].tolist()[:4]}")]
    return []


def run_one(seed, index, avoid_known=False, device="cpu"):
    """(recipe, differences, n_ops): the differences are (kind, text), an exception's too.
    ``device``: where pyfuser runs the fusion ("cuda": compiled kernels, libdevice, the
    GPU's tile choices); eager's values are always computed on the CPU."""
    rec, feeds, vals = draw(seed, index, avoid_known)
    feeds_for_fd = [f.to(device, copy=True) if isinstance(f, torch.Tensor) else f for f in feeds]
    layouts = [inp[2] if inp[0] == "tensor" else None for inp in rec.inputs]
    args = []
    for f, layout in zip(feeds_for_fd, layouts):
        R, C = rec.rows, rec.cols
        args.append({"transposed": lambda t: t.t(), "strided": lambda t: t[:, ::2],
                     "expand_rows": lambda t: t.expand(R, C), "expand_cols": lambda t: t.expand(R, C)}
                    .get(layout, lambda t: t)(f))
    diffs = []
    try:
        fd = build(rec)
        got = fd.execute(args)
    except Exception as err:  # noqa: BLE001 - every failure is reported and classified
        return rec, [("crash", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")], len(rec.steps)
    returned = [o for o in rec.outputs if rec.alias is None or o != rec.alias[0]]
    if rec.rand is not None and len(got) == len(returned) + 1:
        diffs += _check_uniform(got[-1], *rec.rand)
        got = got[:-1]
    if len(got) != len(returned):
        return rec, diffs + [("count", f"{len(got)} outputs returned, expected {len(returned)}")], len(rec.steps)
    for k, (g, o) in enumerate(zip(got, returned)):
        diffs += compare(g.cpu(), vals[o], f"output {k} (value {o})")
    if rec.alias is not None:
        diffs += compare(args[rec.alias[1]].cpu(), vals[rec.alias[0]], f"aliased input {rec.alias[1]}")
    return rec, diffs, len(rec.steps)


def _check_uniform(got, dt: DataType, lo: float, hi: float) -> list:
    """A uniform draw has no eager twin; it must lie in [lo, hi) in its own dtype."""
    if got.dtype != dt.torch:
        return [("dtype", f"uniform: dtype {got.dtype}, expected {dt.torch}")]
    bad = ~((got >= lo) & (got < hi))
    return [("value", f"uniform({lo}, {hi}) in {dt}: {int(bad.sum())} outside [lo, hi): "
                      f"{got[bad][:4].tolist()}")] if bad.any() else []


def classify(rec: Recipe, diffs: list) -> str:
    """'ok', 'numerical' (every difference is one the error model allows for: see
    ``compare``), 'documented' (numerical or where pyfuser follows nvFuser's documented
    semantics rather than eager's CPU loops), 'known:<feature>' (every difference is of
    a kind a known bug of the fusion causes) or 'new'."""
    if not diffs:
        return "ok"
    for feat, (kinds, _) in KNOWN.items():
        if feat in rec.features and all(k in kinds or "(numerical" in t for k, t in diffs):
            return "known:" + feat
    if all("(numerical" in text for _, text in diffs):
        return "numerical"
    if all("(numerical" in text or "(documented" in text for _, text in diffs):
        return "documented"
    return "new"


def show(rec: Recipe) -> str:
    return repr(build(rec)) + f"\n# inputs: {rec.inputs}\n# alias: {rec.alias}"


def _run_slice(seed, indices, avoid_known, device, show_each, deadline=None):
    """Run fusions ``indices`` (those it reaches before ``deadline``, a ``time.time()``):
    (counts, n_ops, report lines)."""
    warnings.filterwarnings("ignore")  # NaN and overflow in the interpreter's numpy are the point
    counts, n_ops, lines = {}, 0, []
    for i in indices:
        if deadline is not None and time.time() > deadline:
            break
        try:
            rec, diffs, n = run_one(seed, i, avoid_known, device)
        except Exception:  # a bug of the generator itself
            lines.append(f"[{i}] generator error:\n{traceback.format_exc()}")
            counts["generator"] = counts.get("generator", 0) + 1
            continue
        n_ops += n
        cls = classify(rec, diffs)
        counts[cls] = counts.get(cls, 0) + 1
        if cls != "ok":
            lines.append(f"[{i}] {cls}: " + "; ".join(f"{kind}: {t}" for kind, t in diffs))
            if show_each:
                lines.append(show(rec))
    return counts, n_ops, lines


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tests.segment.eager_fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", default="0")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--only", type=int, default=None, help="run fusion INDEX only")
    p.add_argument("--show", action="store_true", help="print each failing fusion's definition")
    p.add_argument("--avoid-known", action="store_true", help="draw only fusions without a known bug's feature")
    p.add_argument("--device", default="cpu", help="where pyfuser runs the fusions: cpu (Triton's interpreter) "
                                                   "or cuda (compiled kernels)")
    p.add_argument("--workers", type=int, default=1, help="worker processes sharing the fusions")
    p.add_argument("--seconds", type=float, default=None, help="stop starting fusions after this long; the summary "
                                                               "counts those run")
    a = p.parse_args(argv)
    idx = [a.only] if a.only is not None else list(range(a.start, a.start + a.count))
    t0 = time.time()
    deadline = None if a.seconds is None else t0 + a.seconds
    if a.workers == 1:
        results = [_run_slice(a.seed, idx, a.avoid_known, a.device, a.show, deadline)]
    else:
        import multiprocessing as mp

        chunks = [idx[k:k + 25] for k in range(0, len(idx), 25)]
        with mp.get_context("spawn").Pool(a.workers) as pool:
            results = pool.starmap(_run_slice, [(a.seed, c, a.avoid_known, a.device, a.show, deadline)
                                                for c in chunks], chunksize=1)
    counts, n_ops = {}, 0
    for c, n, lines in results:
        n_ops += n
        for k, v in c.items():
            counts[k] = counts.get(k, 0) + v
        for line in lines:
            print(line, flush=True)
    print(f"eager fuzz seed={a.seed} device={a.device}: {sum(counts.values())} fusions, {n_ops} ops, {time.time() - t0:.0f} s: "
          + ", ".join(f"{c}={v}" for c, v in sorted(counts.items())), flush=True)
    return 1 if counts.get("new") or counts.get("generator") else 0


if __name__ == "__main__":
    sys.exit(main())
