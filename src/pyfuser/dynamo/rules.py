"""The ATen ops pyfuser fuses: one ``Rule`` per op, and which nodes are supported.

A rule records its op with ``fd.ops`` calls (``fn(translator, node, args)``, the
arguments bound by schema name), may ``check`` a use and name why pyfuser cannot
express it with ATen's semantics (a rounding mode, a device-changing copy, ...),
and says whether the op computes anything (views and identities do not: a region
of them alone stays in ATen).  ``RULES`` is the single list both the partitioner's
operator support (``unsupported_reason``) and the translator read.

Ops whose ATen counterpart has the same operands and semantics get their rule from
the op table (a row's ``aten`` packets: unary, binary and reduction rows); any other op
is one rule here.  Each rule names the table rows it records (``ops``,
``tests/dynamo/test_op_rules.py`` checks they are rows), and has one use there.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch
from torch.fx.node import Node

from ..ir.dtypes import DataType, from_torch
from ..ir.ops import OPS, OpKind
from ..ir.values import TensorVal

aten = torch.ops.aten
prims = torch.ops.prims

SUPPORTED_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.bool)


class Unsupported(Exception):
    """A node pyfuser cannot translate with ATen's semantics.  ``cause`` is short and
    stable (op name and kind of problem): the backend warns once per cause."""

    def __init__(self, cause: str, message: str):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class Rule:
    fn: Callable  # (translator, node, args namespace) -> fd value or tuple of them
    check: Callable | None = None  # (node, args namespace) -> reason it is unsupported, or None
    compute: bool = True  # False: a view / identity, which alone is not worth a fusion
    ops: tuple = ()  # the op table rows ``fn`` records (none for an identity)


RULES: dict = {}


def overloads(*names):
    """OpOverloads by "packet.overload" name; names this torch lacks are skipped."""
    out = []
    for name in names:
        ns = prims if name.startswith("prims.") else aten
        packet_name, _, overload = name.removeprefix("prims.").partition(".")
        packet = getattr(ns, packet_name, None)
        if packet is not None and (overload or "default") in packet.overloads():
            out.append(getattr(packet, overload or "default"))
    return out


def rule(*names, ops, check=None, compute=True):
    def register(fn):
        for op in overloads(*names):
            RULES[op] = Rule(fn, check, compute, tuple(ops))
        return fn

    return register


def _table_rows(kind):
    return [row for row in OPS.values() if row.kind is kind and row.aten]


def bind_args(target, args, kwargs) -> SimpleNamespace:
    """The node's arguments by schema name, defaults filled in."""
    out = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            raise Unsupported(f"{target}: arguments", f"{target}: no value for argument {arg.name}")
    return SimpleNamespace(**out)


def meta(node):
    return node.meta.get("val") if isinstance(node, Node) else None


ATEN_VIEWS = set()  # filled below with the targets of the view rules
# The views that change a tensor's shape, not its elements' order: what the partitioner
# checks for cuts, pad_matmuls follows to the graph's outputs, sum_views sums through.
RESHAPES = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default)
# A node a graph rewrite keeps out of every region (node.meta key): a view that must
# stay a view between two regions (``pad_matmuls``: a sum reading the padded gradient).
ATEN_ONLY = "pyfuser_aten_only"

# The overloads of a reduction row's ATen packets: all dims, some dims (a list or one).
_REDUCTION_OVERLOADS = ("default", "dim_IntList", "dims", "dim")
_TABLE_REDUCTIONS = {row.name: overloads(*(f"{p}.{o}" for p in row.aten for o in _REDUCTION_OVERLOADS))
                     for row in _table_rows(OpKind.REDUCTION) if not row.reduction.welford}
_WELFORD = {row.name: overloads(*(f"{p}.correction" for p in row.aten))
            for kind in (OpKind.REDUCTION, OpKind.VAR_MEAN) for row in _table_rows(kind) if row.reduction.welford}
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


def _identity_rule(*names, aten_view):
    def fn(t, n, a):
        return a.self

    for op in overloads(*names):
        RULES[op] = Rule(fn, None, compute=False, ops=())
        if aten_view:
            ATEN_VIEWS.add(op)


# --- pointwise ops --------------------------------------------------------------------

def _unary(fd_op):
    return lambda t, n, a: getattr(t.ops, fd_op)(a.self)


for _row in _table_rows(OpKind.UNARY):
    rule(*_row.aten, ops=[_row.name])(_unary(_row.name))


def _binary(fd_op):
    return lambda t, n, a: getattr(t.ops, fd_op)(a.self, a.other)


# ATen's div is true division (ints give floats): pyfuser's truediv row names it; its
# div truncates integers, as nvFuser's does.
for _row in _table_rows(OpKind.BINARY):
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


rule("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar", ops=["where"])(
    lambda t, n, a: t.ops.where(a.condition, a.self, a.other))


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


# --- views and layout ------------------------------------------------------------------


def _view_rule(*names, ops, check=None):
    def register(fn):
        for op in overloads(*names):
            RULES[op] = Rule(fn, check, compute=False, ops=tuple(ops))
            ATEN_VIEWS.add(op)
        return fn

    return register


@_view_rule("view.default", "_unsafe_view.default", "reshape.default", ops=["reshape"])
def _reshape(t, n, a):
    return t.ops.reshape(a.self, t.shape(n))


@_view_rule("permute.default", ops=["permute"])
def _permute(t, n, a):
    return t.ops.permute(a.self, [d % max(a.self.rank, 1) for d in a.dims])


@_view_rule("transpose.int", ops=["permute"])
def _transpose(t, n, a):
    r = a.self.rank
    dims = list(range(r))
    if r:
        i, j = a.dim0 % r, a.dim1 % r
        dims[i], dims[j] = dims[j], dims[i]
    return t.ops.permute(a.self, dims) if dims != list(range(r)) else a.self


@_view_rule("t.default", ops=["permute"])
def _t(t, n, a):
    return t.ops.permute(a.self, [1, 0]) if a.self.rank == 2 else a.self


@_view_rule("unsqueeze.default", ops=["broadcast_in_dim"])
def _unsqueeze(t, n, a):
    shape = t.shape(n)
    d = a.dim % len(shape)
    return t.ops.broadcast_in_dim(a.self, shape=shape, broadcast_dims=[i for i in range(len(shape)) if i != d])


@_view_rule("squeeze.dim", "squeeze.dims", "squeeze.default", ops=["squeeze"])
def _squeeze(t, n, a):
    x = a.self
    dims = getattr(a, "dim", None)
    dims = list(range(x.rank)) if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    dims = sorted({d % x.rank for d in dims if x.rank and x.shape[d % x.rank] == 1})
    return t.ops.squeeze(x, dims) if dims else x


@_view_rule("expand.default", ops=["broadcast_in_dim"])
def _expand(t, n, a):
    shape = t.shape(n)
    x = a.self
    if list(x.shape) == shape:
        return x
    return t.ops.broadcast_in_dim(x, shape=shape, broadcast_dims=list(range(len(shape) - x.rank, len(shape))))


def _int_bounds(n, a):  # pyfuser's slice takes int bounds
    symbolic = any(isinstance(getattr(a, k, None), (Node, torch.SymInt)) for k in ("start", "end", "index"))
    return "symbolic bounds" if symbolic else None


@_view_rule("slice.Tensor", ops=["slice"], check=_int_bounds)
def _slice(t, n, a):
    x = a.self
    d = a.dim % x.rank
    start, end, step = t.slice_bounds(x, d, a.start, a.end, a.step)
    if (start, end, step) == (0, x.shape[d], 1):
        return x
    starts, ends, steps = [0] * x.rank, t.ends(x), [1] * x.rank
    starts[d], ends[d], steps[d] = start, end, step
    return t.ops.slice(x, starts, ends, steps)


@_view_rule("select.int", ops=["slice", "squeeze"], check=_int_bounds)
def _select(t, n, a):
    x = a.self
    d = a.dim % x.rank
    i = a.index if x.shape[d] is None else a.index % x.shape[d]  # symbolic: -1 is [-1:]
    starts, ends = [0] * x.rank, t.ends(x)
    starts[d], ends[d] = i, (i + 1) or t.WHOLE
    return t.ops.squeeze(t.ops.slice(x, starts, ends, [1] * x.rank), [d])


_identity_rule("alias.default", "detach.default", aten_view=True)
_identity_rule("lift_fresh_copy.default", aten_view=False)


@rule("clone.default", ops=["set"], compute=False)
def _clone(t, n, a):
    """A copy (``ops.set``): a region that is only a clone of a transposed tensor
    (attention heads made contiguous for a bmm) becomes one copy kernel."""
    return t.ops.set(a.self)


def is_layout_copy(node) -> bool:
    """A clone of a non-contiguous tensor: worth a kernel of its own (see partition)."""
    if node.op != "call_function" or str(node.target) != "aten.clone.default":
        return False
    x = meta(node.args[0])
    return isinstance(x, torch.Tensor) and not x.is_contiguous() and x.numel() >= LAYOUT_COPY_MIN_NUMEL


def _cat_check(n, a):
    if len({meta(x).dtype for x in n.args[0]}) != 1:
        return "mixed dtypes"
    if any(meta(x).dim() == 1 and meta(x).shape[0] == 0 for x in n.args[0]):
        return "empty legacy operand"
    return None


rule("cat.default", ops=["cat"], check=_cat_check)(lambda t, n, a: t.ops.cat(list(a.tensors), a.dim))


def _pad_check(n, a):
    return "negative padding" if any(p < 0 for p in a.pad) else None


rule("constant_pad_nd.default", ops=["pad"], check=_pad_check)(
    lambda t, n, a: t.ops.pad(a.self, list(a.pad), a.value))


# --- creation and random numbers ----------------------------------------------------


def _creation_check(n, a):
    layout = getattr(a, "layout", None)
    return "changes layout" if layout not in (None, torch.strided) else None


@rule("full.default", ops=["full"], check=_creation_check)
def _full(t, n, a):
    dt = t.dtype(n)
    value = a.fill_value
    value = bool(value) if dt is DataType.Bool else (float(value) if dt.is_float else int(value))
    return t.ops.full(t.shape(n), value, dt)


@rule("scalar_tensor.default", ops=["full"], check=_creation_check)
def _scalar_tensor(t, n, a):
    dt = t.dtype(n)
    value = bool(a.s) if dt is DataType.Bool else (float(a.s) if dt.is_float else int(a.s))
    return t.ops.full([], value, dt)


LAYOUT_COPY_MIN_NUMEL = 1 << 16


def _arange_check(n, a):
    if meta(n).dtype not in (torch.int64, torch.int32):
        return "non-integer arange"  # float steps accumulate differently
    return _creation_check(n, a)


@rule("arange.default", "arange.start", "arange.start_step", ops=["iota"], check=_arange_check)
def _arange(t, n, a):
    return t.ops.iota(t.shape(n)[0], int(getattr(a, "start", 0)), int(getattr(a, "step", 1)), t.dtype(n))


def _gather_check(n, a):
    if not meta(n.args[0]).dtype.is_floating_point:
        return "gather of a non-float tensor"  # pyfuser reads float gathers in kernels only
    if getattr(a, "sparse_grad", False):
        return "sparse gradient"
    return None


@rule("gather.default", ops=["gather"], check=_gather_check)
def _gather(t, n, a):
    """Read inside the kernel at the index's coordinates (NaN where out of range)."""
    return t.ops.gather(a.self, a.index, a.dim)


def _random_check(n, a):
    if not meta(n).dtype.is_floating_point:
        return "non-float dtype"
    return _creation_check(n, a)


rule("rand_like.default", "rand.default", ops=["uniform"], check=_random_check)(
    lambda t, n, a: t.ops.uniform(0.0, 1.0, t.shape(n), t.dtype(n)))
rule("randn_like.default", "randn.default", ops=["normal"], check=_random_check)(
    lambda t, n, a: t.ops.normal(0.0, 1.0, t.shape(n), t.dtype(n)))


# --- support: which nodes the partitioner may put in a region ---------------------------


def _tensor_ok(v) -> str | None:
    if not isinstance(v, torch.Tensor):
        return f"non-tensor value {type(v).__name__}"
    if v.dtype not in SUPPORTED_DTYPES:
        return f"dtype {v.dtype}"
    if v.layout != torch.strided or v.device.type not in ("cuda", "cpu"):
        return f"layout {v.layout} on {v.device}"
    return None


def unsupported_reason(node) -> str | None:
    """Why ``node`` cannot join a fusion region (None: it can)."""
    if node.op != "call_function":
        return node.op
    if node.target is operator.getitem:
        src = node.args[0]
        return None if isinstance(src, Node) and unsupported_reason(src) is None else "getitem of a non-fused node"
    r = RULES.get(node.target)
    if r is None:
        return f"no rule for {node.target}"
    v = meta(node)
    for out in (v if isinstance(v, (tuple, list)) else (v,)):
        why = _tensor_ok(out)
        if why:
            return why
    for inp in node.all_input_nodes:
        why = _tensor_ok(meta(inp))
        if why:
            return f"input {inp.name}: {why}"
    if not node.all_input_nodes and isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0:
        # A CPU scalar made for a GPU graph (a constant's tensor): ATen makes it, and
        # the region that consumes it moves it to the GPU.
        return "CPU scalar creation"
    if r.check is not None:
        try:
            a = bind_args(node.target, node.args, node.kwargs)
        except Unsupported as err:
            return str(err)
        return r.check(node, a)
    return None


def is_compute(node) -> bool:
    """Whether ``node`` does work (views, identities and getitem do not)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    r = RULES.get(node.target)
    return r is not None and r.compute
