"""ATen graph region -> FusionDefinition, node by node through ``rules.RULES``.

Every translated node is checked against the shape and dtype its ATen op gives
(the FX node's ``meta["val"]``); a mismatch raises ``Unsupported`` and the region
falls back to ATen instead of computing something different.

Static sizes are concrete: fusion inputs are defined with the example tensors'
sizes, and their contiguity and stride order come from the strides
(``input_layout``).  A symbolic size (a graph Dynamo traced with dynamic shapes) is a
symbolic extent (-1) of its input; where the math needs a symbolic size (a view's or
a fill's shape, a mean's divisor) it is an Int scalar: ``fd.ops.size`` of an input dim
of that size, or the region's SymInt input of that value (``Translator.sym``).  So
one FusionDefinition serves every size, and its plan cache every size of one size
class.  The backend keys its fusion cache on these specs (symbolic sizes by their
expressions), plus the region's op text.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
from torch.fx.node import Node, map_arg

from ...frontend import FusionDefinition
from ...frontend.descriptor import contiguity_in_allocation_order
from ...ir.dtypes import DataType, from_torch
from ...ir.values import TensorVal
from ...runtime.phases import timed
from ..rules import ATEN_VIEWS, RESHAPES, RULES, Unsupported, bind_args, meta, reduction_kind


# --- symbolic sizes -----------------------------------------------------------------


def is_symbolic(v) -> bool:
    """Whether ``v`` (a node's traced value) is a SymInt or a tensor with a symbolic
    size or stride."""
    if isinstance(v, torch.SymInt):
        return True
    if isinstance(v, torch.Tensor):
        return not all(isinstance(s, int) for s in (*v.shape, *v.stride()))
    return False


def size_key(s):
    """A size for cache keys and comparisons: the int, or a SymInt's expression as text
    (SymInts do not hash, and comparing two would add a guard to the graph)."""
    return s if isinstance(s, int) else str(s.node.expr)


def sym_shape(shape) -> tuple:
    """``shape`` with each symbolic entry as its expression's text."""
    return tuple(size_key(s) for s in shape)


def hints(shape) -> tuple:
    """``shape`` at the example sizes Dynamo traced with (no guard is added)."""
    return tuple(s if isinstance(s, int) else s.node.hint for s in shape)


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

    dtype: torch.dtype | None  # None: an Int scalar (a SymInt input)
    shape: tuple  # ints, and for symbolic sizes their expressions' text
    contiguity: tuple
    stride_order: tuple | None
    device_type: str

    @staticmethod
    def of(t, shape=None) -> "InputSpec":
        """``t``'s spec; ``shape``: the traced (symbolic) shape to define it with, its
        contiguity and stride order still taken from ``t``'s sizes and strides."""
        contiguity, order = input_layout(tuple(t.shape), tuple(t.stride()))
        return InputSpec(t.dtype, tuple(t.shape) if shape is None else shape, contiguity, order, t.device.type)

    @staticmethod
    def scalar(expr: str, device_type: str) -> "InputSpec":
        return InputSpec(None, (expr,), (), None, device_type)

    @property
    def symbolic(self) -> bool:
        return not all(isinstance(e, int) for e in self.shape)


# --- the translator ------------------------------------------------------------------


@dataclass
class Translation:
    fd: FusionDefinition
    aten_views: tuple  # per output: ATen returns a view of a region input there
    duplicates: tuple  # output positions holding a value an earlier output already holds
    tuple_output: bool  # the region's submodule returns a tuple (else one tensor)
    # (position, dims) of outputs the fusion gives permuted into ATen's memory order
    # (``dense_order``): the region returns ``out.permute(dims)``, a view in ATen's strides
    permuted: tuple = ()

    def laid_out(self, outs: list) -> list:
        """The fusion's outputs with the permuted ones viewed back in ATen's dim order."""
        for pos, dims in self.permuted:
            outs[pos] = outs[pos].permute(dims)
        return outs


class Translator:
    def __init__(self, fd: FusionDefinition):
        self.fd = fd
        self.ops = fd.ops
        self.env: dict = {}
        self.sources: dict = {}  # symbol's text -> (fusion input, dim or None for a scalar input)
        self.symbols: dict = {}  # symbol's text -> its Int scalar in the fusion, once asked for

    def run(self, graph, specs) -> Translation:
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node, spec in zip(placeholders, specs):
            if spec.dtype is None:  # a SymInt input: a runtime Int scalar
                t = self.fd.define_scalar(dtype=DataType.Int)
                self.sources.setdefault(spec.shape[0], (t, None))
            else:
                contiguity = contiguity_in_allocation_order(spec.contiguity, spec.stride_order)
                t = self.fd.define_tensor(shape=[e if isinstance(e, int) else -1 for e in spec.shape],
                                          contiguity=contiguity, dtype=from_torch(spec.dtype),
                                          stride_order=spec.stride_order)
                for d, e in enumerate(spec.shape):
                    if not isinstance(e, int):
                        self.sources.setdefault(e, (t, d))
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
        pointwise = not any(reduction_kind(n) for n in graph.nodes)
        added, duplicates, permuted = set(), [], []
        for pos, o in enumerate(outs):
            v = self.env.get(o) if isinstance(o, Node) else None
            if not isinstance(v, TensorVal):
                raise Unsupported("non-tensor output", f"region output {pos} ({o}) is not a tensor")
            if v in added:  # e.g. x and clone(x): ATen gives two tensors, pyfuser would give one
                duplicates.append(pos)
            added.add(v)
            order = dense_order(meta(o)) if pointwise and not _aten_alias(o) else None
            if order is not None:
                v = self.ops.permute(v, list(order))
                permuted.append((pos, tuple(sorted(range(len(order)), key=order.__getitem__))))
            self.fd.add_output(v)
        return Translation(self.fd, tuple(_aten_alias(o) for o in outs), tuple(duplicates),
                           isinstance(result, (tuple, list)), tuple(permuted))

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
            # A symbolic size is unknown (None) at definition time; a static one must agree.
            if len(o.shape) != w.dim() or any(
                    (e is not None) if not isinstance(s, int) else e != s for e, s in zip(o.shape, w.shape)):
                raise Unsupported(f"{node.target}: shape", f"{node.target} ({node.name}): pyfuser infers shape "
                                  f"{list(o.shape)}, ATen gives {list(w.shape)}")

    # helpers for rules
    # A slice's end over a whole symbolic dim: slices clamp to the extent the dim has
    # when the fusion runs, as Python's do.
    WHOLE = 2**63 - 1

    def ends(self, x: TensorVal) -> list:
        """Slice ends that keep every dim of ``x`` whole."""
        return [self.WHOLE if e is None else e for e in x.shape]

    def shape(self, node):
        """The node's traced shape: ints, and Int scalars for its symbolic sizes.  A
        reshape's target may leave one size it cannot build as -1 (inferred from the
        element count): [batch * seq, hidden] viewed as [batch, seq, hidden]
        has no input of size batch."""
        out, missing = [], []
        for d, s in enumerate(meta(node).shape):
            try:
                out.append(s if isinstance(s, int) else self.sym(s))
            except Unsupported:
                if node.target not in RESHAPES or missing:
                    raise
                missing.append(d)
                out.append(-1)
        return out

    def dtype(self, node) -> DataType:
        return from_torch(meta(node).dtype)

    def slice_bounds(self, x: TensorVal, d: int, start, end, step) -> tuple:
        """ATen's slice bounds of ``x``'s dim ``d`` as pyfuser's slice takes them:
        normalised to the extent, or for a symbolic dim left for the fusion to clamp
        when it runs."""
        if x.shape[d] is None:
            return start or 0, self.WHOLE if end is None else end, step
        start, end, step = slice(start, end, step).indices(x.shape[d])
        return start, max(end, start), step

    def count(self, x: TensorVal, dims):
        """The number of elements in dims ``dims`` of ``x``: a float, or an Int scalar
        when one of them is symbolic."""
        known = math.prod(x.shape[d] for d in dims if x.shape[d] is not None)
        sizes = [self.ops.size(x, d) for d in dims if x.shape[d] is None]
        if not sizes:
            return float(known)
        out = sizes[0]
        for s in sizes[1:]:
            out = self.ops.mul(out, s)
        return out if known == 1 else self.ops.mul(out, known)

    def sym(self, s):
        """A SymInt as an Int scalar of the fusion, built from its expression over the
        symbols the region's inputs carry."""
        return self._expr(s.node.expr)

    def _source(self, text):
        """The Int scalar of an input size whose expression is ``text``, or None."""
        v = self.symbols.get(text)
        if v is None and text in self.sources:
            t, d = self.sources[text]
            v = self.symbols[text] = t if d is None else self.ops.size(t, d)
        return v

    def _expr(self, e):
        import sympy

        from ...compat import sym_floor_div

        FloorDiv = sym_floor_div()

        if e.is_Integer:
            return int(e)
        v = self._source(str(e))
        if v is not None:
            return v
        if e.is_Symbol:  # a multiple of it is an input's size (8*s0: s0 sequences of 8)
            for text in self.sources:
                c, sym = sympy.sympify(text).as_coeff_Mul()
                if c.is_Integer and c > 1 and str(sym) == str(e):
                    return self.ops.div(self._source(text), int(c))  # Int / Int truncates
            raise Unsupported("symbolic size", f"the symbolic size {e} is no region input's size")
        if isinstance(e, FloorDiv):
            return self.ops.div(self._expr(e.args[0]), self._expr(e.args[1]))
        if isinstance(e, (sympy.Mul, sympy.Add)):
            fold = self.ops.mul if isinstance(e, sympy.Mul) else self.ops.add
            terms = [self._expr(a) for a in e.args]
            out = terms[0]
            for t in terms[1:]:
                out = fold(out, t)
            return out
        raise Unsupported("symbolic size", f"the symbolic size {e} ({type(e).__name__}) has no translation")



def _aten_alias(node) -> bool:
    """Whether ATen's result for ``node`` is a view of the region's inputs."""
    while isinstance(node, Node) and node.op == "call_function":
        if node.target not in ATEN_VIEWS:
            return False
        node = node.args[0]
    return isinstance(node, Node) and node.op == "placeholder"


def dense_order(t) -> tuple | None:
    """The dims of ``t`` outermost to innermost in memory when its strides are those of
    a row-major tensor with its dims so permuted (size-1 dims first) and that is not
    row-major order itself; else None.

    A kernel writes its outputs row-major.  An output ATen lays out otherwise (a
    transpose cast to another dtype keeps the transposed strides) would be copied into
    ATen's strides after the kernel, and the kernel's walk over the logical order
    would read its input across the memory order (grouped-query keys,
    repeated and transposed for the scores' matmul: docs/TUNING.md#output-layout).
    In a pointwise region the fusion outputs the tensor permuted into memory order and
    the region views it back; regions with reductions keep the copy (their tiles walk
    the reduced dims, not the memory)."""
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or is_symbolic(t):
        return None
    shape, stride = tuple(t.shape), tuple(t.stride())
    big = [d for d in range(t.dim()) if shape[d] != 1]
    inner = sorted(big, key=lambda d: (-stride[d], d))
    if inner == big:
        return None
    expected = 1
    for d in reversed(inner):
        if stride[d] != expected:
            return None
        expected *= shape[d]
    return tuple(d for d in range(t.dim()) if shape[d] == 1) + tuple(inner)


@timed("translation")
def translate(graph, specs) -> Translation:
    """Record ``graph`` (a region's submodule graph) into a new FusionDefinition."""
    with FusionDefinition() as fd:
        translation = Translator(fd).run(graph, specs)
    return translation
