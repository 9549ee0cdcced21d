"""What the backward recomputes instead of saving: AOTAutograd's min-cut partitioner,
with each reader of a tensor made from scalars alone given its own copy to rebuild.

A transformer may build its extended attention mask once, at the top of the forward: an
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

A softmax computed in fp32 from 16-bit scores (autocast's softmax, or
``softmax(dtype=float32)``) is the other case.  Min-cut weighs a saved tensor's bytes
by 1.1 to the power of its distance from the backward, so the scores, a few ops
before the probabilities, weighed more than the probabilities' twice as many bytes:
every layer but the last saved the fp32 [batch, heads, seq, seq]
probabilities, written by the forward and read by the backward
(docs/TUNING.md#remat-softmax).  ``tag_upcast_softmax`` marks the upcast, the
shift, the exponential and the division of each such softmax ``MUST_RECOMPUTE``
(not its two row reductions, which min-cut saves): the forward writes no fp32
probabilities, and the backward reads the 16-bit scores and the row statistics.
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import CheckpointPolicy

from ..rules import meta


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


_CASTS = ("_to_copy", "convert_element_type")
# Pointwise ops through which an fp32 softmax input may come from 16-bit scores (an
# additive mask of the model's fp32 dtype promotes the sum to fp32, as in the zoo's
# causal models).
_POINTWISE = ("add", "sub", "mul", "div", "where", "neg")
_NARROW = (torch.float16, torch.bfloat16)


def _op(node, *names) -> bool:
    return (isinstance(node, torch.fx.Node) and node.op == "call_function"
            and getattr(node.target, "__name__", "").split(".")[0] in names)


def _val(node):
    v = meta(node)
    return v if isinstance(v, torch.Tensor) else None


def _from_narrow(node, numel, depth=3):
    """The fp32 nodes, ``node`` last, by which ``node`` (of ``numel`` elements) is
    computed from 16-bit tensors of its size, tensors that are not floating-point (a
    bool mask) and smaller tensors (a broadcast mask, a scalar) by casts and pointwise
    ops, or None when it is not."""
    v = _val(node)
    if v is None or v.dtype != torch.float32 or v.numel() != numel or depth == 0:
        return None
    if _op(node, *_CASTS):
        src = _val(node.args[0])
        return [node] if src is not None and src.dtype in _NARROW else None
    if not _op(node, *_POINTWISE):
        return None
    chain = []
    for a in node.all_input_nodes:
        va = _val(a)
        if va is None or va.numel() < numel or va.dtype in _NARROW or not va.dtype.is_floating_point:
            continue
        sub = _from_narrow(a, numel, depth - 1)
        if sub is None:
            return None
        chain += [n for n in sub if n not in chain]
    return chain + [node]


def _upcast_softmax(div):
    """The fp32 nodes of ``div`` as a decomposed softmax (``exp(x - amax(x)) /
    sum(...)``) whose input ``x`` is computed from 16-bit scores (``_from_narrow``),
    without the two row reductions, or None."""
    v = _val(div)
    if not _op(div, "div") or v is None or v.dtype != torch.float32 or len(div.args) != 2:
        return None
    exp, total = div.args
    if not (_op(exp, "exp") and _op(total, "sum") and total.args[0] is exp):
        return None
    sub = exp.args[0]
    if not (_op(sub, "sub") and len(sub.args) == 2 and _op(sub.args[1], "amax")):
        return None
    x = sub.args[0]
    if sub.args[1].args[0] is not x:
        return None
    source = _from_narrow(x, v.numel())
    return None if source is None else source + [sub, exp, div]


def tag_for_recompute(gm: torch.fx.GraphModule) -> int:
    """Both rewrites of the joint graph, as one: the tensors made from scalars alone
    copied per reader, then the fp32 softmaxes of 16-bit scores marked; returns how
    many copies and marks.  One registry entry, so a failure of either leaves the
    joint graph to min-cut as traced, with neither half applied."""
    return tag_scalar_derived(gm) + tag_upcast_softmax(gm)


def tag_upcast_softmax(gm: torch.fx.GraphModule) -> int:
    """Mark each fp32 softmax of 16-bit scores for recomputation (the module docstring
    says why); returns the number of softmaxes marked.  Nodes that carry a checkpoint
    policy already keep it."""
    marked = 0
    for node in gm.graph.nodes:
        steps = _upcast_softmax(node)
        if steps is None or any("recompute" in n.meta for n in steps):
            continue
        for n in steps:
            n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        marked += 1
    return marked
