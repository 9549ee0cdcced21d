"""ATen graph region -> FusionDefinition, node by node through ``rules.RULES``.

Every translated node is checked against the shape and dtype its ATen op gives
(the FX node's ``meta["val"]``); a mismatch raises ``Unsupported`` and the region
falls back to ATen instead of computing something different.

Shapes are concrete: fusion inputs are defined with the example tensors' sizes, and
their contiguity and stride order come from the strides (``input_layout``).  The
backend keys its fusion cache on exactly these, plus the region's op text.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch.fx.node import Node, map_arg

from ..frontend import FusionDefinition
from ..frontend.descriptor import contiguity_in_allocation_order
from ..ir.dtypes import from_torch
from ..ir.values import TensorVal
from .rules import ATEN_VIEWS, RULES, Unsupported, bind_args, meta


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
            contiguity = contiguity_in_allocation_order(spec.contiguity, spec.stride_order)  # as define_tensor lists it
            t = self.fd.define_tensor(shape=list(spec.shape), contiguity=contiguity,
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



def _aten_alias(node) -> bool:
    """Whether ATen's result for ``node`` is a view of the region's inputs."""
    while isinstance(node, Node) and node.op == "call_function":
        if node.target not in ATEN_VIEWS:
            return False
        node = node.args[0]
    return isinstance(node, Node) and node.op == "placeholder"


def translate(graph, specs) -> Translation:
    """Record ``graph`` (a region's submodule graph) into a new FusionDefinition."""
    with FusionDefinition() as fd:
        translation = Translator(fd).run(graph, specs)
    return translation
