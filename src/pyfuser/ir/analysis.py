"""Analyses of a segment's exprs that schedulers and the code generator share.

``SegmentAnalysis`` computes them once per segment (``schedulers.base.Segment.analysis``):
the exprs a set of outputs needs, the reductions and their levels, the online-softmax
pairs, the values computed from reduction results.  The functions stay usable on
their own (the code generator calls them on the outputs it is given).
"""
from __future__ import annotations

from functools import cached_property

from .dtypes import DataType
from .ops import OPS, REDUCTION_KINDS, OpKind
from .shapes import reduce_shape
from .values import TensorVal


def live_exprs_for(outputs):
    """Exprs that the given outputs depend on, in program order."""
    return outputs[0].fusion.live_exprs(outputs)


def is_reduction(o) -> bool:
    """Whether value ``o`` is the result of a reduction (or var_mean)."""
    return o.definition is not None and OPS[o.definition.op].kind in REDUCTION_KINDS


def reduction_levels(exprs) -> dict:
    """Level of each reduction: 1 + the highest level among reductions feeding it."""
    level: dict = {}
    memo: dict = {}

    def depth(v):
        if id(v) in memo:
            return memo[id(v)]
        e = v.definition
        if e is None:
            d = 0
        else:
            d = max((depth(i) for i in e.inputs), default=0)
            if OPS[e.op].kind in REDUCTION_KINDS:
                level[e] = d + 1
                d = d + 1
        memo[id(v)] = d
        return d

    for e in exprs:
        for o in e.outputs:
            depth(o)
    return level


def after_reductions(outputs) -> set:
    """The values computed from some reduction's result."""
    exprs = live_exprs_for(outputs)
    levels = reduction_levels(exprs)
    after = set()
    for e in exprs:
        if e in levels or any(v in after for v in e.inputs):
            after.update(e.outputs)
    return after


def computed_from(outputs, exprs) -> set:
    """Values computed (directly or not) from the outputs of ``exprs``."""
    seen = {o for e in exprs for o in e.outputs}
    for e in live_exprs_for(outputs):
        if any(v in seen for v in e.inputs):
            seen.update(e.outputs)
    return seen


def _accumulates_in_float32(dt: DataType) -> bool:
    # fp16 and bf16 are computed in fp32 (``codegen.lower.compute_dtype``)
    return dt in (DataType.Half, DataType.BFloat16, DataType.Float)


def split_eligible(outputs, shapes, ref, red_dims) -> bool:
    """Whether a split tile can compute ``outputs``: one level of reductions, each
    accumulating in float32, and every output that depends on a reduction shaped
    like the reduction's result (only the strip's last program has the results)."""
    exprs = live_exprs_for(outputs)
    levels = reduction_levels(exprs)
    if not levels or len(set(levels.values())) != 1:
        return False
    if any(not _accumulates_in_float32(e.outputs[-1].dtype) for e in levels):
        return False
    kept = {reduce_shape(shapes[ref], red_dims, False), reduce_shape(shapes[ref], red_dims, True)}
    after = after_reductions(outputs)
    return all(shapes[o] in kept for o in outputs if o in after)


def online_softmax_pairs(levels: dict) -> dict:
    """Sums of the form sum(exp(a - broadcast(max(a)))) over the same dims, in fp32 or
    fp64: the max and the sum can run in one pass with a rescaled running sum."""
    maxes = {e.outputs[0]: e for e in levels if e.op == "max"}
    pairs = {}
    for s_expr in levels:
        if s_expr.op != "sum" or s_expr.attrs.get("dtype") is not None:
            continue
        ex = s_expr.inputs[0].definition
        if ex is None or ex.op != "exp":
            continue
        sub = ex.inputs[0].definition
        if sub is None or sub.op != "sub" or not all(isinstance(v, TensorVal) for v in sub.inputs):
            continue
        a, b = sub.inputs
        while b.definition is not None and OPS[b.definition.op].kind is OpKind.BROADCAST_IN_DIM:  # or expand
            b = b.definition.inputs[0]
        m_expr = maxes.get(b)
        if m_expr is None or m_expr.inputs[0] is not a or m_expr.attrs["dims"] != s_expr.attrs["dims"]:
            continue
        if not all(v.dtype in (DataType.Float, DataType.Double) and v.dtype is a.dtype
                   for v in (a, sub.outputs[0], ex.outputs[0], s_expr.outputs[0], m_expr.outputs[0])):
            continue
        pairs[s_expr] = (m_expr, a)
    return pairs


class SegmentAnalysis:
    """The analyses of one segment (its ``outputs`` at concrete ``shapes``), each
    computed on first use and kept: every scheduler's checks, heuristics, emit and
    fallbacks ask the same questions of the same segment."""

    def __init__(self, outputs, shapes):
        self.outputs, self.shapes = list(outputs), shapes

    @cached_property
    def exprs(self) -> list:
        return live_exprs_for(self.outputs)

    @cached_property
    def reductions(self) -> list:
        return [e for e in self.exprs if OPS[e.op].kind in REDUCTION_KINDS]

    @cached_property
    def levels(self) -> dict:
        """Reduction expr -> level (``reduction_levels``)."""
        return reduction_levels(self.exprs)

    @cached_property
    def online_pairs(self) -> dict:
        """Sum expr -> (max expr, a) (``online_softmax_pairs``)."""
        return online_softmax_pairs(self.levels)

    @cached_property
    def after_reductions(self) -> set:
        return after_reductions(self.outputs)

    def split_eligible(self, ref, red_dims) -> bool:
        key = (ref, tuple(red_dims))
        memo = self.__dict__.setdefault("_split", {})
        if key not in memo:
            memo[key] = split_eligible(self.outputs, self.shapes, ref, red_dims)
        return memo[key]
