"""What the backward recomputes instead of saving: AOTAutograd's min-cut partitioner,
with each reader of a tensor made from scalars alone given its own copy to rebuild.

BERT builds its extended attention mask once, at the top of the forward: an
``iota`` compared with a bound, expanded to [batch, 1, seq, seq] and filled with 0 or
the dtype's minimum.  Every layer's softmax adds it to the scores.  Min-cut bans the
recomputation of an op that reads a tensor after another of that tensor's readers
was followed by an op it cannot fuse ("used far apart": it keeps a residual stream
from being recomputed across layers), so the mask adds of layers 1-11, which come
after layer 0's matmuls, could not be recomputed; neither could the probabilities
computed from them.  Min-cut saved those layers' fp32 probabilities ([batch, heads,
seq, seq], twice the bytes of the fp16 scores: 50 MB a layer written by the forward
and read by the backward at batch 64 x seq 128, 200 MB at 16 x 512), while layer 0
saved its scores' two row statistics and recomputed the rest.

``tag_scalar_derived`` gives every op that reads such a tensor its own copy of the
ops that make it (an ``iota``, a compare, an expand, a ``where``), each marked
``MUST_RECOMPUTE``, the tag selective activation checkpointing uses: no reader
shares the mask, min-cut never saves it, and each region that needs it rebuilds it
(a compare per element, no 4 MB read).  Every layer but the last (the nearest the
backward, where saving wins min-cut's weighting) then saves statistics.  Min-cut's
common-subexpression pass would merge the copies again, so the backend runs that
pass before making them and turns it off inside the partitioner
(``backend.partition_joint``).
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import CheckpointPolicy


def _random(node) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


def _scalar_input(node) -> bool:
    """A graph input or constant (``get_attr``, the lifted ``torch.tensor(0.0)`` of
    the mask's fill) of at most one element."""
    v = node.meta.get("val")
    if v is None and node.op == "get_attr":
        v = getattr(node.graph.owning_module, node.target, None)
    return isinstance(v, torch.Tensor) and v.numel() <= 1


def _scalar_derived(gm: torch.fx.GraphModule) -> set:
    """The forward nodes computed from scalars alone (and the scalar inputs they read)."""
    backward, seen = set(), set()
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            if "tangent" in node.name:
                backward.add(node)
            elif _scalar_input(node):
                seen.add(node)
        elif node.op == "call_function":
            args = node.all_input_nodes
            if any(a in backward for a in args):
                backward.add(node)
            elif not _random(node) and all(a in seen for a in args):
                seen.add(node)
    return seen


def _large(node) -> bool:
    v = node.meta.get("val")
    return isinstance(v, torch.Tensor) and v.numel() > 1


def tag_scalar_derived(gm: torch.fx.GraphModule) -> int:
    """Give each op that reads a large scalar-derived tensor its own copy of the ops
    that make it, all marked ``MUST_RECOMPUTE`` (the module docstring says why);
    returns the number of copies made.  Nodes that carry a checkpoint policy already
    keep it."""
    seen = _scalar_derived(gm)
    graph, copies = gm.graph, 0
    for node in seen:
        if node.op == "call_function" and _large(node) and "recompute" not in node.meta:
            node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    for node in list(graph.nodes):
        if node.op != "call_function" or node in seen:
            continue
        shared = [a for a in dict.fromkeys(node.all_input_nodes) if a in seen and a.op == "call_function"
                  and _large(a) and len(a.users) > 1]
        if not shared:
            continue
        made: dict = {}

        def copy_of(a):
            if a not in seen or a.op != "call_function":
                return a
            if a not in made:
                with graph.inserting_before(node):
                    made[a] = graph.node_copy(a, copy_of)
            return made[a]

        for a in shared:
            node.replace_input_with(a, copy_of(a))
            copies += 1
    graph.eliminate_dead_code()
    gm.recompile()
    return copies
