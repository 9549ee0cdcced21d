"""Every graph rewrite of the backend, in the order it runs, and the one function that
applies them.

A rewrite is one pass over an FX graph, in a module of its own; ``REWRITES`` says on
which graph of the pipeline it runs (``Rewrite.stage``):

* ``"joint"``: AOTAutograd's joint forward-backward graph, before the min-cut
  partitioner splits it (``backend.partition_joint``): what the backward recomputes;
* ``"aten"``: each forward, backward and inference graph, before partitioning
  (``backend.compile_graph``): fewer, larger regions that read their inputs in order;
* ``"partitioned"``: the graph of regions and ATen ops, after partitioning: the views
  between regions built from their traced strides.

``rewritten(gm, stage)`` runs the stage's rewrites, in order, on one copy of ``gm``
(``gm`` itself is never touched: it stays runnable, and the accuracy mode compares the
result with it).  A rewrite is an optimization, so one that raises is skipped with one
warning, and the stage's rewrites run again on a fresh copy without it, since it may
have left the graph half rewritten.  One copy in the common case, not one per rewrite:
a copy of a large model's backward is a noticeable part of its compile
(docs/TUNING.md#compile-time).

Not here: the decompositions (``decompositions.py``) are a table AOTAutograd applies
while it traces, not a pass; min-cut's common-subexpression pass is the partitioner's
own, which ``backend.partition_joint`` runs before the joint rewrites.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ...compat import lazy_graph_module, share_codegen
from ...runtime.phases import timed
from ..regions.region import warn_once
from .broadcast_copies import broadcast_copies
from .fast_views import fast_views
from .in_place import index_add_in_place
from .one_hot import one_hot_sums
from .pad_matmuls import pad_matmuls
from .remat import tag_for_recompute
from .sink_views import sink_views
from .sum_views import sums_through_views
from .transposed_matmuls import transposed_matmuls

STAGES = ("joint", "aten", "partitioned")


@dataclass(frozen=True)
class Rewrite:
    name: str  # names it in its failure's warning
    stage: str  # the graph it rewrites: one of ``STAGES``
    fn: Callable  # fn(gm) rewrites gm in place and returns how many places it changed
    # node.meta["val"] propagated again after it changed something: the rewrites after
    # it and the partitioner read the values' shapes, dtypes and strides there
    fresh_meta: bool = False
    left: str = "the graph stays as traced there"  # what its failure leaves, for the warning


REWRITES = (
    Rewrite("remat", "joint", tag_for_recompute, left="min-cut partitions as it would"),
    Rewrite("pad_matmuls", "aten", pad_matmuls, fresh_meta=True, left="the matmuls run unpadded"),
    Rewrite("transposed_matmuls", "aten", transposed_matmuls, fresh_meta=True),
    Rewrite("one_hot", "aten", one_hot_sums, fresh_meta=True),
    Rewrite("sink_views", "aten", sink_views, fresh_meta=True),
    Rewrite("sum_views", "aten", sums_through_views, fresh_meta=True),
    Rewrite("index_add_in_place", "aten", index_add_in_place, fresh_meta=True),
    Rewrite("broadcast_copies", "aten", broadcast_copies, fresh_meta=True),
    Rewrite("fast_views", "partitioned", fast_views, left="ATen takes the views"),
)


@timed("rewrites")
def rewritten(gm: torch.fx.GraphModule, stage: str) -> torch.fx.GraphModule:
    """A copy of ``gm`` after each rewrite of ``REWRITES`` for ``stage``, but those that
    failed (module docstring)."""
    if stage not in STAGES:
        raise ValueError(f"rewritten: stage {stage!r} is not one of {STAGES}")
    skipped: set = set()
    while True:
        work, name = copy_graph(gm), None
        try:
            for rewrite in REWRITES:
                name = rewrite.name
                if rewrite.stage != stage or name in skipped:
                    continue
                before = _snapshot(work) if rewrite.fresh_meta else None
                if rewrite.fn(work) and rewrite.fresh_meta:
                    propagate_meta(work, _changed(work, before))
            return work
        except Exception as err:
            skipped.add(name)
            detail = str(err).splitlines()[0] if str(err) else ""
            left = next(r.left for r in REWRITES if r.name == name)
            warn_once(f"{name}: {type(err).__name__}",
                      f"the {name} rewrite failed ({type(err).__name__}: {detail}); {left}")


def copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A GraphModule sharing ``gm``'s attributes with a copy of its graph (node meta
    shallow-copied), so a rewrite that fails half-way leaves ``gm`` runnable."""
    graph = torch.fx.Graph()
    share_codegen(graph, gm.graph)
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return lazy_graph_module(gm, graph)


def propagate_meta(gm: torch.fx.GraphModule, changed=None):
    """Each node's ``meta["val"]`` computed again, on the fake tensors of ``gm``'s inputs:
    every node's, or where ``changed`` names the nodes a rewrite added or altered, those
    and, downstream, the users of each whose value changed (shape, strides, dtype,
    device...: ``_described``).  A rewrite changes a few places of a graph of thousands
    of nodes, and a node's fake value costs a dispatch through the fake mode: the whole
    graph after each of four rewrites was most of a large model's rewrite time
    (docs/TUNING.md#compile-time).  What a node's value does not depend on, its inputs'
    values with the same description, cannot change it; the full propagation agrees on
    the zoo's graphs (tests/dynamo/test_rewrites_meta.py)."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from ...compat import detect_fake_mode

    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode(vals)
    if mode is None:
        raise RuntimeError("no fake mode on the graph's inputs")
    prop = FakeTensorProp(gm, mode)
    if changed is None:
        prop.propagate_dont_convert_inputs(*vals)
        return
    dirty = set(changed)
    with mode:
        for n in gm.graph.nodes:
            if n.op == "placeholder" or (n not in dirty and "val" in n.meta and n.op != "output"):
                prop.env[n] = n.meta.get("val")
                continue
            old = _described(n.meta.get("val", _MISSING))
            prop.env[n] = prop.run_node(n)
            if _described(n.meta.get("val", _MISSING)) != old:
                dirty.update(n.users)


_MISSING = object()


def _snapshot(gm) -> dict:
    """What a rewrite may change of each node: its target, its args, its kwargs (fx
    gives a node new argument tuples on every change, never edits one) and its value."""
    return {n: (n.target, n.args, n.kwargs, n.meta.get("val")) for n in gm.graph.nodes}


def _changed(gm, before: dict) -> list:
    """The nodes added since ``before`` (a ``_snapshot``), or with anything in it replaced."""
    out = []
    for n in gm.graph.nodes:
        was = before.get(n)
        if was is None or any(a is not b for a, b in zip(was, (n.target, n.args, n.kwargs, n.meta.get("val")))):
            out.append(n)
    return out


def _described(v):
    """What the rewrites and the partitioner read of a node's value, as a comparable
    key: sizes, strides, offset, dtype, device, layout and ``requires_grad`` of a
    tensor, the expression of a symbolic size (compared as sympy trees: ``==`` on a
    SymInt would add a guard), nested through tuples and lists; anything else is
    equal only to itself."""
    if isinstance(v, torch.Tensor):
        strided = v.layout == torch.strided
        return ("tensor", _sizes(v.shape), _sizes(v.stride()) if strided else None,
                _size(v.storage_offset()) if strided else None, v.dtype, v.device, v.layout, v.requires_grad)
    if isinstance(v, (list, tuple)):
        return ("sequence", tuple(_described(x) for x in v))
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", type(v).__name__, v.node.expr)
    if v is None or v is _MISSING or isinstance(v, (bool, int, float, str, torch.dtype, torch.device)):
        return (type(v).__name__, v)
    return ("object", id(v))


def _size(s):
    return ("sym", s.node.expr) if isinstance(s, torch.SymInt) else s


def _sizes(sizes) -> tuple:
    return tuple(_size(s) for s in sizes)
