"""What a compiled graph is, as ``graphs.py`` needs to know before replaying it as a
CUDA graph: whether it can be (``not_graphable``: CUDA tensors and sizes in, no
random numbers, no data-dependent size, no communication between ranks), whether it
has symbolic sizes (``symbolic``: ``SizedGraphs`` records one graph per size), and
which of its inputs it writes (``mutated_inputs``: those are pinned, so the write
reaches the caller's tensor).  Read from the FX graph alone, before any call.
"""
from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ...compat import op_schema
from ..rules.collectives import distributed_world, first_communication


def _vals(node):
    v = node.meta.get("val")
    return v if isinstance(v, (tuple, list)) else (v,)


def not_graphable(gm: torch.fx.GraphModule) -> str | None:
    """Why ``gm`` cannot be replayed as a CUDA graph, or None.  Looks at its nodes and
    those of its submodules (the fused regions' ATen graphs).  Not under distributed
    training (``collectives.py``): DDP's reducer and FSDP's hooks read and free the
    backward's tensors on their own streams, outside what a replay checks."""
    comm = first_communication(gm)
    if comm is not None:
        return f"{comm.name} communicates between ranks"
    world = distributed_world()
    if world > 1:
        return f"a process group of {world} ranks is initialized (distributed training)"
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not placeholders:
        return "no inputs"
    for n in placeholders:
        v = n.meta.get("val")
        if isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool):
            continue  # a size: part of ``SizedGraphs``'s key
        if not isinstance(v, torch.Tensor) or v.device.type != "cuda":
            return f"input {n.name} is not a CUDA tensor"
    for mod in gm.modules():
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for n in graph.nodes:
            if n.op != "call_function":
                continue
            tags = getattr(n.target, "tags", ())
            if torch.Tag.nondeterministic_seeded in tags:
                return f"{n.name} draws random numbers"
            if free_unbacked_symbols(n.meta.get("val")):
                return f"{n.name} has a size that depends on the data (a replay has the captured one)"
            for v in _vals(n):
                if isinstance(v, torch.Tensor) and v.device.type != "cuda" and v.dim() > 0:
                    return f"{n.name} computes on {v.device}"
    return None


def symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` was traced with symbolic sizes (a SymInt input, or a tensor input
    with a symbolic size or stride): ``SizedGraphs`` replays it, one graph per size."""
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor) and not all(isinstance(d, int) for d in (*v.shape, *v.stride())):
            return True
    return False


def _written_args(node) -> list:
    """The arguments ``node``'s op writes (its schema's mutable arguments)."""
    schema = op_schema(node.target)
    if schema is None:
        return []
    out = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            v = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            out.extend(v if isinstance(v, (list, tuple)) else [v])
    return [v for v in out if isinstance(v, torch.fx.Node)]


def _view_base(node):
    """The node ``node`` is a view of, through ATen's view ops (their first argument
    aliases the result without being written), or ``node`` itself."""
    while node.op == "call_function":
        schema = op_schema(node.target)
        if schema is None or not schema.arguments or not node.args or not isinstance(node.args[0], torch.fx.Node):
            break
        info = schema.arguments[0].alias_info
        if info is None or info.is_write:
            break
        node = node.args[0]
    return node


def mutated_inputs(gm: torch.fx.GraphModule) -> frozenset:
    """The positions of ``gm``'s inputs that one of its ops writes, directly or
    through a view, here or inside a submodule it calls (a fused region's graph)."""
    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    out = set()
    for n in gm.graph.nodes:
        written = []
        if n.op == "call_function":
            written = _written_args(n)
        elif n.op == "call_module":
            sub = gm.get_submodule(n.target)
            if isinstance(getattr(sub, "graph", None), torch.fx.Graph):
                written = [n.args[i] for i in mutated_inputs(sub)
                           if i < len(n.args) and isinstance(n.args[i], torch.fx.Node)]
        for w in written:
            base = _view_base(w)
            if base in placeholders:
                out.add(placeholders[base])
    return frozenset(out)
