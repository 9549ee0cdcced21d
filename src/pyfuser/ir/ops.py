"""The op table: each op pyfuser knows is defined once, here.

A row (``OpDef``) carries what every layer needs to know about an op:

* ``kind``, an ``OpKind``: how the frontend builds it and how the code generator indexes it
  (``unary``/``binary``/``ternary`` elementwise ops, ``cast``, ``reduction``, the
  layout ops, ``full``/``iota``, the random ops, ``host`` ops run by torch between
  kernels, and ``extent`` ops: sizes, evaluated before any kernel, see ``ir.extents``);
* ``ref``: its semantics, as a call into torch; the reference executor runs it and
  dtype inference probes it on one-element tensors, so promotion (tensor vs tensor, tensor
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

The helpers rows call live beside the table: ``ir.op_refs`` (references that need more
than a torch function) and ``ir.op_emit`` (Triton expressions of more than one builtin;
libdevice where Triton has no builtin).  ``docs/OPS.md`` is generated from the table
(``make ops-doc``).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

import torch

from . import host_ops as H
from . import host_rows as HR
from . import op_emit as E
from . import op_refs as F
from . import reductions as R

# The fp32 tanh helper's source, for tools that compile it on its own.
TANH_FP32 = E.TANH_FP32

# --- the table -------------------------------------------------------------------


class OpKind(str, Enum):
    """How the frontend builds an op, how shapes are inferred for it, how the reference
    runs it and how the code generator indexes it.  Every row's ``kind`` is one of
    these; each dispatch over kinds (``ir.infer``, ``reference``) names every member
    (tests/ir/test_op_table.py checks it).  A ``str`` enum: its members compare
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
    _u("abs", torch.abs, E.abs_),
    _u("neg", lambda a: -a, E.neg),
    _u("exp", torch.exp, E.exp),
    _u("exp2", torch.exp2, E.exact("exp2")),
    _u("expm1", torch.expm1, lambda b, a: f"libdevice.expm1({a})", heavy=True),
    _u("log", torch.log, E.exact("log")),
    _u("log1p", torch.log1p, lambda b, a: f"libdevice.log1p({a})", heavy=True),
    _u("log2", torch.log2, E.exact("log2")),
    # libdevice's log10, as torch's CUDA kernel: log2(x) * log10(2) rounds twice (2 ulp in fp32)
    _u("log10", torch.log10, E.libdevice("log10"), heavy=True),
    _u("sqrt", torch.sqrt, E.sqrt),
    _u("rsqrt", torch.rsqrt, lambda b, a: f"tl.rsqrt({a})"),
    _u("reciprocal", torch.reciprocal, lambda b, a: E.div(b, "1.0", a)),
    _u("sin", torch.sin, E.exact("sin"), heavy=True),
    _u("cos", torch.cos, E.exact("cos"), heavy=True),
    _u("tan", torch.tan, lambda b, a: f"libdevice.tan({a})", heavy=True),
    _u("tanh", torch.tanh, E.tanh, heavy=True),
    _u("sigmoid", torch.sigmoid, lambda b, a: E.div(b, "1.0", f"(1.0 + {E.exp(b, f'-({a})')})")),
    _u("relu", torch.relu, lambda b, a: f"tl.where({b.tmp(a)} < 0, 0, {b.last})"),
    _u("silu", torch.nn.functional.silu,
       lambda b, a: E.div(b, b.tmp(a), f"(1.0 + {E.exp(b, f'-{b.last}')})")),
    _u("erf", torch.erf, E.erf, heavy=True),
    _u("erfc", torch.erfc, lambda b, a: f"libdevice.erfc({a})", heavy=True),
    _u("floor", torch.floor, E.floor),
    _u("ceil", torch.ceil, E.ceil),
    _u("round", torch.round, E.round_),
    _u("trunc", torch.trunc, E.trunc),
    _u("sign", torch.sign, E.sign),
    _u("isfinite", torch.isfinite, E.isfinite, "args"),
    _u("isnan", torch.isnan, E.isnan, "args"),
    _u("isinf", torch.isinf, E.isinf, "args"),
    _u("logical_not", torch.logical_not, lambda b, a: f"({a} == 0)", "args"),
    _u("bitwise_not", torch.bitwise_not, E.bitwise_not),
    _u("set", torch.clone, lambda b, a: a, aten=False),  # a copy: the output is a new tensor (nvFuser's ops.set)
    _u("acos", torch.acos, E.libdevice("acos"), heavy=True),
    _u("acosh", torch.acosh, E.libdevice("acosh"), heavy=True),
    _u("asin", torch.asin, E.libdevice("asin"), heavy=True),
    _u("asinh", torch.asinh, E.libdevice("asinh"), heavy=True),
    _u("atan", torch.atan, E.libdevice("atan"), heavy=True),
    _u("atanh", torch.atanh, E.libdevice("atanh"), heavy=True),
    _u("cosh", torch.cosh, E.libdevice("cosh"), heavy=True),
    _u("sinh", torch.sinh, E.libdevice("sinh"), heavy=True),
    _u("lgamma", torch.lgamma, E.libdevice("lgamma"), heavy=True),
    _u("erfinv", torch.erfinv, E.libdevice("erfinv"), heavy=True),
    _u("erfcinv", F.erfcinv_ref, E.libdevice("erfcinv"), heavy=True, aten=False),  # ATen has none
    _u("frac", torch.frac, E.frac),
    _u("signbit", torch.signbit, E.signbit, "args"),
    _u("isposinf", torch.isposinf, E.equals_inf(""), "args"),
    _u("isneginf", torch.isneginf, E.equals_inf("-"), "args"),
    _u("isreal", torch.isreal, E.isreal, "args"),
    # binary
    # ATen's add and sub take an ``alpha`` (dynamo.rules); its div is truediv
    _b("add", lambda a, b: a + b, E.add, aten=False),
    _b("sub", lambda a, b: a - b, lambda b, x, y: f"({x} - {y})", aten=False),
    _b("mul", lambda a, b: a * b, lambda b, x, y: f"({x} * {y})"),
    OpDef("div", OpKind.BINARY, F.div_ref, E.div, emit_uniform_rhs=E.div_uniform),
    OpDef("truediv", OpKind.BINARY, lambda a, b: a / b, E.div, emit_uniform_rhs=E.div_uniform, aten=("div",)),
    _b("pow", lambda a, b: a ** b, E.pow_, heavy=True, aten=False),  # integer powers: dynamo.rules
    _b("fmod", F.tensor_first(F.exact_fmod), E.fmod),
    _b("remainder", F.tensor_first(lambda a, b: F.exact_fmod(a, b, floor=True)), E.remainder),
    _b("atan2", F.tensor_first(torch.atan2), lambda b, y, x: E.ld(b, "atan2", y, x), heavy=True),
    _b("maximum", F.tensor_first(F.max_ref), E.max_min("maximum")),
    _b("minimum", F.tensor_first(F.min_ref), E.max_min("minimum")),
    _cmp("eq", lambda a, b: a == b, "=="),
    _cmp("ne", lambda a, b: a != b, "!="),
    _cmp("lt", lambda a, b: a < b, "<"),
    _cmp("le", lambda a, b: a <= b, "<="),
    _cmp("gt", lambda a, b: a > b, ">"),
    _cmp("ge", lambda a, b: a >= b, ">="),
    _b("logical_and", F.tensor_first(torch.logical_and), lambda b, x, y: f"(({x} != 0) & ({y} != 0))", "args"),
    _b("logical_or", F.tensor_first(torch.logical_or), lambda b, x, y: f"(({x} != 0) | ({y} != 0))", "args"),
    _b("bitwise_and", lambda a, b: a & b, lambda b, x, y: f"({x} & {y})"),
    _b("bitwise_or", lambda a, b: a | b, lambda b, x, y: f"({x} | {y})"),
    _b("bitwise_xor", lambda a, b: a ^ b, lambda b, x, y: f"({x} ^ {y})"),
    _b("bitwise_left_shift", F.tensor_first(torch.bitwise_left_shift), E.shift_left),
    _b("bitwise_right_shift", F.tensor_first(torch.bitwise_right_shift), E.shift_right),
    _b("logical_right_shift", F.logical_right_shift_ref, E.logical_shift_right, aten=False),  # ATen has none
    _b("gcd", F.tensor_first(torch.gcd), E.gcd),
    _b("mod", F.mod_ref, E.fmod, aten=False),  # ATen's fmod is the fmod row
    _b("nextafter", F.nextafter_ref, E.nextafter),
    # ternary
    OpDef("where", OpKind.TERNARY, torch.where, lambda b, c, x, y: f"tl.where({c}, {x}, {y})"),
    OpDef("lerp", OpKind.TERNARY, F.lerp_ref, E.lerp),
    OpDef("addcmul", OpKind.TERNARY, F.addcmul_ref,
          lambda b, t, t1, t2, value: f"({t} + {value} * {t1} * {t2})"),
    OpDef("clamp", OpKind.TERNARY, F.clamp_ref, E.clamp),
    OpDef("threshold", OpKind.TERNARY, F.threshold_ref, E.threshold),
    # casts
    OpDef("cast", OpKind.CAST, lambda x, dtype: x.to(dtype) if isinstance(x, torch.Tensor) else x),
    # reductions
    OpDef("sum", OpKind.REDUCTION, lambda x, dims, keepdim=False, dtype=None: torch.sum(x, dims, keepdim=keepdim, dtype=dtype), reduction=R.SUM_ROW, aten=("sum",)),
    OpDef("max", OpKind.REDUCTION, lambda x, dims, keepdim=False, dtype=None: torch.amax(x, dims, keepdim=keepdim), reduction=R.MAX_ROW, aten=("amax",)),
    OpDef("min", OpKind.REDUCTION, lambda x, dims, keepdim=False, dtype=None: torch.amin(x, dims, keepdim=keepdim), reduction=R.MIN_ROW, aten=("amin",)),
    OpDef("prod", OpKind.REDUCTION, F.prod_ref, reduction=R.PROD_ROW),
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
