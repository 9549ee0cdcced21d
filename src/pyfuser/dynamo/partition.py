"""Split an ATen graph into fusible regions and ATen ops.

``CapabilityBasedPartitioner`` groups the nodes ``translate.unsupported_reason``
accepts into acyclic regions.  Then:

* views at a region's edges are handed back to ATen, where they cost nothing
  (inside a fusion, a reshape at the top is only re-indexing, but there is no
  reason to make the scheduler look at it);
* a region with fewer than ``MIN_COMPUTE_OPS`` ops that compute stays in ATen: one
  op gains nothing from fusion and pays the fusion's host overhead;
* each remaining region becomes a ``fused_N`` submodule, replaced by a
  ``region.FusedRegion``.
"""
from __future__ import annotations

import inspect
import logging

import torch
from torch.fx.node import _get_qualified_name
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from .region import FusedRegion, warn_once
from .translate import ATEN_VIEWS, is_compute, unsupported_reason

MIN_COMPUTE_OPS = 2
log = logging.getLogger(__name__)


class PyfuserSupport(OperatorSupportBase):
    """Accepts the nodes pyfuser translates with ATen's semantics."""

    def is_node_supported(self, submodules, node) -> bool:
        return unsupported_reason(node) is None


def _view_names():
    """Ops handed back to ATen at a region's edges: views (clone is not one: at an edge
    it would make ATen copy what the fusion has just written)."""
    return sorted(_get_qualified_name(op) for op in ATEN_VIEWS)


def _partitioner(gm):
    kw = {}
    if "skip_horizontal_fusion" in inspect.signature(CapabilityBasedPartitioner).parameters:
        # Fuse along data flow only: independent ops sharing no fused producer (weight
        # casts, say) would make one region of unrelated shapes and gain nothing.
        kw["skip_horizontal_fusion"] = True
    return CapabilityBasedPartitioner(gm, PyfuserSupport(), allows_single_node_partition=True,
                                      non_compute_ops=_view_names(), **kw)


def _has_symbolic_shapes(gm) -> bool:
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        if isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and not all(
                isinstance(s, int) for s in tuple(v.shape) + tuple(v.stride()))):
            return True
    return False


def fuse_regions(gm):
    """Replace each fusible region of ``gm`` by a ``FusedRegion``; returns ``gm``."""
    if _has_symbolic_shapes(gm):
        warn_once("dynamic shapes", "a graph with symbolic (dynamic) shapes is not fused; compile with "
                                    "dynamic=False to fuse it")
        return gm
    partitioner = _partitioner(gm)
    partitions = partitioner.propose_partitions()
    partitioner.remove_bookend_non_compute_ops(partitions)
    partitions = [p for p in partitions if sum(is_compute(n) for n in p.nodes) >= MIN_COMPUTE_OPS]
    if not partitions:
        return gm
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
