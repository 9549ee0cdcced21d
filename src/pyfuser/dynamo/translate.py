"""ATen graph region -> FusionDefinition.

Each supported ATen op has a ``Rule``: a function that records the op with
``fd.ops`` calls, an optional ``check`` that rejects uses pyfuser cannot express
with identical semantics (a rounding mode, a device-changing copy, ...), and
whether it computes anything (view ops do not: a region of views alone stays in
ATen).  ``RULES`` is the single list the partitioner's operator support and the
translator both read.

Every translated node is checked against the shape and dtype its ATen op gives
(the FX node's ``meta["val"]``); a mismatch raises ``Unsupported`` and the region
falls back to ATen instead of computing something different.

Shapes are concrete: fusion inputs are defined with the example tensors' sizes, and
their contiguity and stride order come from the strides (``input_layout``).  The
backend keys its fusion cache on exactly these, plus the region's op text.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch
from torch.fx.node import Node, map_arg

from ..frontend import FusionDefinition
from ..ir.dtypes import DataType, from_torch
from ..ir.values import ScalarVal, TensorVal

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


RULES: dict = {}


def _overloads(*names):
    """OpOverloads by "packet.overload" name; names this torch lacks are skipped."""
    out = []
    for name in names:
        ns = prims if name.startswith("prims.") else aten
        packet_name, _, overload = name.removeprefix("prims.").partition(".")
        packet = getattr(ns, packet_name, None)
        if packet is not None and (overload or "default") in packet.overloads():
            out.append(getattr(packet, overload or "default"))
    return out


def rule(*names, check=None, compute=True):
    def register(fn):
        for op in _overloads(*names):
            RULES[op] = Rule(fn, check, compute)
        return fn

    return register


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


# --- input layouts -----------------------------------------------------------------


def input_layout(shape, stride):
    """(contiguity, stride_order) for ``define_tensor``, from sizes and strides.

    Dims of size 1 are broadcast dims (contiguity None) and do not order anything;
    the others are ordered outermost to innermost by stride.  ``stride_order`` is None
    for the row-major order, and contiguity[d] says whether dim d's stride is the
    product of the extents inside it."""
    rank = len(shape)
    big = [d for d in range(rank) if shape[d] != 1]
    outer_to_inner = sorted(big, key=lambda d: (-stride[d], d))
    stride_order = None
    if outer_to_inner != big:
        order_all = [d for d in range(rank) if shape[d] == 1] + outer_to_inner
        stride_order = [0] * rank
        for r, d in enumerate(reversed(order_all)):
            stride_order[d] = r
        stride_order = tuple(stride_order)
    contiguity = [None] * rank
    expected = 1
    for d in reversed(outer_to_inner):
        contiguity[d] = stride[d] == expected
        expected = stride[d] * shape[d]
    return tuple(contiguity), stride_order


@dataclass(frozen=True)
class InputSpec:
    """What a fusion input must look like: the translation cache keys on it."""

    dtype: torch.dtype
    shape: tuple
    contiguity: tuple
    stride_order: tuple | None
    device_type: str

    @staticmethod
    def of(t) -> "InputSpec":
        contiguity, order = input_layout(tuple(t.shape), tuple(t.stride()))
        return InputSpec(t.dtype, tuple(t.shape), contiguity, order, t.device.type)


# --- the translator ------------------------------------------------------------------


@dataclass
class Translation:
    fd: FusionDefinition
    aten_views: tuple  # per output: ATen returns a view of a region input there
    duplicates: tuple  # output positions holding a value an earlier output already holds
    tuple_output: bool  # the region's submodule returns a tuple (else one tensor)


class Translator:
    def __init__(self, fd: FusionDefinition):
        self.fd = fd
        self.ops = fd.ops
        self.env: dict = {}

    def run(self, graph, specs) -> Translation:
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node, spec in zip(placeholders, specs):
            t = self.fd.define_tensor(shape=list(spec.shape), contiguity=list(spec.contiguity),
                                      dtype=from_torch(spec.dtype), stride_order=spec.stride_order)
            self.env[node] = t
        out_node = None
        for node in graph.nodes:
            if node.op == "call_function":
                self.env[node] = self.translate(node)
            elif node.op == "output":
                out_node = node
            elif node.op != "placeholder":
                raise Unsupported(f"{node.op} node", f"cannot translate a {node.op} node ({node.name})")
        result = out_node.args[0]
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        added, duplicates = set(), []
        for pos, o in enumerate(outs):
            v = self.env.get(o) if isinstance(o, Node) else None
            if not isinstance(v, TensorVal):
                raise Unsupported("non-tensor output", f"region output {pos} ({o}) is not a tensor")
            if v in added:  # e.g. x and clone(x): ATen gives two tensors, pyfuser would give one
                duplicates.append(pos)
            added.add(v)
            self.fd.add_output(v)
        return Translation(self.fd, tuple(_aten_alias(o) for o in outs), tuple(duplicates),
                           isinstance(result, (tuple, list)))

    def translate(self, node):
        if node.target is operator.getitem:
            src, idx = node.args
            return self.env[src][idx]
        r = RULES.get(node.target)
        if r is None:
            raise Unsupported(f"{node.target}", f"no translation for {node.target}")
        a = bind_args(node.target, *map_arg((node.args, node.kwargs), lambda n: self.env[n]))
        if r.check is not None:
            reason = r.check(node, a)
            if reason:
                raise Unsupported(f"{node.target}: {reason}", f"{node.target}: {reason}")
        out = r.fn(self, node, a)
        self._verify(node, out)
        return out

    def _verify(self, node, out):
        want = meta(node)
        outs = out if isinstance(out, tuple) else (out,)
        wants = want if isinstance(want, (tuple, list)) else (want,)
        if len(outs) != len(wants):
            raise Unsupported(f"{node.target}: outputs", f"{node.target}: {len(outs)} outputs, ATen gives {len(wants)}")
        for o, w in zip(outs, wants):
            if not isinstance(w, torch.Tensor) or not isinstance(o, TensorVal):
                raise Unsupported(f"{node.target}: non-tensor", f"{node.target}: expected a tensor result")
            if o.dtype.torch != w.dtype:
                raise Unsupported(f"{node.target}: dtype", f"{node.target} ({node.name}): pyfuser infers dtype "
                                  f"{o.dtype.torch}, ATen gives {w.dtype}")
            if tuple(o.shape) != tuple(w.shape):
                raise Unsupported(f"{node.target}: shape", f"{node.target} ({node.name}): pyfuser infers shape "
                                  f"{list(o.shape)}, ATen gives {list(w.shape)}")

    # helpers for rules
    def shape(self, node):
        return list(meta(node).shape)

    def dtype(self, node) -> DataType:
        return from_torch(meta(node).dtype)


ATEN_VIEWS = set()  # filled below with the targets of the view rules


def _aten_alias(node) -> bool:
    """Whether ATen's result for ``node`` is a view of the region's inputs."""
    while isinstance(node, Node) and node.op == "call_function":
        if node.target not in ATEN_VIEWS:
            return False
        node = node.args[0]
    return isinstance(node, Node) and node.op == "placeholder"


def _identity_rule(*names, aten_view):
    def fn(t, n, a):
        return a.self

    for op in _overloads(*names):
        RULES[op] = Rule(fn, None, compute=False)
        if aten_view:
            ATEN_VIEWS.add(op)


# --- pointwise ops --------------------------------------------------------------------

_UNARY = ("abs", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "reciprocal",
          "sin", "cos", "tan", "tanh", "sigmoid", "relu", "erf", "erfc", "floor", "ceil", "trunc", "sign",
          "isnan", "isinf", "logical_not", "bitwise_not", "silu")


def _unary(fd_op):
    return lambda t, n, a: getattr(t.ops, fd_op)(a.self)


for _name in _UNARY:
    rule(_name)(_unary(_name))
rule("round")(_unary("round"))
rule("isfinite")(_unary("isfinite"))

_BINARY = {"mul": "mul", "div": "div", "maximum": "maximum", "minimum": "minimum", "atan2": "atan2",
           "fmod": "fmod", "remainder": "remainder", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt",
           "ge": "ge", "logical_and": "logical_and", "logical_or": "logical_or", "bitwise_and": "bitwise_and",
           "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor"}


def _binary(fd_op):
    return lambda t, n, a: getattr(t.ops, fd_op)(a.self, a.other)


for _name, _fd in _BINARY.items():
    # ".default" is the tensor overload only of ops without a ".Tensor" one (for mul
    # or div it is the scalar-scalar arithmetic of symbolic shapes).
    _tensor_form = "Tensor" in getattr(aten, _name).overloads()
    rule(*((f"{_name}.Tensor", f"{_name}.Scalar") if _tensor_form else (f"{_name}.default",)))(_binary(_fd))


def _alpha(t, n, a, fd_op):
    other = a.other
    if a.alpha != 1:
        other = t.ops.mul(other, a.alpha) if not isinstance(other, (int, float)) else other * a.alpha
    return getattr(t.ops, fd_op)(a.self, other)


rule("add.Tensor", "add.Scalar")(lambda t, n, a: _alpha(t, n, a, "add"))
rule("sub.Tensor", "sub.Scalar")(lambda t, n, a: _alpha(t, n, a, "sub"))


def _div_mode_check(n, a):
    return None if a.rounding_mode is None else f"rounding_mode={a.rounding_mode!r}"


rule("div.Tensor_mode", "div.Scalar_mode", check=_div_mode_check)(lambda t, n, a: t.ops.div(a.self, a.other))


def _pow_check(n, a):
    # fd.ops.pow does not run yet (its kernel fails in Triton's interpreter), so only
    # the exponents written as products or roots are claimed.
    y = a.exponent
    if isinstance(y, bool) or not isinstance(y, (int, float)):
        return "tensor exponent"
    if y in (0.5, -0.5) or (y == int(y) and 1 <= abs(y) <= 64):
        return None
    return f"exponent {y!r}"


@rule("pow.Tensor_Scalar", check=_pow_check)
def _pow_scalar(t, n, a):
    x, y = a.self, a.exponent
    out = t.dtype(n)
    if x.dtype is not out:
        x = t.ops.cast(x, out)
    if y == 0.5:
        return t.ops.sqrt(x)
    if y == -0.5:
        return t.ops.rsqrt(x)
    k, result, base = abs(int(y)), None, x
    while k:  # binary powering: x**k in O(log k) multiplies
        if k & 1:
            result = base if result is None else t.ops.mul(result, base)
        k >>= 1
        if k:
            base = t.ops.mul(base, base)
    return t.ops.reciprocal(result) if y < 0 else result


rule("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")(
    lambda t, n, a: t.ops.where(a.condition, a.self, a.other))


def _clamp_check(n, a):
    for bound in (getattr(a, "min", None), getattr(a, "max", None)):
        if isinstance(bound, Node):
            return "tensor bounds"
    return None


rule("clamp.default", check=_clamp_check)(lambda t, n, a: t.ops.clamp(a.self, min=a.min, max=a.max))
rule("clamp_min.default", check=_clamp_check)(lambda t, n, a: t.ops.clamp(a.self, min=a.min))
rule("clamp_max.default", check=_clamp_check)(lambda t, n, a: t.ops.clamp(a.self, max=a.max))


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


@rule("_to_copy.default", check=_to_copy_check)
def _to_copy(t, n, a):
    if a.dtype is None or a.dtype == meta(n.args[0]).dtype:
        return a.self
    return t.ops.cast(a.self, from_torch(a.dtype))


@rule("prims.convert_element_type.default")
def _convert(t, n, a):
    return a.a if a.a.dtype.torch == a.dtype else t.ops.cast(a.a, from_torch(a.dtype))


# --- reductions ---------------------------------------------------------------------


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.rank))
    return [dim] if isinstance(dim, int) else list(dim)


def _reduce(t, n, fd_op, x, dim, keepdim, dtype=None):
    if x.rank == 0:
        return x if dtype is None else t.ops.cast(x, from_torch(dtype))
    kw = {} if dtype is None else {"dtype": from_torch(dtype)}
    return getattr(t.ops, fd_op)(x, dims=_dims(x, dim), keepdim=bool(keepdim), **kw)


rule("sum.dim_IntList")(lambda t, n, a: _reduce(t, n, "sum", a.self, a.dim, a.keepdim, a.dtype))
rule("sum.default")(lambda t, n, a: _reduce(t, n, "sum", a.self, None, False, a.dtype))
rule("amax.default")(lambda t, n, a: _reduce(t, n, "max", a.self, a.dim, a.keepdim))
rule("amin.default")(lambda t, n, a: _reduce(t, n, "min", a.self, a.dim, a.keepdim))


def _float_only(n, a):
    return None if meta(n.args[0]).dtype.is_floating_point else "integer input"


@rule("mean.dim", "mean.default", check=_float_only)
def _mean(t, n, a):
    x = a.self
    dims = _dims(x, getattr(a, "dim", None))
    count = math.prod(x.shape[d] for d in dims)
    out = t.dtype(n)
    acc = DataType.Double if out is DataType.Double else DataType.Float
    s = t.ops.sum(x, dims=dims, keepdim=bool(getattr(a, "keepdim", False)), dtype=acc)
    m = t.ops.div(s, float(count))
    return m if m.dtype is out else t.ops.cast(m, out)


def _correction(a):
    c = getattr(a, "correction", None)
    return 1 if c is None else c


@rule("var_mean.correction", check=_float_only)
def _var_mean(t, n, a):
    return tuple(t.ops.var_mean(a.self, dims=_dims(a.self, a.dim), correction=_correction(a),
                                keepdim=bool(a.keepdim)))


@rule("var.correction", check=_float_only)
def _var(t, n, a):
    return t.ops.var(a.self, dims=_dims(a.self, a.dim), correction=_correction(a), keepdim=bool(a.keepdim))


# --- views and layout ------------------------------------------------------------------


def _view_rule(*names):
    def register(fn):
        for op in _overloads(*names):
            RULES[op] = Rule(fn, None, compute=False)
            ATEN_VIEWS.add(op)
        return fn

    return register


@_view_rule("view.default", "_unsafe_view.default", "reshape.default")
def _reshape(t, n, a):
    return t.ops.reshape(a.self, t.shape(n))


@_view_rule("permute.default")
def _permute(t, n, a):
    return t.ops.permute(a.self, [d % max(a.self.rank, 1) for d in a.dims])


@_view_rule("transpose.int")
def _transpose(t, n, a):
    r = a.self.rank
    dims = list(range(r))
    if r:
        i, j = a.dim0 % r, a.dim1 % r
        dims[i], dims[j] = dims[j], dims[i]
    return t.ops.permute(a.self, dims) if dims != list(range(r)) else a.self


@_view_rule("t.default")
def _t(t, n, a):
    return t.ops.permute(a.self, [1, 0]) if a.self.rank == 2 else a.self


@_view_rule("unsqueeze.default")
def _unsqueeze(t, n, a):
    shape = t.shape(n)
    d = a.dim % len(shape)
    return t.ops.broadcast_in_dim(a.self, shape=shape, broadcast_dims=[i for i in range(len(shape)) if i != d])


@_view_rule("squeeze.dim", "squeeze.dims", "squeeze.default")
def _squeeze(t, n, a):
    x = a.self
    dims = getattr(a, "dim", None)
    dims = list(range(x.rank)) if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    dims = sorted({d % x.rank for d in dims if x.rank and x.shape[d % x.rank] == 1})
    return t.ops.squeeze(x, dims) if dims else x


@_view_rule("expand.default")
def _expand(t, n, a):
    shape = t.shape(n)
    x = a.self
    if list(x.shape) == shape:
        return x
    return t.ops.broadcast_in_dim(x, shape=shape, broadcast_dims=list(range(len(shape) - x.rank, len(shape))))


def _slice_bounds(size, start, end, step):
    return slice(start, end, step).indices(size)


@_view_rule("slice.Tensor")
def _slice(t, n, a):
    x = a.self
    d = a.dim % x.rank
    start, end, step = _slice_bounds(x.shape[d], a.start, a.end, a.step)
    if (start, end, step) == (0, x.shape[d], 1):
        return x
    starts, ends, steps = [0] * x.rank, list(x.shape), [1] * x.rank
    starts[d], ends[d], steps[d] = start, max(end, start), step
    return t.ops.slice(x, starts, ends, steps)


@_view_rule("select.int")
def _select(t, n, a):
    x = a.self
    d = a.dim % x.rank
    i = a.index % x.shape[d]
    starts, ends = [0] * x.rank, list(x.shape)
    starts[d], ends[d] = i, i + 1
    return t.ops.squeeze(t.ops.slice(x, starts, ends, [1] * x.rank), [d])


_identity_rule("alias.default", "detach.default", aten_view=True)
_identity_rule("clone.default", "lift_fresh_copy.default", aten_view=False)


def _cat_check(n, a):
    if len({meta(x).dtype for x in n.args[0]}) != 1:
        return "mixed dtypes"
    if any(meta(x).dim() == 1 and meta(x).shape[0] == 0 for x in n.args[0]):
        return "empty legacy operand"
    return None


rule("cat.default", check=_cat_check)(lambda t, n, a: t.ops.cat(list(a.tensors), a.dim))


def _pad_check(n, a):
    return "negative padding" if any(p < 0 for p in a.pad) else None


rule("constant_pad_nd.default", check=_pad_check)(
    lambda t, n, a: t.ops.pad(a.self, list(a.pad), a.value))


# --- creation and random numbers ----------------------------------------------------


def _creation_check(n, a):
    layout = getattr(a, "layout", None)
    return "changes layout" if layout not in (None, torch.strided) else None


@rule("full.default", check=_creation_check)
def _full(t, n, a):
    dt = t.dtype(n)
    value = a.fill_value
    value = bool(value) if dt is DataType.Bool else (float(value) if dt.is_float else int(value))
    return t.ops.full(t.shape(n), value, dt)


@rule("scalar_tensor.default", check=_creation_check)
def _scalar_tensor(t, n, a):
    dt = t.dtype(n)
    value = bool(a.s) if dt is DataType.Bool else (float(a.s) if dt.is_float else int(a.s))
    return t.ops.full([], value, dt)


def _random_check(n, a):
    if not meta(n).dtype.is_floating_point:
        return "non-float dtype"
    return _creation_check(n, a)


rule("rand_like.default", "rand.default", check=_random_check)(
    lambda t, n, a: t.ops.uniform(0.0, 1.0, t.shape(n), t.dtype(n)))
rule("randn_like.default", "randn.default", check=_random_check)(
    lambda t, n, a: t.ops.normal(0.0, 1.0, t.shape(n), t.dtype(n)))


# --- support: which nodes the partitioner may put in a region ---------------------------


def _tensor_ok(v) -> str | None:
    if not isinstance(v, torch.Tensor):
        return f"non-tensor value {type(v).__name__}"
    if v.dtype not in SUPPORTED_DTYPES:
        return f"dtype {v.dtype}"
    if v.layout != torch.strided or v.device.type not in ("cuda", "cpu"):
        return f"layout {v.layout} on {v.device}"
    if not all(isinstance(s, int) for s in tuple(v.shape) + tuple(v.stride())):
        return "symbolic shape"
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


def translate(graph, specs) -> Translation:
    """Record ``graph`` (a region's submodule graph) into a new FusionDefinition."""
    with FusionDefinition() as fd:
        translation = Translator(fd).run(graph, specs)
    return translation


__all__ = ["RULES", "Unsupported", "InputSpec", "Translation", "translate", "unsupported_reason", "is_compute",
           "input_layout", "ScalarVal"]
