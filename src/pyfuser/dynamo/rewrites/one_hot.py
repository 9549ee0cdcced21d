"""Sums of a one-hot selection, taken without the sum.

The gradient of ``nll_loss`` (``decompositions.nll_loss_backward``) is a one-hot row:
``where((arange(C) == target) & valid, g, 0)``.  ``_log_softmax_backward_data`` then
sums it over the classes, so the fusion computes a [tokens, vocabulary] selection
only to add it up: at 8192 x 30522 that row sum was a kernel of its own,
compute-bound before any byte of the logits was read (docs/TUNING.md#pad-matmuls).  The sum of such a row
is ``g`` when the target is a class, else 0, so the sum is rewritten as
``where(valid & (0 <= target) & (target < C), g, 0)``, computed per row; what is left
of the log-softmax backward is pointwise.

Rewritten: ``aten.sum.dim_IntList(where(mask, a, 0), [d], keepdim)`` (float results;
float casts between the ``where`` and the sum, as autocast leaves them, are applied to
the per-row value) where ``mask`` is a ``&`` of terms of which exactly one is ``eq(arange(C) along d,
t)``, and ``t``, ``a`` and every other term are constant along ``d`` (size 1 there).
"""
from __future__ import annotations

import torch

from ..rules import meta
from .sum_views import replace_nodes

aten = torch.ops.aten
_ANDS = (aten.bitwise_and.Tensor, aten.logical_and.default)
_UNSQUEEZES = (aten.unsqueeze.default,)


def one_hot_sums(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm`` in place (see the module docstring); returns how many sums."""
    return replace_nodes(gm, aten.sum.dim_IntList, _one_hot_sum, _per_row)


def _per_row(graph, node, found):
    """The sum ``node`` of a one-hot selection, as one value per row."""
    where, casts, d, terms, t, classes, keepdim = found
    cond = graph.call_function(aten.ge.Scalar, (t, 0))
    cond = graph.call_function(aten.bitwise_and.Tensor, (cond, graph.call_function(aten.lt.Scalar, (t, classes))))
    for term in terms:
        cond = graph.call_function(aten.bitwise_and.Tensor, (cond, term))
    out = graph.call_function(aten.where.self, (cond, where.args[1], where.args[2]))
    for cast in reversed(casts):  # the casts between the selection and the sum: 0 stays 0
        out = graph.call_function(aten._to_copy.default, (out,), dict(cast.kwargs))
    shape = [1 if i == d else s for i, s in enumerate(meta(node.args[0]).shape)]
    out = graph.call_function(aten.expand.default, (out, shape))  # a per-row value of the sum's shape
    out = graph.call_function(aten.clone.default, (out,))
    if not keepdim:
        out = graph.call_function(aten.squeeze.dim, (out, d))
    if meta(node).dtype != meta(node.args[0]).dtype:
        out = graph.call_function(aten._to_copy.default, (out,), {"dtype": meta(node).dtype})
    return out


def _is_zero(x) -> bool:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x == 0
    if isinstance(x, torch.fx.Node) and x.op == "call_function" and x.target is aten.scalar_tensor.default:
        return isinstance(x.args[0], (int, float)) and x.args[0] == 0
    return False


def _constant_along(x, d: int, rank: int) -> bool:
    """Whether ``x`` (a node or a Python scalar) broadcasts along dim ``d`` of a rank-``rank`` result."""
    v = meta(x)
    if not isinstance(v, torch.Tensor):
        return not isinstance(x, torch.fx.Node)
    pos = d - (rank - v.dim())
    return pos < 0 or v.shape[pos] == 1


def _and_terms(node) -> list:
    if isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _ANDS:
        return _and_terms(node.args[0]) + _and_terms(node.args[1])
    return [node]


def _iota_along(x, d: int, rank: int):
    """C when ``x`` is ``arange(C)`` (from 0, step 1) unsqueezed so it runs along dim
    ``d`` of a rank-``rank`` result, else None."""
    n = x
    while isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in _UNSQUEEZES:
        n = n.args[0]
    if not (isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is aten.arange.default):
        return None
    if len(n.args) != 1 or not isinstance(n.args[0], int):
        return None
    v = meta(x)
    if not isinstance(v, torch.Tensor):
        return None
    pos = d - (rank - v.dim())
    if pos < 0 or v.shape[pos] != n.args[0] or sum(1 for s in v.shape if s != 1) != 1:
        return None
    return n.args[0]


def _float_cast(n) -> bool:
    """A ``_to_copy`` that changes a float tensor's dtype only (0 stays 0)."""
    if not (isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is aten._to_copy.default):
        return False
    if set(n.kwargs) - {"dtype", "layout", "device"} or meta(n).device != meta(n.args[0]).device:
        return False
    return meta(n).dtype.is_floating_point and meta(n.args[0]).dtype.is_floating_point


def _one_hot_sum(node):
    """(where, casts, d, other mask terms, target, classes, keepdim) when ``node``
    sums a one-hot selection over one dim (see the module docstring; ``casts``: the
    float casts between the selection and the sum, outermost first), else None."""
    args = list(node.args) + [None] * 2
    where, dims, keepdim = args[0], args[1], bool(args[2] if args[2] is not None else node.kwargs.get("keepdim", False))
    if node.kwargs.get("dtype") is not None or not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return None
    casts = []
    while _float_cast(where):  # autocast: the fp32 selection cast to fp16 and back before the sum
        casts.append(where)
        where = where.args[0]
    if not (isinstance(where, torch.fx.Node) and where.op == "call_function" and where.target is aten.where.self):
        return None
    out = meta(where)
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        return None
    rank = out.dim()
    d = dims[0] % rank
    mask, a, b = where.args
    if not _is_zero(b) or not _constant_along(a, d, rank):
        return None
    terms = _and_terms(mask)
    picks = []
    for i, term in enumerate(terms):
        if isinstance(term, torch.fx.Node) and term.op == "call_function" and term.target is aten.eq.Tensor:
            for x, t in (term.args, term.args[::-1]):
                classes = _iota_along(x, d, rank)
                if classes is not None and isinstance(t, torch.fx.Node) and _constant_along(t, d, rank):
                    picks.append((i, t, classes))
                    break
    if len(picks) != 1:
        return None
    i, t, classes = picks[0]
    others = [term for j, term in enumerate(terms) if j != i]
    if not all(isinstance(term, torch.fx.Node) and _constant_along(term, d, rank) for term in others):
        return None
    if meta(t).dtype.is_floating_point or meta(t).dtype == torch.bool:
        return None
    return where, casts, d, others, t, classes, keepdim
