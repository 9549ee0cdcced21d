"""A batched matmul whose result is read transposed is computed transposed.

In attention's backward the gradient of the keys comes out of ``bmm`` as the gradient
of their transpose, [batch * heads, head_dim, seq], and the region after it transposes
it back (for grouped-query attention it also sums the query heads that share a key
head).  A kernel walks its values in logical row-major order, so it reads that result
with ``seq`` elements between neighbours: a gather, each element its own memory
transaction.  Since (A B)^T = B^T A^T, the same product computed as
``bmm(b^T, a^T)`` lands in memory already transposed (cuBLAS takes transposed
operands at no cost) and the region reads it in order:

    bmm(a, b)   ->   transpose(bmm(transpose(b, 1, 2), transpose(a, 1, 2)), 1, 2)

Rewritten: a ``bmm`` with static sizes whose readers, followed through views and
dtype casts (which keep their input's layout in ATen and are indexed like it in a
kernel), take it with their innermost dim strided under its layout and contiguous
under the transposed one, for at least one reader that is not a matmul and for none
the other way round.  Not one that reaches a graph output (the caller, or the
backward, would see the other layout), nor one a view cannot follow in the other
layout.  Both layouts are played through each reader's views on meta tensors.
"""
from __future__ import annotations

import torch

from ..rules import ATEN_VIEWS, meta
from .sum_views import replace_nodes

aten = torch.ops.aten

# Ops a value is followed through: views, and casts, whose result has the input's layout.
_FOLLOWED = frozenset(ATEN_VIEWS) | {aten._to_copy.default}
# Readers indifferent to the layout (cuBLAS reads either).
_MATMULS = frozenset({aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default})


def transposed_matmuls(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm``'s bmms read transposed in place (see the module docstring);
    returns how many."""
    return replace_nodes(gm, aten.bmm.default, lambda node: True if _read_transposed(node) else None, _turned)


def _turned(graph, node, _):
    """``bmm(b^T, a^T)^T``: ``node``'s product, computed in the transposed layout."""
    a, b = node.args
    product = graph.call_function(aten.bmm.default, (graph.call_function(aten.transpose.int, (b, 1, 2)),
                                                     graph.call_function(aten.transpose.int, (a, 1, 2))))
    back = graph.call_function(aten.transpose.int, (product, 1, 2))
    back.meta.update({k: v for k, v in node.meta.items() if k != "val"})  # its source line, for the reports
    return back


def _read_transposed(node) -> bool:
    v = meta(node)
    if not isinstance(v, torch.Tensor) or v.dim() != 3 or not all(isinstance(s, int) for s in v.shape):
        return False
    n, m, p = v.shape
    if v.stride() != (m * p, p, 1) or m == 1 or p == 1:
        return False
    now = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    other = torch.empty_strided(v.shape, (m * p, 1, m), dtype=v.dtype, device="meta")
    votes = []
    if not _readers(node, now, other, votes):
        return False
    return any(o and not w for w, o in votes) and not any(w and not o for w, o in votes)


def _readers(node, now, other, votes) -> bool:
    """Append (contiguous now, contiguous transposed) for each reader of ``node``
    reached through ``_FOLLOWED`` ops; False when one is a graph output, or a view
    that the transposed layout does not allow or would copy in (a ``reshape``)."""
    for user in node.users:
        if user.op == "output":
            return False
        if user.op != "call_function":
            return False
        if user.target in _FOLLOWED and user.args and user.args[0] is node \
                and not any(isinstance(a, torch.fx.Node) for a in list(user.args[1:]) + list(user.kwargs.values())):
            kwargs = {k: v for k, v in user.kwargs.items() if k != "device"}  # played on meta tensors
            try:
                a = user.target(now, *user.args[1:], **kwargs)
                b = user.target(other, *user.args[1:], **kwargs)
            except (RuntimeError, ValueError):  # a view the transposed layout cannot take
                return False  # (ValueError: torch's Python reference, under AOTAutograd's Python dispatcher)
            if user.target in ATEN_VIEWS and a._is_view() and not b._is_view():
                return False  # a reshape that would copy in the transposed layout only
            if not _readers(user, a, b, votes):
                return False
        elif user.target not in _MATMULS:
            votes.append((_innermost_contiguous(now), _innermost_contiguous(other)))
    return True


def _innermost_contiguous(t: torch.Tensor) -> bool:
    """Whether ``t``'s innermost dim of more than one element has stride 1."""
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if size > 1:
            return stride == 1
    return True
