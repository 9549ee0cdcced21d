"""Reshapes of a row reduction's result moved below the pointwise ops that read them.

A reshape that changes the leading dims of a value computed from a row reduction
ends the reduction's kernel: no tile writes rows of one shape as another, and the
segmenter runs what follows in a kernel of its own.  A masked-LM head
does that in its backward: the log-softmax gradient, [tokens, vocabulary], is viewed
as [batch, seq, vocabulary], added to the logits' tangent, and viewed back to
[tokens, vocabulary] for the decoder's GEMMs.  Split there, the gradient was written
by one kernel and read back by the next (1 GB per step at 64 x 128).  The add is as
well computed on [tokens, vocabulary], with the tangent viewed that way:

    add(view(x, S), y)   ->   view(add(x, view(y, shape(x))), S)

A view chain that comes back to its source's shape is then the source itself, and
a sum over the split leading dims is a sum over the source's first dim
(``sum_views``).  So the region runs from the log-softmax backward to the padded
gradient with no reshape inside.

Rewritten: a reshape ``R`` whose source depends on a row reduction through fusible
ops, that changes only leading dims (the last one is kept), and a pointwise user of
``R`` whose other tensor operands have ``R``'s shape and are contiguous (viewing them
is free); repeated until no such user is left.
"""
from __future__ import annotations

import torch

from ...compat import OpOverload
from ..rules import RESHAPES, meta, reduction_kind, unsupported_reason

aten = torch.ops.aten


def sink_views(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm`` in place (see the module docstring); returns how many ops moved."""
    graph = gm.graph
    after_row = _after_row_reductions(graph)
    count = 0
    work = [n for n in graph.nodes if _sinkable(n, after_row)]
    while work:
        view = work.pop()
        src = view.args[0]
        for user in list(view.users):
            if not _pointwise_over(user, view):
                continue
            with graph.inserting_before(user):
                args = [src if a is view else _viewed(graph, a, meta(src).shape) for a in user.args]
                moved = graph.call_function(user.target, tuple(args), dict(user.kwargs))
                moved.meta = {"val": _fake_like(meta(user), meta(src).shape)}
                back = graph.call_function(aten.view.default, (moved, list(meta(view).shape)))
                back.meta = dict(user.meta)
            user.replace_all_uses_with(back)
            graph.erase_node(user)
            after_row.add(moved)
            work.append(back)
            count += 1
    count += _collapse_view_chains(graph)
    if count:
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
    return count


def _after_row_reductions(graph) -> set:
    """Nodes computed from a row reduction through ops a region can hold."""
    out = set()
    for n in graph.nodes:
        if n.op != "call_function" or unsupported_reason(n) is not None:
            continue
        if reduction_kind(n) == "row" or any(i in out for i in n.all_input_nodes):
            out.add(n)
    return out


def _sinkable(n, after_row) -> bool:
    if n.op != "call_function" or n.target not in RESHAPES or n.args[0] not in after_row:
        return False
    before, after = meta(n.args[0]), meta(n)
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return False
    if before.dim() == 0 or after.dim() == 0 or before.shape[-1] != after.shape[-1]:
        return False
    return before.is_contiguous() and tuple(before.shape) != tuple(after.shape)


def _pointwise_over(user, view) -> bool:
    """Whether ``user`` is a pointwise op of ``view`` whose other tensor operands have
    the view's shape and are contiguous (so viewing them back costs nothing)."""
    if user.op != "call_function" or not isinstance(user.target, OpOverload):
        return False
    if torch.Tag.pointwise not in user.target.tags or user.kwargs:
        return False
    out = meta(user)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(meta(view).shape):
        return False
    for a in user.args:
        if a is view:
            continue
        if isinstance(a, torch.fx.Node):
            v = meta(a)
            if not isinstance(v, torch.Tensor):
                return False
            if v.dim() > 0 and (tuple(v.shape) != tuple(out.shape) or not v.is_contiguous()):
                return False
        elif not isinstance(a, (int, float, bool)):
            return False
    return True


def _viewed(graph, a, shape):
    if not isinstance(a, torch.fx.Node) or meta(a).dim() == 0:
        return a
    v = graph.call_function(aten.view.default, (a, list(shape)))
    v.meta = {"val": _fake_like(meta(a), shape)}
    return v


def _fake_like(t, shape):
    """A fake tensor of ``t``'s dtype and device with a contiguous ``shape`` (for the
    checks of later rewrites; the backend recomputes every node's meta afterwards)."""
    return t.new_empty(tuple(shape))


def _collapse_view_chains(graph) -> int:
    """``view(view(x, A), shape(x))`` is ``x``."""
    count = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in RESHAPES:
            continue
        inner = n.args[0]
        if not (isinstance(inner, torch.fx.Node) and inner.op == "call_function" and inner.target in RESHAPES):
            continue
        root = inner.args[0]
        v = meta(root)
        if isinstance(v, torch.Tensor) and tuple(v.shape) == tuple(meta(n).shape):
            n.replace_all_uses_with(root)
            graph.erase_node(n)
            count += 1
    return count
