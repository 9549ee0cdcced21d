"""Extents: tensor sizes as values of a fusion, and the shape arguments made of them.

nvFuser's ``fd.ops.size(T, dim)``, ``fd.ops.shape(T)``, ``fd.ops.at(V, index)`` and
``fd.define_vector(...)`` make Int scalars and vectors that stand for sizes; scalar
arithmetic on them is an extent too.  They go where nvFuser takes them::

    n = fd.ops.mul(fd.ops.size(t, 0), fd.ops.size(t, 1))
    flat = fd.ops.reshape(t, [n, fd.ops.size(t, 2)])        # a shape argument
    ones = fd.ops.full(fd.ops.shape(t), 1.0, DataType.Float)  # a whole vector
    mean = fd.ops.div(fd.ops.sum(t, [2]), fd.ops.size(t, 2))  # kernel math

How they resolve: a symbolic dim has no size before ``execute`` binds the inputs, so
``concretize`` evaluates the extent exprs (``FusionIR.extent_exprs``) in program order
between the tensor shape rules, from the inputs' sizes, constants and runtime scalar
inputs.  Kernels never bake an extent into their source: one that reaches kernel
math is a scalar argument, and a shape made of extents reaches a kernel as size
arguments, like any shape.  The launch cache keys on the inputs' sizes and on the
values of the scalar inputs that shapes depend on (``FusionIR.shape_scalar_inputs``),
so no cached launch reuses a stale size.

Scalar arithmetic on runtime scalar inputs alone (Adam's ``1 - beta1``) is not an
extent, but it resolves the same way: binding evaluates it with ``evaluate``, a cached
launch recomputes it from each execute's inputs (``ScalarProgram``), and kernels take
the results as scalar arguments.

At definition time ``known`` (on ScalarVal and VectorVal) holds what the definition
fixes (the size of a dim declared with a concrete extent, constants); shape inference
uses it, and None means unknown until execute.
"""
from __future__ import annotations

import operator

import torch

from ..errors import DefinitionError, InputError
from .dtypes import DataType
from .ops import OPS, OpKind
from .values import Expr, FusionIR, ScalarVal, TensorVal, Val, VectorVal


def is_extent(v) -> bool:
    """Whether ``v`` is an extent value: a vector, or a scalar an extent expr made."""
    if isinstance(v, VectorVal):
        return True
    return isinstance(v, ScalarVal) and v.definition is not None and v.definition.extent


def known(v: Val):
    """What the definition knows of a scalar or vector value (None: not until execute)."""
    return v.known


# --- evaluation -----------------------------------------------------------------------


def _scalar_tensor(x, v: ScalarVal):
    """A 0-d tensor for a scalar operand: fp32/fp16/bf16 scalars compute in fp64, like
    Python numbers do in eager."""
    dt = torch.float64 if v.dtype.name in ("Float", "Half", "BFloat16") else v.dtype.torch
    return torch.tensor(x, dtype=dt)


def scalar_result(e: Expr, args: list):
    """All-scalar arithmetic (``args`` are Python numbers), as torch computes it on
    0-d tensors; a Python number back."""
    exact = _EXACT_FP64.get(e.op)
    if exact is not None:
        operands = _fp64_operands(e, args)
        if operands is not None:
            r = exact(*operands)
            if r is not None:
                return r
    ts = [_scalar_tensor(x, v) for x, v in zip(args, e.inputs)]
    try:
        r = ts[0].to(e.attrs["dtype"].torch) if e.op == "cast" else OPS[e.op].ref(*ts)
    except RuntimeError as err:
        if "ZeroDivisionError" not in str(err):
            raise
        operands = ", ".join(f"{v.name}={x!r}" for v, x in zip(e.inputs, args))
        raise InputError(f"{e.op}: integer division by zero in scalar arithmetic ({operands})") from None
    return r.item()


def _div(a: float, b: float):
    return a / b if b != 0 else None


# Python floats are IEEE doubles, as fp64 tensors are, and these ops are correctly
# rounded in both: on fp64 operands Python gives torch's result bit for bit (signed
# zeros, infinities and NaNs alike) without building 0-d tensors (about 10 us an op,
# paid by every execute that computes scalars).  None: a case where Python raises and
# torch returns inf or NaN (a zero divisor), left to torch.  Not sqrt: torch's CPU
# fp64 sqrt is not correctly rounded on every host (torch 2.13 on one x86 host gives
# sqrt(2.0) and sqrt(2**53) an ulp below ``math.sqrt``), so it stays torch's.
_EXACT_FP64 = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": _div, "truediv": _div,
               "neg": operator.neg, "abs": abs}
# Per operand dtype: 0 for a float scalar (computed in fp64, see ``_scalar_tensor``),
# the bound of an int scalar; other dtypes (Bool) are left to torch.
_FP64_OPERAND = {DataType.Double: 0, DataType.Float: 0, DataType.Half: 0, DataType.BFloat16: 0,
                 DataType.Int: 2**63, DataType.Int32: 2**31}


def _fp64_operands(e: Expr, args: list):
    """``args`` as Python floats when torch computes ``e`` in fp64: each operand a
    float scalar or an in-range int beside a float one (converted to fp64, rounded as
    Python rounds it); else None."""
    out, any_float = [], False
    for x, v in zip(args, e.inputs):
        bound = _FP64_OPERAND.get(v.dtype)
        t = type(x)
        if bound == 0:  # a float scalar: a float, or an int (a Float input may be given one)
            any_float = True
            if t is not float and not (t is int and -2**63 <= x < 2**63):
                return None
        elif bound is None or t is not int or not -bound <= x < bound:
            return None
        out.append(float(x))
    return out if any_float else None


def evaluate(e: Expr, args: list) -> list:
    """The outputs of an extent expr or of scalar arithmetic; a tensor argument is
    given as its shape (a tuple)."""
    row = OPS[e.op]
    if row.kind is OpKind.EXTENT:
        return [row.ref(*args, **e.attrs)]
    return [scalar_result(e, args)]


def infer_known(e: Expr):
    """The definition-time value of an extent expr's output, or None.  Size ops take
    partly known shapes (an unknown dim gives None); arithmetic needs every operand."""
    args = [v.shape if isinstance(v, TensorVal) else known(v) for v in e.inputs]
    if OPS[e.op].kind is not OpKind.EXTENT and any(a is None for a in args):
        return None
    try:
        (r,) = evaluate(e, args)
    except (RuntimeError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None  # e.g. a remainder by zero: execute raises it
    return r


# --- runtime scalars ----------------------------------------------------------------------


class ScalarProgram:
    """The scalar values kernels read that change between executes with the same
    input sizes: runtime scalar inputs and the scalar arithmetic on them (``1 - beta1``,
    ``sqrt(c2)``), evaluated on the host once per execute, as binding evaluates them,
    and passed to kernels as scalar arguments.

    Built once for one input fingerprint (a cached ``runtime.program.Program``) from the ``wanted``
    scalars, with the binding's ``values``: a wanted scalar that depends on no runtime
    scalar input (a constant, an extent, arithmetic on those) keeps its bound value and
    is not in ``targets``.  ``run(inputs)`` returns the targets' values, in order;
    ``item_positions`` are the inputs given as 0-d tensors (read with ``.item()``)."""

    def __init__(self, ir: FusionIR, wanted, values: dict, item_positions=()):
        runtime = {v: p for p, v in enumerate(ir.inputs) if isinstance(v, ScalarVal)}
        needed = set(wanted)
        exprs = []
        for e in reversed(ir.exprs):  # the scalar arithmetic ``wanted`` depends on
            if any(o in needed for o in e.outputs):
                exprs.append(e)
                needed.update(e.inputs)
        slot: dict = {}
        init, self._loads, self._steps = [], [], []

        def slot_of(v):
            if v not in slot:
                slot[v] = len(init)
                init.append(values.get(v))
            return slot[v]

        varying = set()
        for v, p in runtime.items():
            if v in needed:
                self._loads.append((p, slot_of(v), p in item_positions))
                varying.add(v)
        for e in exprs[::-1]:
            if any(v in varying for v in e.inputs):
                args = tuple(slot_of(v) for v in e.inputs)
                self._steps.append((e, args, slot_of(e.outputs[0])))
                varying.add(e.outputs[0])
        self.targets = [v for v in dict.fromkeys(wanted) if v in varying]
        self._out = tuple(slot[v] for v in self.targets)
        self._init = init

    def run(self, inputs) -> list:
        vals = self._init.copy()
        for p, s, item in self._loads:
            vals[s] = inputs[p].item() if item else inputs[p]
        for e, args, s in self._steps:
            vals[s] = scalar_result(e, [vals[i] for i in args])
        return [vals[s] for s in self._out]


# --- shape arguments ---------------------------------------------------------------------


def spell(spec) -> str:
    if isinstance(spec, Val):
        return spec.name
    return "[" + ", ".join(x.name if isinstance(x, Val) else repr(x) for x in spec) + "]"


def spec_length(spec) -> int:
    return spec.length if isinstance(spec, VectorVal) else len(spec)


def _entries(spec, value_of) -> tuple[list, list]:
    """A shape or index argument's values (None: not known yet) and the names to report
    them by (None for a literal int)."""
    if isinstance(spec, VectorVal):
        vals = value_of(spec)
        entries = list(vals) if vals is not None else [None] * spec.length
        return entries, [f"{spec.name}[{i}]" for i in range(spec.length)]
    return ([x if isinstance(x, int) else value_of(x) for x in spec],
            [x.name if isinstance(x, Val) else None for x in spec])


def resolve_shape(op: str, arg: str, spec, value_of=known, allow_neg1=False) -> tuple:
    """The extents a shape argument names: a VectorVal, or a tuple of ints and Int
    scalars.  ``value_of`` gives a scalar's or vector's value (``known`` at definition
    time, where None stands for an extent not known yet; the bound value at execute)."""
    entries, names = _entries(spec, value_of)
    low = -1 if allow_neg1 else 0
    for i, (x, name) in enumerate(zip(entries, names)):
        if x is None:
            continue
        if isinstance(x, float) and x.is_integer():  # a floating scalar, cast as nvFuser casts it
            x = entries[i] = int(x)
        if not isinstance(x, int) or isinstance(x, bool) or x < low:
            want = "an int >= 0" + (" or -1" if allow_neg1 else "")
            want += ", a whole number" if isinstance(x, float) else ""
            what = f"entry {i} ({name})" if name else f"entry {i}"
            raise DefinitionError(f"{op}: {arg} {spell(spec)} {what} is {x!r}, expected {want}")
    return tuple(entries)


def resolve_indices(op: str, arg: str, spec, value_of=known) -> tuple:
    """The ints an index argument names (slice's indices and strides, pad's widths):
    like ``resolve_shape``, but any int is an index (a negative one counts from the
    end, a negative width crops); None for one not known yet."""
    entries, names = _entries(spec, value_of)
    for i, (x, name) in enumerate(zip(entries, names)):
        if x is not None and (not isinstance(x, int) or isinstance(x, bool)):
            what = f"entry {i} ({name})" if name else f"entry {i}"
            raise DefinitionError(f"{op}: {arg} {spell(spec)} {what} is {x!r}, expected an int")
    return tuple(entries)
