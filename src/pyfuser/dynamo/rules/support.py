"""Which nodes the partitioner may put in a region, and why the others may not.

``why_not(node)`` returns a ``Reason``: a stable ``code`` that tools and tests match
(``REASON_CODES``) and a ``detail`` people read; ``unsupported_reason`` is its
``detail`` alone, what the partitioner's operator support asks.  The report of a
compiled graph (``report.py``) adds the reasons that come after partitioning: a view
handed back to ATen at a region's edge, a region too small to fuse, a fallback.
"""
from __future__ import annotations

import operator
import weakref
from dataclasses import dataclass

import torch
from torch.fx.node import Node

from .rulebook import RULES, Unsupported, bind_args, meta

SUPPORTED_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.bool)

# code -> what it means.  The first group comes from ``why_not``; the rest from the report.
REASON_CODES = {
    "not_a_call": "a placeholder, output or attribute node",
    "getitem_of_unfused": "an element of a node that is not fused",
    "no_rule": "no rule translates this ATen op (matmuls, embeddings, index ops, ...)",
    "unsupported_dtype": "a value of a dtype pyfuser does not compute in",
    "non_tensor": "a value that is not a tensor",
    "unsupported_layout": "a non-strided tensor or one on a device other than CPU or CUDA",
    "symbolic_shape": "a tensor with symbolic sizes or strides",
    "cpu_scalar": "a CPU scalar made for a GPU graph: ATen makes it",
    "cpu_in_device_graph": "a CPU tensor computed in a graph that computes on a GPU (a constant's host-side work)",
    "arguments": "the node's arguments do not bind to its schema",
    "unsupported_use": "the op's rule rejects this use of it (detail: why)",
    "aten_only": "a graph rewrite keeps the node in ATen",
    "view_at_edge": "a view at a region's edge, handed back to ATen where it costs nothing",
    "lone_op": "supported, but its region had fewer than two computing ops",
    "fallback": "its region failed to translate or run, and runs in ATen (detail: the cause)",
}


@dataclass(frozen=True)
class Reason:
    """Why a node is not in a region: ``code`` (a key of ``REASON_CODES``) and ``detail``."""

    code: str
    detail: str

    def __str__(self):
        return f"{self.code}: {self.detail}"


def _tensor_problem(v) -> Reason | None:
    if not isinstance(v, torch.Tensor):
        return Reason("non_tensor", f"non-tensor value {type(v).__name__}")
    if v.dtype not in SUPPORTED_DTYPES:
        return Reason("unsupported_dtype", f"dtype {v.dtype}")
    if v.layout != torch.strided or v.device.type not in ("cuda", "cpu"):
        return Reason("unsupported_layout", f"layout {v.layout} on {v.device}")
    return None


_GRAPH_DEVICES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _accelerator(graph) -> str | None:
    """The first device other than the CPU that a value of ``graph`` lives on (cached)."""
    if graph not in _GRAPH_DEVICES:
        found = None
        for n in graph.nodes:
            v = meta(n)
            found = next((str(x.device) for x in (v if isinstance(v, (tuple, list)) else (v,))
                          if isinstance(x, torch.Tensor) and x.device.type != "cpu"), None)
            if found:
                break
        _GRAPH_DEVICES[graph] = found
    return _GRAPH_DEVICES[graph]


def why_not(node) -> Reason | None:
    """Why ``node`` cannot join a fusion region (None: it can)."""
    if node.op != "call_function":
        return Reason("not_a_call", node.op)
    if node.target is operator.getitem:
        src = node.args[0]
        if isinstance(src, Node) and why_not(src) is None:
            return None
        return Reason("getitem_of_unfused", "getitem of a non-fused node")
    r = RULES.get(node.target)
    if r is None:
        return Reason("no_rule", f"no rule for {node.target}")
    v = meta(node)
    for out in (v if isinstance(v, (tuple, list)) else (v,)):
        why = _tensor_problem(out)
        if why:
            return why
    for inp in node.all_input_nodes:
        if isinstance(meta(inp), torch.SymInt):
            continue  # a size (symbolic shapes): the region takes it as an Int input (``translate``)
        why = _tensor_problem(meta(inp))
        if why:
            return Reason(why.code, f"input {inp.name}: {why.detail}")
    if not node.all_input_nodes and isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0:
        # A CPU scalar made for a GPU graph (a constant's tensor): ATen makes it, and
        # the region that consumes it moves it to the GPU.
        return Reason("cpu_scalar", "CPU scalar creation")
    if isinstance(v, torch.Tensor) and v.device.type == "cpu" and _accelerator(node.graph):
        # A region runs on one device: CPU work in a GPU graph (a constant lifted and
        # indexed on the host before its copy to the GPU) stays in ATen, and the
        # regions it feeds take its result as an input.
        return Reason("cpu_in_device_graph", f"on cpu in a graph that computes on {_accelerator(node.graph)}")
    if r.check is not None:
        try:
            a = bind_args(node.target, node.args, node.kwargs)
        except Unsupported as err:
            return Reason("arguments", str(err))
        why = r.check(node, a)
        return Reason("unsupported_use", why) if why else None
    return None


def unsupported_reason(node) -> str | None:
    """Why ``node`` cannot join a fusion region, in words (None: it can)."""
    why = why_not(node)
    return None if why is None else why.detail


def is_compute(node) -> bool:
    """Whether ``node`` does work (views, identities and getitem do not)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    r = RULES.get(node.target)
    return r is not None and r.compute
