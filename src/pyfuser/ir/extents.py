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

At definition time ``known`` (on ScalarVal and VectorVal) holds what the definition
fixes (the size of a dim declared with a concrete extent, constants); shape inference
uses it, and None means unknown until execute.
"""
from __future__ import annotations

import torch

from ..errors import DefinitionError
from .ops import OPS
from .values import Expr, ScalarVal, TensorVal, Val, VectorVal


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
    ts = [_scalar_tensor(x, v) for x, v in zip(args, e.inputs)]
    r = ts[0].to(e.attrs["dtype"].torch) if e.op == "cast" else OPS[e.op].ref(*ts)
    return r.item()


def evaluate(e: Expr, args: list) -> list:
    """The outputs of an extent expr or of scalar arithmetic; a tensor argument is
    given as its shape (a tuple)."""
    row = OPS[e.op]
    if row.kind == "extent":
        return [row.ref(*args, **e.attrs)]
    return [scalar_result(e, args)]


def infer_known(e: Expr):
    """The definition-time value of an extent expr's output, or None.  Size ops take
    partly known shapes (an unknown dim gives None); arithmetic needs every operand."""
    args = [v.shape if isinstance(v, TensorVal) else known(v) for v in e.inputs]
    if OPS[e.op].kind != "extent" and any(a is None for a in args):
        return None
    try:
        (r,) = evaluate(e, args)
    except (RuntimeError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None  # e.g. a remainder by zero: execute raises it
    return r


# --- shape arguments ---------------------------------------------------------------------


def spell(spec) -> str:
    if isinstance(spec, Val):
        return spec.name
    return "[" + ", ".join(x.name if isinstance(x, Val) else repr(x) for x in spec) + "]"


def spec_length(spec) -> int:
    return spec.length if isinstance(spec, VectorVal) else len(spec)


def resolve_shape(op: str, arg: str, spec, value_of=known, allow_neg1=False) -> tuple:
    """The extents a shape argument names: a VectorVal, or a tuple of ints and Int
    scalars.  ``value_of`` gives a scalar's or vector's value (``known`` at definition
    time, where None stands for an extent not known yet; the bound value at execute)."""
    if isinstance(spec, VectorVal):
        vals = value_of(spec)
        entries = list(vals) if vals is not None else [None] * spec.length
        names = [f"{spec.name}[{i}]" for i in range(spec.length)]
    else:
        entries = [x if isinstance(x, int) else value_of(x) for x in spec]
        names = [x.name if isinstance(x, Val) else None for x in spec]
    low = -1 if allow_neg1 else 0
    for i, (x, name) in enumerate(zip(entries, names)):
        if x is None:
            continue
        if not isinstance(x, int) or isinstance(x, bool) or x < low:
            want = "an int >= 0" + (" or -1" if allow_neg1 else "")
            what = f"entry {i} ({name})" if name else f"entry {i}"
            raise DefinitionError(f"{op}: {arg} {spell(spec)} {what} is {x!r}, expected {want}")
    return tuple(entries)
