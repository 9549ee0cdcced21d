"""Cut a fusion into pieces: ``subfusion`` copies the part of the graph that computes
some values from some *cut* values into a fresh FusionIR whose inputs are the cuts.

A segment whose inputs are intermediates (a reduction's result stored by an earlier
kernel, a host op's result) is then an ordinary fusion to the schedulers and the
code generator: its cut values have no definition, so they are loaded, not
recomputed.  Clones keep their original indices, so names in dumps and kernels
match the user's fusion.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.concretize import Binding
from ..ir.values import FusionIR, ScalarVal, TensorVal


@dataclass
class SubFusion:
    ir: FusionIR
    orig: dict  # sub Val -> original Val
    exprs: dict  # id(sub Expr) -> original Expr (random state is keyed by expr)


def needed_exprs(outputs, cuts) -> list:
    """Original exprs that compute ``outputs`` from ``cuts``, in program order."""
    needed = {id(o) for o in outputs if o not in cuts}
    ir = outputs[0].fusion
    live = []
    for e in reversed(ir.exprs):
        if any(id(o) in needed for o in e.outputs):
            live.append(e)
            needed.update(id(v) for v in e.inputs if v not in cuts)
    return live[::-1]


def inputs_of(exprs) -> set:
    """The values ``exprs`` read that none of them makes: what a segment loads."""
    made = {o for e in exprs for o in e.outputs}
    return {v for e in exprs for v in e.inputs if v not in made}


def subfusion(outputs, cuts) -> SubFusion:
    sub = FusionIR()
    clone: dict = {}
    orig: dict = {}

    def get(v):
        c = clone.get(v)
        if c is not None:
            return c
        if isinstance(v, TensorVal):
            given = v in cuts or v.definition is None
            contig = v.contiguity if v.definition is None else (True,) * v.rank if given else None
            c = TensorVal(sub, v.index, v.dtype, v.shape, contig, v.stride_order if v.definition is None else None)
        else:
            c = ScalarVal(sub, v.index, v.dtype, v.value)
            given = not v.is_constant
        sub.vals.append(c)
        clone[v], orig[c] = c, v
        if given:
            sub.inputs.append(c)
        return c

    exprs = {}
    for e in needed_exprs(outputs, cuts):
        ins = [get(v) for v in e.inputs]
        outs = []
        for o in e.outputs:
            c = TensorVal(sub, o.index, o.dtype, o.shape) if isinstance(o, TensorVal) else \
                ScalarVal(sub, o.index, o.dtype)
            sub.vals.append(c)
            clone[o], orig[c] = c, o
            outs.append(c)
        se = sub.add_expr(e.op, ins, outs, e.attrs)
        if hasattr(e, "spelling"):
            se.spelling = e.spelling
        exprs[id(se)] = e
    sub.outputs = [get(o) for o in outputs]
    sub.inputs.sort(key=lambda v: v.index)
    return SubFusion(sub, orig, exprs)


def bind_sub(sf: SubFusion, b: Binding, env) -> Binding:
    """The binding of a subfusion: its inputs' values from ``env`` (original Val ->
    tensor or number), every shape from the fusion's binding."""
    values = {c: env[sf.orig[c]] for c in sf.ir.inputs}
    for c in sf.ir.vals:
        if isinstance(c, ScalarVal) and c.is_constant:
            values[c] = c.value
    shapes = {c: b.shapes[o] for c, o in sf.orig.items() if isinstance(c, TensorVal) and o in b.shapes}
    sb = Binding(values, shapes, b.device)
    sb.input_pos = {v: i for i, v in enumerate(sf.ir.inputs)}
    return sb


