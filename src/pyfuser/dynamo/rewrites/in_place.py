"""Accumulations into a fresh zero tensor made in place.

A functional graph writes ``index_add(zeros, dim, index, rows)`` (the embedding's
weight gradient, ``decompositions.embedding_dense_backward``): ATen's out-of-place
op copies the zeros before adding into the copy, an extra read and write of the
whole table ([30522, 768] fp32: 94 MB each way, per step).  Where the
zeros are made by a ``full`` (``zeros``, ``new_zeros``, ``zeros_like``) that nothing
else reads, the add goes into them in place (``index_add_``) and the copy is gone.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_FRESH = (aten.full.default, aten.zeros.default, aten.new_zeros.default, aten.zeros_like.default)


def index_add_in_place(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm`` in place (see the module docstring); returns how many adds moved."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.index_add.default:
            continue
        base = node.args[0]
        if not (isinstance(base, torch.fx.Node) and base.op == "call_function" and base.target in _FRESH
                and len(base.users) == 1):
            continue
        node.target = aten.index_add_.default
        count += 1
    if count:
        gm.recompile()
    return count
