"""Communication ops in traced graphs, and whether distributed training is running.

Distributed engines put collectives into the graphs the backend receives: compiled
autograd with DDP's Python reducer traces each bucket's ``all_reduce`` and
``wait_tensor`` (functional collectives, ``torch.ops._c10d_functional``), and
SimpleFSDP-style or compiled FSDP graphs hold all-gathers, reduce-scatters and
FSDP's copy-in / copy-out ops (``torch.ops.fsdp``).  The engine chose where each
one runs, to overlap communication with the computation around it:

* ``partition.py`` never fuses one, and never lets a region hold nodes from both
  sides of one in the graph's order: a region runs where its last node was, so a
  region that mixed computation from before and after a collective would delay the
  collective's launch (or its wait) by the whole region;
* ``graphs.py`` does not replay a backward graph as a CUDA graph while a process
  group of more than one rank is initialized, nor one holding a communication op:
  DDP's reducer and FSDP's post-backward hooks read and free gradients and
  unsharded parameters on their own streams between the backward's pieces, which a
  replay's buffer checks do not account for.
"""
from __future__ import annotations

import torch

from ...compat import OpOverloadPacket

# Operator namespaces whose ops communicate between ranks (or prepare buffers for it).
COMMUNICATION_NAMESPACES = frozenset({"_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "c10d",
                                      "_dtensor", "fsdp"})


def is_communication(node: torch.fx.Node) -> bool:
    """Whether ``node`` calls a communication op (an op of ``COMMUNICATION_NAMESPACES``
    or a ``torch.distributed`` function Dynamo left in the graph)."""
    if node.op != "call_function":
        return False
    target = node.target
    namespace = getattr(target, "namespace", None)
    if namespace is None and isinstance(target, OpOverloadPacket):
        namespace = target._qualified_op_name.split("::")[0]
    if namespace in COMMUNICATION_NAMESPACES:
        return True
    return (getattr(target, "__module__", None) or "").startswith("torch.distributed")


def communication_epochs(graph: torch.fx.Graph) -> dict:
    """Node -> how many communication ops come before it in ``graph``'s order (a
    communication op counts itself)."""
    epochs, seen = {}, 0
    for node in graph.nodes:
        if is_communication(node):
            seen += 1
        epochs[node] = seen
    return epochs


def first_communication(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    """The first communication op in ``gm`` or its submodules, or None."""
    for mod in gm.modules():
        graph = getattr(mod, "graph", None)
        if isinstance(graph, torch.fx.Graph):
            for node in graph.nodes:
                if is_communication(node):
                    return node
    return None


def distributed_world() -> int:
    """The default process group's size, or 1 when none is initialized."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()
