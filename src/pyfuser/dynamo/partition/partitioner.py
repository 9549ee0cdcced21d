"""Split an ATen graph into fusible regions and ATen ops.

``proposal.propose_partitions`` groups the nodes ``translate.unsupported_reason``
accepts into acyclic regions, merging along data flow only: what torch's
``CapabilityBasedPartitioner`` proposes with ``skip_horizontal_fusion``, in
near-linear time instead of the square of the graph's size.  Then:

* a part of a region that reads one other region alone (besides the graph's
  inputs) joins it (``regroup_along_data_flow``): the proposal's last step, which
  moves each ``getitem`` into its tuple's region, can leave such parts;
* views at a region's edges are handed back to ATen, where they cost nothing
  (inside a fusion, a reshape at the top is only re-indexing, but there is no
  reason to make the scheduler look at it);
* a reduction whose operand another region computes for it alone moves into that
  region (``reduce_before_leaving``), so the region hands over the reduced tensor, not
  the full one;
* a region is not cut where its reductions are of different kinds (a row
  reduction of a column sum's result, a reshape of a row reduction's result): the
  segmenter splits its FusionDefinition where no scheduler takes a chain in one
  kernel (docs/TUNING.md#region-cuts), as for any fusion;
* a region never holds a communication op (``collectives.py``), nor nodes from
  both sides of one in the graph's order (``split_at_communication``): the
  distributed engine placed each collective to overlap it with computation;
* a region with fewer than ``MIN_COMPUTE_OPS`` ops that compute stays in ATen: one
  op gains nothing from fusion and pays the fusion's host overhead.  Except a copy
  of a non-contiguous tensor (``rules.is_layout_copy``: a clone, or a key/value
  cache's ``cat`` of one tensor and empty ones): ATen copies a transposed
  tensor with a generic strided kernel (attention heads: about a hundred such copies
  in a 12-layer training step), pyfuser's pointwise kernel with coalesced, tiled accesses;
* a view inside a region whose result is also used outside it is taken again
  outside (``hoist_output_views``), so the region stores the tensor it computes,
  not a view shaped unlike its rows;
* each remaining region becomes a ``fused_N`` submodule, replaced by a
  ``region.FusedRegion``.
"""
from __future__ import annotations

import contextlib
import gc
import logging

import torch
from torch.fx.node import map_aggregate
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase

from ...compat import qualified_name
from ...runtime.phases import timed
from ..rules.collectives import communication_epochs, is_communication
from ..regions.region import FusedRegion
from ..rules import (ATEN_ONLY, ATEN_VIEWS, is_compute, is_layout_copy, meta, reduction_kind,
                    unsupported_reason)
from ..regions.translate import sym_shape
from .proposal import propose_partitions

MIN_COMPUTE_OPS = 2
log = logging.getLogger(__name__)


class PyfuserSupport(OperatorSupportBase):
    """Accepts the nodes pyfuser translates with ATen's semantics."""

    def is_node_supported(self, submodules, node) -> bool:
        if node.meta.get(ATEN_ONLY) or is_communication(node):
            return False
        return unsupported_reason(node) is None


def _view_names():
    """Ops handed back to ATen at a region's edges: views (clone is not one: at an edge
    it would make ATen copy what the fusion has just written)."""
    return sorted(qualified_name(op) for op in ATEN_VIEWS)


class _Partitioner(CapabilityBasedPartitioner):
    """torch's partitioner with the proposal of ``proposal.py``: partitions merge
    along data flow only (independent ops sharing no fused producer, weight casts
    say, would make one region of unrelated shapes and gain nothing), found in
    near-linear time, on every torch version.  torch's constructor is not run: it
    builds every node's set of transitive users, which only torch's proposal reads
    and whose size is the square of the graph's.  The methods used besides,
    ``remove_bookend_non_compute_ops`` and ``fuse_partitions``, read the fields set
    here (torch 2.11 to 2.13)."""

    def __init__(self, gm):
        self.graph_module = gm
        self.operator_support = PyfuserSupport()
        self.allows_single_node_partition = True
        self.non_compute_ops = _view_names()
        self.allowed_single_node_partition_ops = []
        self.skip_horizontal_fusion = True

    def propose_partitions(self) -> list:
        return propose_partitions(self.graph_module, self.operator_support)


@timed("partitioning")
def fuse_regions(gm):
    """Replace each fusible region of ``gm`` by a ``FusedRegion``; returns ``gm``.
    Symbolic (dynamic) sizes are fused like static ones: shapes are compared here by
    their expressions (``sym_shape``), never as SymInts, which would add guards."""
    with collector_paused():
        return _fuse_regions(gm)


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while the regions are fused (on again
    after, if it was): each region becomes a GraphModule of many small objects, and
    every full collection walks the whole graph's live objects, so partitioning grew
    with the square of the depth (docs/TUNING.md#compile-time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _fuse_regions(gm):
    if materialize_sizes(gm):
        gm.recompile()
    partitioner = _Partitioner(gm)
    partitions = partitioner.propose_partitions()
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    partitions = regroup_along_data_flow(partitions, order)
    partitions = reduce_before_leaving(partitions, order)
    partitioner.remove_bookend_non_compute_ops(partitions)
    partitions = split_at_communication(partitions, communication_epochs(gm.graph))
    partitioner.remove_bookend_non_compute_ops(partitions)
    partitions = [p for p in partitions if sum(is_compute(n) for n in p.nodes) >= MIN_COMPUTE_OPS
                  or any(is_layout_copy(n) for n in p.nodes)]
    if not partitions:
        return gm
    for p in partitions:  # the twins it inserts are outside every partition: order still holds
        hoist_output_views(gm.graph, p, order)
    gm = partitioner.fuse_partitions(partitions, prefix="pyfuser_region_")
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target.startswith("pyfuser_region_"):
            sub = getattr(gm, node.target)
            setattr(gm, node.target, FusedRegion(sub, node.target))
    gm.recompile()
    if log.isEnabledFor(logging.DEBUG):
        log.debug("partitioned graph:\n%s", gm.code)
        for name, mod in gm.named_children():
            if isinstance(mod, FusedRegion):
                log.debug("%s:\n%s", name, mod.fallback.code)
    return gm


def materialize_sizes(gm) -> int:
    """Give every raw SymInt in a node's arguments nodes that compute it; returns how
    many nodes had one.  The rewrites take shapes from the traced values (``sink_views``
    views a result back to its source's shape), and with symbolic sizes those are
    SymInts, which the generated code cannot spell.  Each is rebuilt from the graph's
    sizes: a SymInt placeholder of that expression, else ``aten.sym_size`` of a
    placeholder's dim, and sums, products and quotients of those."""
    graph = gm.graph
    producers: dict = {}  # expression text -> (node or (tensor node, dim), its SymInt)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for n in placeholders:
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt):
            producers.setdefault(str(v.node.expr), (n, v))
    for n in placeholders:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor):
            for d, e in enumerate(v.shape):
                if isinstance(e, torch.SymInt):
                    producers.setdefault(str(e.node.expr), ((n, d), e))
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        raw = []
        map_aggregate((node.args, node.kwargs), lambda x: raw.append(x) if isinstance(x, torch.SymInt) else x)
        if not raw:
            continue
        with graph.inserting_before(node):
            def lift(x):
                return _size_node(graph, x.node.expr, producers)[0] if isinstance(x, torch.SymInt) else x

            node.args = map_aggregate(node.args, lift)
            node.kwargs = map_aggregate(node.kwargs, lift)
        changed += 1
    return changed


def _size_node(graph, e, producers):
    """(a node or int computing the sympy expression ``e``, its value as traced)."""
    import operator

    import sympy

    from ...compat import sym_floor_div

    FloorDiv = sym_floor_div()

    if e.is_Integer:
        return int(e), int(e)
    hit = producers.get(str(e))
    if hit is not None:
        src, val = hit
        if isinstance(src, tuple):  # a placeholder's dim: measured once, then reused
            src = graph.call_function(torch.ops.aten.sym_size.int, src)
            src.meta["val"] = val
            producers[str(e)] = (src, val)
        return src, val
    if e.is_Symbol:  # only a multiple of it is a size (8*s0): that size divided
        for text, (_, val) in list(producers.items()):
            c, sym = val.node.expr.as_coeff_Mul()
            if c.is_Integer and c > 1 and sym == e:
                whole = _size_node(graph, val.node.expr, producers)[0]
                return _sym_op(graph, operator.floordiv, whole, int(c), val // int(c))
        raise ValueError(f"the symbolic size {e} is no input's size")
    if isinstance(e, FloorDiv):
        (a, va), (b, vb) = (_size_node(graph, x, producers) for x in e.args)
        return _sym_op(graph, operator.floordiv, a, b, va // vb)
    if isinstance(e, (sympy.Mul, sympy.Add)):
        fn = operator.mul if isinstance(e, sympy.Mul) else operator.add
        parts = [_size_node(graph, x, producers) for x in e.args]
        out, val = parts[0]
        for a, va in parts[1:]:
            out, val = _sym_op(graph, fn, out, a, fn(val, va))
        return out, val
    raise ValueError(f"the symbolic size {e} ({type(e).__name__}) has no translation")


def _sym_op(graph, fn, a, b, val):
    if not isinstance(a, torch.fx.Node) and not isinstance(b, torch.fx.Node):
        return fn(a, b), val
    n = graph.call_function(fn, (a, b))
    n.meta["val"] = val
    return n, val


def regroup_along_data_flow(partitions, order) -> list:
    """Each partition's data-flow components that read one other partition alone
    (besides graph inputs) move to that partition; the rest of each partition stays
    together.

    The proposal's last step moves each ``getitem`` into the partition of the tuple
    it reads, or out of every partition, after the merges: an op that read an
    unsupported ``getitem`` then reads that partition alone, and a partition that a
    ``getitem`` left can fall apart into pieces that each read one other partition.
    (Without that step nothing moves here: not once on thousands of random graphs.)

    Safe: no path leaves a partition P and comes back to it.  A component of P whose
    inputs all lie in partition Q or are graph inputs is entered only from Q, and a
    path from it back to P, or from Q's side back to it, would leave P and return.
    So Q with the component, and P without it, are partitions again."""
    comps, origin = [], []
    for k, p in enumerate(partitions):
        for c in _components(p):
            comps.append(c)
            origin.append(k)
    owner = {n: i for i, c in enumerate(comps) for n in c}
    changed = True
    while changed:
        changed = False
        for i, c in enumerate(comps):
            if not c:
                continue
            sources = {owner.get(x, -1) for n in c for x in n.all_input_nodes
                       if x not in c and x.op not in ("placeholder", "get_attr")}
            if len(sources) != 1 or -1 in sources or i in sources:
                continue
            j = sources.pop()
            comps[j] |= c
            for n in c:
                owner[n] = j
            comps[i] = set()
            changed = True
    groups: dict = {}
    for i, c in enumerate(comps):
        if c:
            groups.setdefault(origin[i], set()).update(c)
    return [Partition(nodes=sorted(g, key=order.__getitem__)) for g in groups.values()]


def reduce_before_leaving(partitions, order) -> list:
    """Each reduction in a partition P whose one tensor operand ``x`` another partition
    Q computes, and which is ``x``'s only reader outside Q, moves to Q, which then hands
    P the reduced tensor instead of ``x``.  A model may add one position bias to every layer's
    scores: its gradient is the batch sum of every layer's fp32 score gradient, and the
    partitioner put each layer's sum in the region of the layer after it, so every
    layer wrote its [batch, heads, seq, seq] fp32 gradient and the next read it back.
    Moved, the batch sum runs in the softmax backward's kernel (the inner-outer tile's
    groups' walk; docs/TUNING.md#reduce-before-leaving).

    Safe: ``x`` is the node's only input off the graph's inputs, so no path enters it
    from P, and a path from it back into Q would leave Q and return to it."""
    owner = {n: i for i, p in enumerate(partitions) for n in p.nodes}
    groups = [list(p.nodes) for p in partitions]
    for i, p in enumerate(partitions):
        for n in sorted(p.nodes, key=order.__getitem__):
            if reduction_kind(n) is None:
                continue
            inputs = [x for x in n.all_input_nodes if x.op not in ("placeholder", "get_attr")]
            if len(inputs) != 1 or owner.get(inputs[0], i) == i:
                continue
            x, j = inputs[0], owner[inputs[0]]
            if any(u is not n and owner.get(u) != j for u in x.users):
                continue
            groups[i].remove(n)
            groups[j].append(n)
            owner[n] = j
    return [Partition(nodes=sorted(g, key=order.__getitem__)) for g in groups if g]


def split_at_communication(partitions, epochs) -> list:
    """Each partition cut into its nodes' communication epochs (how many collectives
    precede a node in the graph's order), so no region spans a collective; a graph
    without one keeps its partitions.  The pieces stay convex: graph order is
    topological, so epochs never decrease along a path, and a path leaving a piece
    and coming back would have to leave the partition it came from."""
    out = []
    for p in partitions:
        pieces: dict = {}
        for n in p.nodes:
            pieces.setdefault(epochs[n], []).append(n)
        out += [p] if len(pieces) == 1 else [Partition(nodes=nodes) for _, nodes in sorted(pieces.items())]
    return out


def _components(partition) -> list:
    """The weakly connected components of a partition's data flow."""
    nodes = set(partition.nodes)
    seen, out = set(), []
    for start in partition.nodes:
        if start in seen:
            continue
        comp, todo = set(), [start]
        while todo:
            n = todo.pop()
            if n in comp:
                continue
            comp.add(n)
            todo += [m for m in list(n.all_input_nodes) + list(n.users) if m in nodes and m not in comp]
        seen |= comp
        out.append(comp)
    return out


def hoist_output_views(graph, partition, order):
    """Users outside ``partition`` of a view taken inside it get their own copy of
    the view, taken in ATen from the region's output of the view's input.  A model's
    logits are viewed to [batch, seq, vocab] for the model's output while the loss
    reads them as [tokens, vocab] rows: stored as the view, the output is shaped
    unlike the rows the fusion reduces, and the segmenter gives it a kernel of its
    own that reads the logits a second time.  Views cost ATen nothing.

    Only where that helps: the view's input is shaped like what a reduction of the
    region reads and the view is not (a GELU backward's [batch, seq, 3072] gradient
    viewed as the [tokens, 3072] its bias-gradient sum reads stays as it is)."""
    inside = partition.nodes
    reduced = {sym_shape(meta(n.args[0]).shape) for n in inside if reduction_kind(n) is not None}
    for n in sorted(inside, key=order.__getitem__, reverse=True):  # outer views first: chains unwind
        if n.op != "call_function" or n.target not in ATEN_VIEWS or not isinstance(n.args[0], torch.fx.Node) \
                or n.args[0] not in inside:
            continue
        outside = [u for u in n.users if u not in inside]
        if not outside or sym_shape(meta(n).shape) in reduced or sym_shape(meta(n.args[0]).shape) not in reduced:
            continue
        with graph.inserting_after(n):
            twin = graph.call_function(n.target, n.args, dict(n.kwargs))
        twin.meta = dict(n.meta)
        for u in outside:
            u.replace_input_with(n, twin)
        if not n.users:
            partition.remove_node(n)
            graph.erase_node(n)
