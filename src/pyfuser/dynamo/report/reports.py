"""What the backend made of one ATen graph, as data: its regions and the nodes left out.

``build(gm, name)`` reads a partitioned graph (``partitioner.fuse_regions``' result):

* each ``FusedRegion`` becomes a ``RegionReport``: its name (the graph's name and the
  submodule's), the FusionDefinitions it runs, its FX nodes with the source line each
  came from (``node.meta["stack_trace"]``), and whether it fell back to ATen and why;
* each ATen node left in the graph becomes an ``OutsideNode`` with a ``Reason``
  (``support.REASON_CODES``): no rule, an unsupported dtype or use, a view handed
  back at a region's edge, a region too small to fuse, a fallback after an error;
* with ``explain=True`` (after the graph's first run, when the fusions' plans are
  cached) each region's segments from ``fd.explain``: the scheduler that took each,
  and for a segment that runs as torch ops the schedulers' rejection codes; and the
  program that ran: each fusion's definition (``print(fd)``) and its kernels' source.

``logs.py`` prints these reports; ``explain.py`` returns them.  The share of fused
ops (``GraphReport.fused_ops``) counts ATen call nodes that are neither matmuls
(``MATMULS``: they run in ATen by design) nor views (they compute nothing).
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field

import torch

from ...runtime.executor import kernel_sources
from ..regions.region import FusedRegion
from ..rules import ATEN_ONLY, ATEN_VIEWS, LAYOUT_COPY_MIN_NUMEL, Reason, meta, why_not
from ..regions.translate import hints

aten = torch.ops.aten
# ATen ops that run in ATen by design (cuBLAS / cuDNN): not counted in the fused share.
MATMULS = frozenset(str(op) for op in (
    aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default, aten.convolution.default,
    aten.convolution_backward.default, aten.addbmm.default))

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def source_of(node) -> str | None:
    """``file:line in function: code`` of the innermost frame of the node's stack trace."""
    trace = node.meta.get("stack_trace") if isinstance(node, torch.fx.Node) else None
    frames = _FRAME.findall(trace or "")
    if not frames:
        return None
    path, line, fn, code = frames[-1]
    return f"{path}:{line} in {fn}: {code.strip()}"


@dataclass(frozen=True)
class NodeInfo:
    """One FX node: its name in the graph, its ATen target, the source line it came from."""

    name: str
    target: str
    source: str | None


@dataclass(frozen=True)
class OutsideNode:
    """An ATen node of the graph that no region holds, and why."""

    node: NodeInfo
    reason: Reason

    @property
    def code(self) -> str:
        return self.reason.code


@dataclass(frozen=True)
class Segment:
    """One segment of a region's fusion (``fd.explain``): ``scheduler`` None means it runs
    as torch ops; ``rejections``: (scheduler, code, message) of each that declined."""

    fusion_id: int
    index: int
    outputs: tuple  # names of the fusion values it computes (FX node names where they are region outputs)
    scheduler: str | None
    rejections: tuple
    host: str = ""  # why it runs as torch ops

    @property
    def codes(self) -> dict:
        return {s: c for s, c, _ in self.rejections}


@dataclass(frozen=True)
class Kernel:
    """One generated kernel of a region's fusion: its name, the scheduler that made it,
    its Triton source."""

    fusion_id: int
    name: str
    scheduler: str
    source: str


@dataclass(frozen=True)
class RegionReport:
    name: str  # "<graph name>.<submodule>", unique in the process
    module: str  # the submodule's name in the graph
    fusion_ids: tuple  # the FusionDefinitions it runs (one per input layout)
    nodes: tuple  # NodeInfo of each ATen node inside
    fused: bool  # False: it runs its ATen submodule (``fallback`` says why)
    fallback: str | None = None
    segments: tuple = ()  # Segment of each fusion, with ``explain=True``
    definitions: tuple = ()  # (fusion id, ``print(fd)``'s text) of each fusion, with ``explain=True``
    kernels: tuple = ()  # Kernel of each fusion's kernels built so far, with ``explain=True``

    @property
    def sources(self) -> tuple:
        """The distinct source lines its nodes came from, in graph order."""
        return tuple(dict.fromkeys(n.source for n in self.nodes if n.source))

    @property
    def rejections(self) -> tuple:
        """(segment, scheduler, code) of every segment that runs as torch ops."""
        return tuple((s, sched, code) for s in self.segments if s.scheduler is None for sched, code, _ in s.rejections)


@dataclass(frozen=True)
class GraphReport:
    name: str  # "forward 0/0": the graph's kind and Dynamo's compile id
    kind: str  # "forward", "backward" or "inference"
    regions: tuple = ()
    outside: tuple = ()  # OutsideNode of each ATen node left in the graph
    counts: dict = field(default_factory=dict)  # "inside", "outside": non-matmul, non-view ATen ops

    @property
    def fused_ops(self) -> float:
        """The share of the graph's non-matmul, non-view ATen ops that run inside fused regions."""
        total = self.counts.get("inside", 0) + self.counts.get("outside", 0)
        return self.counts.get("inside", 0) / total if total else 1.0

    def reasons(self) -> dict:
        """Reason code -> number of counted ops left outside for it."""
        out: dict = {}
        for o in self.outside:
            if _counted_target(o.node.target):
                out[o.code] = out.get(o.code, 0) + 1
        return out


def _counted_target(target: str) -> bool:
    return target not in MATMULS and target not in _VIEW_NAMES


_VIEW_NAMES = frozenset(str(op) for op in ATEN_VIEWS)


def _info(node) -> NodeInfo:
    return NodeInfo(node.name, str(node.target), source_of(node))


def _aten_nodes(graph):
    return [n for n in graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def _outside_reason(node) -> Reason:
    if node.meta.get(ATEN_ONLY):
        return Reason("aten_only", "kept in ATen by a graph rewrite")
    why = why_not(node)
    if why is not None:
        return why
    if node.target in ATEN_VIEWS:
        return Reason("view_at_edge", "a view at a region's edge")
    if str(node.target) == "aten.clone.default":
        return Reason("lone_op", "a clone alone: a copy kernel of its own only for a non-contiguous tensor of "
                                 f"{LAYOUT_COPY_MIN_NUMEL}+ elements")
    return Reason("lone_op", "in a region of fewer than two computing ops")


def build(gm, name: str, kind: str, explain: bool = False) -> GraphReport:
    """The report of partitioned graph ``gm``."""
    regions, outside = [], []
    inside = out = 0
    for node in gm.graph.nodes:
        if node.op == "call_module":
            mod = getattr(gm, node.target, None)
            if not isinstance(mod, FusedRegion):
                continue
            nodes = _aten_nodes(mod.fallback.graph)
            cause = getattr(mod, "fallback_cause", None)
            segments = _segments(mod) if explain and not mod.broken else ()
            fds = [e.fd for e in mod.entries.values() if hasattr(e, "fd")]
            definitions = tuple((fd.id, repr(fd)) for fd in fds) if explain else ()
            kernels = tuple(Kernel(fd.id, *k) for fd in fds for k in kernel_sources(fd)) if explain else ()
            regions.append(RegionReport(f"{name}.{node.target}", node.target, tuple(fd.id for fd in fds),
                                        tuple(_info(n) for n in nodes), not mod.broken,
                                        cause if mod.broken else None, segments, definitions, kernels))
            counted = sum(_counted_target(str(n.target)) for n in nodes)
            if mod.broken:
                out += counted
                outside += [OutsideNode(_info(n), Reason("fallback", cause or "the region failed")) for n in nodes]
            else:
                inside += counted
        elif node.op == "call_function" and node.target is not operator.getitem:
            outside.append(OutsideNode(_info(node), _outside_reason(node)))
            out += _counted_target(str(node.target))
    return GraphReport(name, kind, tuple(regions), tuple(outside), {"inside": inside, "outside": out})


def _example(node):
    """An input like ``node``'s traced value, at the sizes Dynamo traced with (a
    symbolic graph's sizes are SymInts; a SymInt input is its int)."""
    v = meta(node)
    if isinstance(v, torch.SymInt):
        return v.node.hint
    return torch.empty_strided(hints(v.shape), hints(v.stride()), dtype=v.dtype, device=v.device)


def _segments(region) -> tuple:
    """The segments of each of ``region``'s fusions for inputs laid out as traced."""
    placeholders = [n for n in region.fallback.graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in region.fallback.graph.nodes if n.op == "output")
    results = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else (out_node.args[0],)
    segments = []
    for entry in region.entries.values():
        fd = getattr(entry, "fd", None)
        if fd is None:
            continue
        names = {v.index: getattr(r, "name", str(r)) for v, r in zip(fd.ir.outputs, results)}
        try:
            inputs = [_example(n) for n in placeholders]
            # as ``forward`` moves CPU scalars; a SymInt input stays an int
            inputs = [x.to(region.device) if isinstance(x, torch.Tensor) else x for x in inputs]
            explanation = fd.explain(inputs)
        except Exception as err:  # explaining is a report: never fail the compile for it
            segments.append(Segment(fd.id, -1, (), None, (), f"explain failed: {type(err).__name__}: {err}"))
            continue
        for seg in explanation.segments:
            outs = tuple(names.get(o.index, o.name) for o in seg.outputs)
            rejections = tuple((r.scheduler, r.code, r.message) for r in seg.rejections)
            segments.append(Segment(fd.id, seg.index, outs, seg.scheduler, rejections, seg.host))
    return tuple(segments)
