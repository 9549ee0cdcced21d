"""pyfuser as a torch.compile backend.

    import pyfuser.dynamo  # registers the backend (the entry point does too, once installed)
    model = torch.compile(model, backend="pyfuser")   # or "nvprims_nvfuser", nvFuser's old name

Sub-packages, in processing order (README.md walks a graph through them):

* ``backend.py``: the Dynamo backend: AOTAutograd with the decompositions of
  ``decompositions.py`` and the min-cut partitioner, then each ATen graph down the stages;
* ``rules/``: ATen op -> ``fd.ops`` rules, which nodes are supported, communication ops;
* ``rewrites/``: every graph rewrite, one module each, in one ordered registry
  (``rewrites/registry.py``) applied to the joint graph, to each ATen graph before
  partitioning and to the partitioned graph;
* ``partition/``: fusible regions of an ATen graph (torch's partitioning rule, proposed in near-linear time);
* ``regions/``: a region's graph -> FusionDefinition, a region at run time (translation
  cache, ATen fallback), the views between regions, a training graph replayed as one
  CUDA graph when that is safe;
* ``report/``: what was fused and why not, as data (``explain(model, *inputs)``) and in
  ``TORCH_LOGS="pyfuser"``, and the accuracy mode (``PYFUSER_CHECK=1``,
  ``check_accuracy()``): regions, fast-path views and rewritten graphs checked against
  ATen as they run;
* the training-step benchmarks are ``pyfuser.bench.bert_bench`` and ``zoo_bench``.

``stats()`` counts what the backend did (FusionDefinitions created, regions,
fallbacks, backward graphs captured, replayed and run uncaptured); ``FallbackWarning`` is warned once per distinct reason a region runs in
ATen.
"""
from __future__ import annotations

from ..errors import AccuracyError
from .backend import pyfuser_backend
from .regions.region import FallbackWarning, reset, stats
from .report.accuracy import TOLERANCES, CheckSummary, check_accuracy, set_tolerance
from .report.accuracy import summary as check_summary
from .report.explanation import Explanation, explain, fused_share

BACKEND_NAMES = ("pyfuser", "nvprims_nvfuser")


def _register():
    """Register the backend names with Dynamo, unless already known.

    When Dynamo loads this module through the ``torch_dynamo_backends`` entry point it
    registers the name itself right after the import, and a second registration
    would be an error; so a name whose entry point Dynamo has already discovered is
    left to Dynamo."""
    from ..compat import dynamo_backend_taken, register_dynamo_backend

    for name in BACKEND_NAMES:
        if dynamo_backend_taken(name):
            continue
        register_dynamo_backend(name, pyfuser_backend)


_register()

__all__ = ["pyfuser_backend", "stats", "reset", "FallbackWarning", "BACKEND_NAMES", "check_accuracy", "set_tolerance",
           "TOLERANCES", "AccuracyError", "check_summary", "CheckSummary", "explain", "Explanation", "fused_share"]
