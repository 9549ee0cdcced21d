"""Sums over a reshape that merged the leading dims, taken over those dims instead.

A linear layer's bias gradient is ``grad.view(tokens, hidden).sum(0)``, where
``grad`` is [batch, seq, hidden] and comes out of the region before it (a
layer-norm backward).  The reshape of a row normalization's result ends its kernel
(``sink_views``), so the sum ran as a kernel of its own, one
per layer and per bias, re-reading the gradient.  ``grad.sum((0, 1))`` is the same
sum: the region keeps it, and the inner-outer tile computes it beside the layer
norm's dw and db from the rows it holds.

Rewritten: ``aten.sum.dim_IntList(view(x, [a * b * ..., *rest]), [0], keepdim,
dtype=)`` where ``x`` is ``[a, b, ..., *rest]``; with ``keepdim`` the result is viewed
back to ``[1, *rest]``.  The other way round too: a sum over dims ``[0, ..., m-1]``
of a view that split ``x``'s dim 0 into ``m`` dims is a sum over ``x``'s dim 0 (the
masked-LM head's bias gradient once ``sink_views`` has moved its reshape).  The view stays for its other users (the weight gradient's
matmul).
"""
from __future__ import annotations

import math

import torch

from ..rules import RESHAPES, meta

aten = torch.ops.aten
def _shape(node):
    v = meta(node)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else None


def sums_through_views(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm`` in place (see the module docstring); returns how many sums."""
    return replace_nodes(gm, aten.sum.dim_IntList, _merged_leading, _sum_of_source)


def replace_nodes(gm: torch.fx.GraphModule, target, match, build) -> int:
    """Replace every ``target`` node that ``match(node)`` accepts (not None) by
    ``build(graph, node, match's result)``, built just before it; then drop what
    became dead.  Returns how many were replaced."""
    graph, count = gm.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not target:
            continue
        found = match(node)
        if found is None:
            continue
        with graph.inserting_before(node):
            out = build(graph, node, found)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        count += 1
    if count:
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
    return count


def _sum_of_source(graph, node, merged):
    src, m, keepdim, n_out = merged
    total = graph.call_function(aten.sum.dim_IntList, (src, list(range(m)), False), dict(node.kwargs))
    if keepdim:
        return graph.call_function(aten.view.default, (total, [1] * n_out + list(_shape(src)[m:])))
    return total


def _merged_leading(node):
    """(source, how many of its leading dims to sum, keepdim, how many leading dims
    the sum's input has) when ``node`` sums dim 0 of a view whose dim 0 is its
    source's first dims merged, or the first dims of a view that split its source's
    dim 0, the rest equal."""
    args = list(node.args) + [None] * 3
    view, dims, keepdim = args[0], args[1], bool(args[2] if args[2] is not None else node.kwargs.get("keepdim", False))
    if not isinstance(view, torch.fx.Node) or view.op != "call_function" or view.target not in RESHAPES:
        return None
    src = view.args[0]
    before, after = _shape(src), _shape(view)
    if before is None or after is None or len(after) < 1 or not isinstance(dims, (list, tuple)):
        return None
    summed = sorted(d % len(after) for d in dims)
    if summed == [0]:
        m = leading_merge(before, after)
        return None if m is None else (src, m, keepdim, 1)
    if len(summed) >= 2 and summed == list(range(len(summed))) and leading_merge(after, before) == len(summed):
        return src, 1, keepdim, len(summed)
    return None


def leading_merge(before, after) -> int | None:
    """m >= 2 when ``after`` is ``before`` with its first m dims merged into one (the
    rest equal), else None."""
    for m in range(2, len(before) + 1):
        if after and math.prod(before[:m]) == after[0] and tuple(before[m:]) == tuple(after[1:]):
            return m
    return None
