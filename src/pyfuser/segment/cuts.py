"""Where a fusion is cut: the host op each value depends on last, the narrow value
stored under an upcast, the first reductions of a group no scheduler takes."""
from __future__ import annotations

import math

from ..ir.ops import OPS, REDUCTION_KINDS
from ..ir.values import TensorVal
from .subfusion import needed_exprs


def nonempty(b, v) -> bool:
    return math.prod(b.shapes[v]) > 0


def host_levels(live, hosts) -> dict:
    """Per value: the position of the last host op it depends on (-1: none)."""
    pos = {id(h): i for i, h in enumerate(hosts)}
    level: dict = {}
    for e in live:
        lv = max((level.get(v, -1) for v in e.inputs), default=-1)
        if id(e) in pos:
            lv = pos[id(e)]
        for o in e.outputs:
            level[o] = lv
    return level


def narrow_source(v, cuts):
    """Store the narrower value under an upcast: a host op's fp32 input that is a cast
    of an fp16/bf16 value is stored at 16 bits and cast again in torch.  Returns the
    value to store and the cast exprs to replay (outermost last)."""
    casts = []
    while (v not in cuts and v.definition is not None and v.definition.op == "cast"
           and isinstance(v.definition.inputs[0], TensorVal)
           and v.dtype.torch.is_floating_point and v.definition.inputs[0].dtype.torch.is_floating_point
           and v.definition.inputs[0].dtype.torch.itemsize < v.dtype.torch.itemsize):
        casts.append(v.definition)
        v = v.definition.inputs[0]
    return v, casts[::-1]


def first_reductions(outputs, cuts) -> list:
    """Outputs of the reductions that compute ``outputs`` from ``cuts`` and read no
    other reduction's result: where a fusion that needs two kernels splits."""
    exprs = needed_exprs(outputs, cuts)
    made = {o: e for e in exprs for o in e.outputs}
    reduced: dict = {}
    first = []
    for e in exprs:
        after = any(reduced.get(v, False) for v in e.inputs if v in made)
        is_red = OPS[e.op].kind in REDUCTION_KINDS
        if is_red and not after:
            first += [o for o in e.outputs if o not in first]
        for o in e.outputs:
            reduced[o] = after or is_red
    needed = {v for e in exprs for v in e.inputs} | set(outputs)
    return [o for o in first if o in needed]
