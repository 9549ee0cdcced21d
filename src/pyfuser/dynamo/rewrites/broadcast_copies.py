"""A strided tensor that regions read broadcast is copied into row-major order once.

A relative position bias is an embedding lookup, [query, key, heads], viewed as
[1, heads, query, key]: along its last dim neighbours lie ``heads`` elements apart.
Every encoder layer adds it to its [batch, heads, query, key] scores, and a kernel
walks its values in logical row-major order, so each layer's softmax read the bias
``batch`` times over as a gather: one 32-byte sector for every 4 bytes used, all of
it through the L2.  Copied once into row-major order (12.6 MB at 512 positions
and 12 heads), every reader takes whole sectors instead (docs/TUNING.md#broadcast-copies).

Rewritten: a tensor strided in its last dim (stride not 1, size above 1) of at least
``LAYOUT_COPY_MIN_NUMEL`` elements, read by computing ops whose results are larger
than it (they broadcast it) and contiguous in their last dim, for at least twice its
size in all: those readers read ``aten.clone(x, memory_format=torch.contiguous_format)``
instead, one copy shared by all of them.  A reader of its own size (a transpose
written out, which the pointwise tile reads in order) keeps the strided tensor.
"""
from __future__ import annotations

import torch

from ..rules import LAYOUT_COPY_MIN_NUMEL, is_compute, meta
from ..regions.translate import is_symbolic

aten = torch.ops.aten


def broadcast_copies(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm`` in place (see the module docstring); returns how many copies."""
    graph, count = gm.graph, 0
    for node in list(graph.nodes):
        readers = _broadcast_readers(node)
        if not readers:
            continue
        with graph.inserting_after(node):
            copy = graph.call_function(aten.clone.default, (node,), {"memory_format": torch.contiguous_format})
        copy.meta.update({k: v for k, v in node.meta.items() if k != "val"})  # its source line, for the reports
        for reader in readers:
            reader.replace_input_with(node, copy)
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count


def _broadcast_readers(node) -> list:
    """``node``'s readers that take it broadcast while it is strided in its last dim,
    when they read at least twice its elements in all (else none)."""
    v = meta(node)  # symbolic sizes are left alone: comparing them would add guards
    if not isinstance(v, torch.Tensor) or v.dim() < 2 or is_symbolic(v):
        return []
    if v.shape[-1] == 1 or v.stride()[-1] == 1 or v.numel() < LAYOUT_COPY_MIN_NUMEL:
        return []
    size = v.numel()
    readers, reads = [], 0
    for user in node.users:
        out = meta(user)
        if not is_compute(user) or not isinstance(out, torch.Tensor) or out.dim() == 0 or is_symbolic(out):
            continue
        if out.numel() <= size or out.stride()[-1] != 1:
            continue
        readers.append(user)
        reads += out.numel()
    return readers if reads >= 2 * size else []
