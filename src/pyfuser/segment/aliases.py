"""Outputs that need no kernel of their own (``Plan.aliases``): fusion inputs, views
of inputs, and broadcasts that repeat elements (returned as a stride-0 expand)."""
from __future__ import annotations

import math

from ..ir.ops import OPS, OpKind
from ..ir.values import TensorVal

VIEW_OPS = ("reshape", "squeeze", "permute")


def is_view_of_input(o, ir) -> bool:
    """Whether ``o`` is a chain of view ops (``VIEW_OPS``) of a fusion input."""
    v = o
    while v.definition is not None:
        if v.definition.op not in VIEW_OPS:
            return False
        v = v.definition.inputs[0]
    return v in ir.inputs and v is not o


def broadcast_chain(o):
    """(source, exprs): the value ``o`` is a chain of broadcast_in_dim of, and those
    exprs in the order they run (none when ``o`` is not a broadcast)."""
    exprs = []
    while o.definition is not None and OPS[o.definition.op].kind is OpKind.BROADCAST_IN_DIM:
        exprs.append(o.definition)
        o = o.definition.inputs[0]
    return o, exprs[::-1]


def expanded_source(o, b):
    """The tensor an output is a chain of broadcast_in_dim of, when the chain repeats
    elements (more elements out than in); else None."""
    v, exprs = broadcast_chain(o)
    if not exprs or not isinstance(v, TensorVal) or math.prod(b.shapes[o]) <= math.prod(b.shapes[v]):
        return None
    return v
