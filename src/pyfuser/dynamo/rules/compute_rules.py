"""Rules for the ATen ops that compute: pointwise ops, casts and reductions.

Ops whose ATen counterpart has the same operands and semantics get their rule from
the op table (a row's ``aten`` packets: unary, binary and reduction rows); any other op
is one rule here.  Each rule names the table rows it records (``ops``,
``tests/dynamo/test_op_rules.py`` checks they are rows).
"""
from __future__ import annotations


import torch
from torch.fx.node import Node

from ...ir.dtypes import DataType, from_torch
from ...ir.ops import OpKind
from ...ir.values import TensorVal
from .rulebook import RULES, Rule, aten, bind_args, meta, overloads, rule, table_rows

# The overloads of a reduction row's ATen packets: all dims, some dims (a list or one).
_REDUCTION_OVERLOADS = ("default", "dim_IntList", "dims", "dim")
_TABLE_REDUCTIONS = {row.name: overloads(*(f"{p}.{o}" for p in row.aten for o in _REDUCTION_OVERLOADS))
                     for row in table_rows(OpKind.REDUCTION) if not row.reduction.welford}
_WELFORD = {row.name: overloads(*(f"{p}.correction" for p in row.aten))
            for kind in (OpKind.REDUCTION, OpKind.VAR_MEAN) for row in table_rows(kind) if row.reduction.welford}
_REDUCTIONS = ({str(op) for ops in (*_TABLE_REDUCTIONS.values(), *_WELFORD.values()) for op in ops}
               | {"aten.mean.dim", "aten.mean.default"})


def reduction_kind(node) -> str | None:
    """"row" (the innermost non-broadcast dim is reduced), "column" (it is kept),
    "all" (every non-broadcast dim is reduced), or None for other nodes."""
    if node.op != "call_function" or str(node.target) not in _REDUCTIONS:
        return None
    shape = list(meta(node.args[0]).shape)
    dim = getattr(bind_args(node.target, node.args, node.kwargs), "dim", None)
    rank = len(shape)
    dims = set(range(rank)) if not dim else {d % rank for d in ([dim] if isinstance(dim, int) else dim)}
    real = [d for d in range(rank) if shape[d] != 1]
    if set(real) <= dims:
        return "all"
    return "row" if real[-1] in dims else "column"


# --- pointwise ops --------------------------------------------------------------------

def _unary(fd_op):
    return lambda t, n, a: getattr(t.ops, fd_op)(a.self)


for _row in table_rows(OpKind.UNARY):
    rule(*_row.aten, ops=[_row.name])(_unary(_row.name))


def _binary(fd_op):
    return lambda t, n, a: getattr(t.ops, fd_op)(a.self, a.other)


# ATen's div is true division (ints give floats): pyfuser's truediv row names it; its
# div truncates integers, as nvFuser's does.
for _row in table_rows(OpKind.BINARY):
    for _name in _row.aten:
        # ".default" is the tensor overload only of ops without a ".Tensor" one (for mul
        # or div it is the scalar-scalar arithmetic of symbolic shapes).
        _tensor_form = "Tensor" in getattr(aten, _name).overloads()
        rule(*((f"{_name}.Tensor", f"{_name}.Scalar") if _tensor_form else (f"{_name}.default",)),
             ops=[_row.name])(_binary(_row.name))


def _alpha(t, n, a, fd_op):
    other = a.other
    if a.alpha != 1:
        other = t.ops.mul(other, a.alpha) if not isinstance(other, (int, float)) else other * a.alpha
    return getattr(t.ops, fd_op)(a.self, other)


rule("add.Tensor", "add.Scalar", ops=["add", "mul"])(lambda t, n, a: _alpha(t, n, a, "add"))
rule("sub.Tensor", "sub.Scalar", ops=["sub", "mul"])(lambda t, n, a: _alpha(t, n, a, "sub"))


def _div_mode_check(n, a):
    return None if a.rounding_mode is None else f"rounding_mode={a.rounding_mode!r}"


rule("div.Tensor_mode", "div.Scalar_mode", ops=["truediv"], check=_div_mode_check)(lambda t, n, a: t.ops.truediv(a.self, a.other))


def _small_int_power(y) -> bool:
    return isinstance(y, (int, float)) and not isinstance(y, bool) and y == int(y) and 1 <= abs(y) <= 8


def _pow_check(n, a):
    # Floats: any exponent (small integer powers become products).  Integers: only
    # positive small integer powers, as products; pyfuser's pow computes in floats.
    if meta(n).dtype.is_floating_point:
        return None
    y = getattr(a, "exponent", None)
    return None if _small_int_power(y) and y > 0 else "integer pow"


@rule("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", ops=["pow", "cast", "mul", "reciprocal"],
      check=_pow_check)
def _pow(t, n, a):
    x, y = a.self, a.exponent
    out = t.dtype(n)
    if isinstance(x, TensorVal) and x.dtype is not out:
        x = t.ops.cast(x, out)
    if not isinstance(x, TensorVal) or not _small_int_power(y):
        return t.ops.pow(x, y)
    k, result, base = abs(int(y)), None, x
    while k:  # binary powering: x**k in O(log k) multiplies, as eager's pow does for small k
        if k & 1:
            result = base if result is None else t.ops.mul(result, base)
        k >>= 1
        if k:
            base = t.ops.mul(base, base)
    return t.ops.reciprocal(result) if y < 0 else result


@rule("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar", ops=["where", "cast"])
def _where(t, n, a):
    # Two Python numbers: nvFuser's where keeps their dtype (Double for floats), ATen gives
    # its default dtype; rounding the double result gives ATen's values.
    w, out = t.ops.where(a.condition, a.self, a.other), t.dtype(n)
    return w if w.dtype is out else t.ops.cast(w, out)


def _clamp_check(n, a):
    for bound in (getattr(a, "min", None), getattr(a, "max", None)):
        if isinstance(bound, Node):
            return "tensor bounds"
    return None


rule("clamp.default", ops=["clamp"], check=_clamp_check)(lambda t, n, a: t.ops.clamp(a.self, min=a.min, max=a.max))
rule("clamp_min.default", ops=["clamp"], check=_clamp_check)(lambda t, n, a: t.ops.clamp(a.self, min=a.min))
rule("clamp_max.default", ops=["clamp"], check=_clamp_check)(lambda t, n, a: t.ops.clamp(a.self, max=a.max))


# --- casts ----------------------------------------------------------------------------


def _to_copy_check(n, a):
    src = meta(n.args[0])
    if a.device is not None and torch.device(a.device) != src.device:
        return "changes device"
    if a.layout not in (None, torch.strided):
        return "changes layout"
    if a.memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        return f"memory_format={a.memory_format}"
    return None


@rule("_to_copy.default", ops=["cast"], check=_to_copy_check)
def _to_copy(t, n, a):
    if a.dtype is None or a.dtype == meta(n.args[0]).dtype:
        return a.self
    return t.ops.cast(a.self, from_torch(a.dtype))


@rule("prims.convert_element_type.default", ops=["cast"])
def _convert(t, n, a):
    return a.a if a.a.dtype.torch == a.dtype else t.ops.cast(a.a, from_torch(a.dtype))


# --- reductions ---------------------------------------------------------------------


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.rank))
    return [dim] if isinstance(dim, int) else list(dim)


def _reduce(t, n, fd_op, x, dim, keepdim, dtype=None):
    if x.rank == 0:  # nothing to reduce: the value in the result's dtype (any of a float: a bool)
        out = t.dtype(n)
        return x if x.dtype is out else t.ops.cast(x, out)
    kw = {} if dtype is None else {"dtype": from_torch(dtype)}
    return getattr(t.ops, fd_op)(x, dims=_dims(x, dim), keepdim=bool(keepdim), **kw)


def _table_reduce(fd_op):
    # ``.default`` of sum has no dim (all of them); of amax, a dim list and keepdim
    return lambda t, n, a: _reduce(t, n, fd_op, a.self, getattr(a, "dim", None), getattr(a, "keepdim", False),
                                   getattr(a, "dtype", None))


for _name, _ops in _TABLE_REDUCTIONS.items():
    for _op in _ops:
        RULES[_op] = Rule(_table_reduce(_name), ops=(_name, "cast"))


def _float_only(n, a):
    return None if meta(n.args[0]).dtype.is_floating_point else "integer input"


@rule("mean.dim", "mean.default", ops=["sum", "div", "cast"], check=_float_only)
def _mean(t, n, a):
    x = a.self
    dims = _dims(x, getattr(a, "dim", None))
    out = t.dtype(n)
    acc = DataType.Double if out is DataType.Double else DataType.Float
    s = t.ops.sum(x, dims=dims, keepdim=bool(getattr(a, "keepdim", False)), dtype=acc)
    m = t.ops.div(s, t.count(x, dims))  # an Int scalar where a reduced dim is symbolic
    return m if m.dtype is out else t.ops.cast(m, out)


def _correction(a):
    c = getattr(a, "correction", None)
    return 1 if c is None else c


def _welford(fd_op):
    def fn(t, n, a):
        out = getattr(t.ops, fd_op)(a.self, dims=_dims(a.self, a.dim), correction=_correction(a),
                                    keepdim=bool(a.keepdim))
        return tuple(out) if isinstance(out, (tuple, list)) else out

    return fn


for _name, _ops in _WELFORD.items():
    for _op in _ops:
        RULES[_op] = Rule(_welford(_name), _float_only, ops=(_name,))
