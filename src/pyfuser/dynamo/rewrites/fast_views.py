"""The views between fused regions rewritten to calls built from their traced strides.

After partitioning, a 12-layer training step still runs over a thousand view ops in ATen per
step (``view``, ``t``, ``transpose``, ``expand``, ``_unsafe_view``, ...): the reshapes
around every matmul and attention head.  Each costs a trip through the dispatcher
(docs/TUNING.md#host-time) while the result is known at
compile time: with static shapes the traced metadata gives the view's sizes, strides
and offset relative to its input.  A view with symbolic (dynamic) sizes or strides
has no such numbers and stays ATen's.  ``fast_views`` replaces each such node by ``regions/views.reinterpret``, which builds the
view directly from those numbers, at a fraction of that cost.

Safe by construction: the view is taken only when the input arrives with the strides
it was traced with (then ATen's view would produce exactly these sizes, strides and
offset); any other input runs the original op.

A view whose input is another view used nowhere else (``view`` then ``permute``
around every attention head: about 30% of them) is built straight from the
first view's input (``reinterpret_chain``): one header instead of two, the
intermediate node gone.  With other strides than traced, the chain's ops run in turn.
"""
from __future__ import annotations

import torch

from ..regions import views
from ..rules import ATEN_VIEWS

aten = torch.ops.aten

# The ops with a view rule (``rules.ATEN_VIEWS``), but reshape, which copies when the
# input's strides do not allow a view.
VIEW_OPS = frozenset(ATEN_VIEWS - {aten.reshape.default})


def _chain_of(node):
    """``reinterpret_chain``'s replay list for a rewritten view node, or None when its
    op takes other nodes than its input (then it cannot move away from them)."""
    if node.target is views.reinterpret_chain:
        return node.args[5]
    op, args, kwargs = node.args[5:8]
    rest = tuple(args[1:])
    found = []
    torch.fx.node.map_arg((rest, kwargs), found.append)
    return None if found else ((op, rest, dict(kwargs)),)


def _compose_chains(gm: torch.fx.GraphModule) -> int:
    """Fold each rewritten view whose input is a rewritten view with no other user into
    one ``reinterpret_chain`` from the first view's input; returns how many folded."""
    folded = 0
    built = (views.reinterpret, views.reinterpret_chain)
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in built:
            continue
        src = node.args[0]
        if not isinstance(src, torch.fx.Node) or src.target not in built or len(src.users) != 1:
            continue
        first, own = _chain_of(src), _chain_of(node)
        if first is None or own is None:
            continue
        root, root_stride, _, _, root_delta = src.args[:5]
        node.args = (root, root_stride, node.args[2], node.args[3], node.args[4] + root_delta, first + own)
        node.target = views.reinterpret_chain
        gm.graph.erase_node(src)
        folded += 1
    return folded


def fast_views(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm``'s view nodes (top-level graph) to ``reinterpret``, chains of
    them to ``reinterpret_chain``; returns how many view nodes were rewritten."""
    count = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in VIEW_OPS:
            continue
        x = node.args[0]
        out, src = node.meta.get("val"), getattr(x, "meta", {}).get("val")
        if not isinstance(out, torch.Tensor) or not isinstance(src, torch.Tensor) or not all(
                isinstance(v, int) for v in (*out.shape, *out.stride(), *src.stride())):
            continue
        delta = out.storage_offset() - src.storage_offset()
        node.args = (x, tuple(src.stride()), tuple(out.shape), tuple(out.stride()), delta, node.target,
                     tuple(node.args), dict(node.kwargs))
        node.kwargs = {}
        node.target = views.reinterpret
        count += 1
    if count:
        _compose_chains(gm)
        gm.recompile()
    return count
