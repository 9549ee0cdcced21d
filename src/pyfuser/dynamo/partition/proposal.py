"""Propose acyclic partitions of supported nodes in near-linear time.

``propose_partitions`` follows the rule of torch's ``CapabilityBasedPartitioner``
with ``allows_single_node_partition=True, skip_horizontal_fusion=True`` and returns
the same ``Partition`` objects (nodes, node order values, ids, list order):

* nodes are visited in reverse graph order; a supported node starts a partition
  of its own, then tries to merge it with the partitions of its users, in the
  order of ``node.users``, one at a time; of two partitions merged, the one with
  fewer nodes joins the other (on a tie the visited node's side keeps its id);
* a merge is refused where it would close a cycle: a path that leaves the two
  partitions and comes back into them through other nodes or partitions;
* then a node all of whose users are ``getitem`` hands those users to its own
  partition (or to none), repeated until nothing moves; empty partitions go.

torch answers the cycle question with every node's set of transitive users,
which costs the square of the graph's size.  It also reads, for the partitions a
walk meets, sets of the partitions they reach that it does not update when two
partitions merge, so it misses some cycles through other partitions: its proposal
then holds a cycle, which its ``fuse_partitions`` refuses.  This one refuses those
merges; elsewhere the two agree (tests/dynamo/test_proposal.py).

Here the partitions and the nodes outside them are the vertices of a contracted
graph, which stays acyclic, and each vertex carries a position (``ord``) in a
topological order of it, kept up to date as vertices merge (Pearce and Kelly's
dynamic topological order).  A merge joins a partition ``s`` and a partition
``o`` that one of its nodes feeds, so the only cycle it could close is a path
from ``s`` to ``o`` through a third vertex, and every vertex on such a path lies
between the two in that order: the check walks that window alone, and not at
all where ``o`` reads nothing in the window but ``s``, or ``s`` feeds nothing in
it but ``o``.  When the merge goes ahead, the window's vertices that reach ``o``
move before those that ``s`` reaches, keeping the order topological, and the
merged partition sits between them.  A node's users mostly sit a few ops after
it, so the windows stay short whatever the model's depth; where one node feeds
every layer, its partition's walk resumes from one candidate to the next
(``_Reach``) instead of starting again (docs/TUNING.md#compile-time).
"""
from __future__ import annotations

import heapq
import operator

from torch.fx.passes.infra.partitioner import Partition


class _Vertex:
    """A partition, or a node outside every partition, of the contracted graph.
    ``users`` and ``inputs`` are the nodes outside it that read it and that it reads,
    as dicts (ordered sets): a node hashes by its address, so a set's order, and
    with it how far a walk goes before it finds what it asks for, would change
    from one process to the next."""

    __slots__ = ("id", "nodes", "ord", "users", "inputs")

    def __init__(self, node, position: int):
        self.id = None  # the partition's id; None for a node outside every partition
        self.nodes = {node: None}
        self.ord = position
        self.users = dict.fromkeys(node.users)
        self.inputs = dict.fromkeys(node.all_input_nodes)


def propose_partitions(gm, support) -> list:
    """The partitions of ``gm``'s nodes that ``support`` (an ``OperatorSupportBase``)
    accepts, as ``Partition`` objects equal to torch's (see the module docstring)."""
    nodes = list(gm.graph.nodes)
    submodules = dict(gm.named_modules())
    vertex = _vertices(nodes)
    live: dict = {}  # id -> partition vertex, in the order the ids were given
    created = 0
    for v in reversed(nodes):
        if not support.is_node_supported(submodules, v):
            continue
        s = vertex[v]
        s.id, created = created, created + 1
        live[s.id] = s
        candidates: dict = {}
        for u in v.users:
            if vertex[u].id is not None:
                candidates.setdefault(vertex[u].id, vertex[u])
        reach = _Reach(s, vertex)
        for o in candidates.values():
            reach = _maybe_merge(reach, o, vertex, live)
    return _with_getitems_joined(nodes, live)


def _vertices(nodes) -> dict:
    """Each node's vertex: a partition of its own or a node outside every partition."""
    return {n: _Vertex(n, i) for i, n in enumerate(nodes)}


def _maybe_merge(reach, o, vertex, live):
    """``reach.s`` and ``o`` as one partition, or ``reach.s`` alone where merging them
    would close a cycle; returns the ``_Reach`` of the partition holding ``s``'s
    nodes.  ``s`` feeds ``o``.  Two cases need no walk: ``o`` reads nothing between
    them in the order but ``s`` (a view of a layer's value saved for the backward at
    the graph's end), or ``s`` feeds nothing between them but ``o``."""
    s = reach.s
    if all(vertex[i] is s or vertex[i].ord < s.ord for i in o.inputs):
        position = s.ord
    elif all(vertex[u] is o or vertex[u].ord > o.ord for u in s.users):
        position = o.ord
    elif reach.reaches_through_another(o):
        return reach
    else:
        _reorder(_reaching_after(o, s, vertex), reach.reached_before(o))
        position = o.ord
    keep = _join(s, o, vertex, live)
    keep.ord = position
    return _Reach(keep, vertex)


def _join(s, o, vertex, live):
    """Merge ``s`` and ``o``: the one with fewer nodes (``o`` on a tie) joins the
    other, which keeps its id; returns it."""
    keep, gone = (o, s) if len(s.nodes) < len(o.nodes) else (s, o)
    for n in gone.nodes:
        vertex[n] = keep
    keep.nodes.update(gone.nodes)
    for n in gone.nodes:
        keep.users.pop(n, None)
        keep.inputs.pop(n, None)
    keep.users.update(dict.fromkeys(u for u in gone.users if vertex[u] is not keep))
    keep.inputs.update(dict.fromkeys(i for i in gone.inputs if vertex[i] is not keep))
    del live[gone.id]
    return keep


class _Reach:
    """The vertices partition ``s`` reaches, found lazily: a query walks up to the
    vertex it asks about and the next query resumes there, so a node that every
    layer reads (rotary tables, an attention mask), whose merges with the second
    layer's partition onwards all fail, costs one walk over the layers, not one
    per layer.  Valid while ``s`` and the order do not change (a merge makes a
    new one)."""

    def __init__(self, s, vertex):
        self.s, self.vertex = s, vertex
        self.seen = {s}
        self.todo = [s]  # found, not yet walked from
        self.beyond: list = []  # heap of (ord, id, vertex) found past an earlier query's bound
        self.walked: list = []
        self.through: set = set()  # vertices reached from a vertex other than s

    def reaches_through_another(self, o) -> bool:
        """Whether a path leads from ``s`` to ``o`` through a third vertex: every
        vertex on it precedes ``o`` in the order."""
        bound = o.ord
        while self.beyond and self.beyond[0][0] < bound:
            self.todo.append(heapq.heappop(self.beyond)[2])
        while self.todo and o not in self.through:
            x = self.todo.pop()
            if x.ord >= bound:
                heapq.heappush(self.beyond, (x.ord, id(x), x))
                continue
            self.walked.append(x)
            for u in x.users:
                y = self.vertex[u]
                if x is not self.s:
                    self.through.add(y)
                if y not in self.seen:
                    self.seen.add(y)
                    self.todo.append(y)
        return o in self.through

    def reached_before(self, o) -> set:
        """The vertices ``s`` reaches that precede ``o``, ``s`` included; after
        ``reaches_through_another(o)`` said no, every one of them has been walked."""
        return {x for x in self.walked if x.ord < o.ord}


def _reaching_after(o, s, vertex):
    """The vertices that reach ``o`` and follow ``s`` in the order, ``o`` included."""
    bound = s.ord
    seen = {o}
    todo = [o]
    while todo:
        x = todo.pop()
        for i in x.inputs:
            y = vertex[i]
            if y.ord > bound and y not in seen:
                seen.add(y)
                todo.append(y)
    return seen


def _reorder(behind, ahead):
    """Give the vertices of ``behind`` then those of ``ahead``, each set in its own
    order, the positions both held.  The order stays topological: a vertex of
    ``behind`` only moves earlier and one of ``ahead`` only later, and no vertex
    between them is reached from ``ahead`` or reaches ``behind`` (it would belong to
    the set).  ``o`` ends ``behind`` and ``s`` starts ``ahead``: adjacent."""
    moved = sorted(behind, key=_ord) + sorted(ahead, key=_ord)
    for x, position in zip(moved, sorted(x.ord for x in moved)):
        x.ord = position


def _ord(x) -> int:
    return x.ord


def _with_getitems_joined(nodes, live) -> list:
    """The partitions, each node with torch's order value (its position from the
    graph's end); then the users of a node that only ``getitem`` reads follow it
    into its partition or out of every partition, until nothing moves."""
    last = len(nodes) - 1
    position = {n: i for i, n in enumerate(nodes)}
    parts = {}
    assignment = {}
    for pid, x in live.items():
        members = sorted(x.nodes, key=position.__getitem__)
        parts[pid] = Partition(id=pid, nodes=members, node_orders=[last - position[n] for n in members])
        assignment.update(dict.fromkeys(members, pid))
    while True:
        moves = {}
        for n in nodes:
            if all(u.op == "call_function" and u.target is operator.getitem for u in n.users):
                pid = assignment.get(n)
                for u in n.users:
                    if assignment.get(u) != pid:
                        moves[u] = pid
        if not moves:
            break
        for u, pid in moves.items():
            if u in assignment:
                parts[assignment.pop(u)].remove_node(u)
            if pid is not None:
                assignment[u] = pid
                parts[pid].add_node(u, None)
    return [p for p in parts.values() if p.size() > 0]
