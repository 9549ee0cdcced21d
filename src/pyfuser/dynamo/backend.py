"""The TorchDynamo backend: AOTAutograd, decompositions, partitioning, fusions.

    model = torch.compile(model, backend="pyfuser")

Dynamo hands the backend an FX graph of torch calls, which goes down the pipeline:

1. AOTAutograd traces it to ATen (forward and backward, with the decompositions of
   ``decompositions.py``) and splits the joint graph with the min-cut
   rematerialization partitioner (``partition_joint``), which recomputes cheap
   fusible values in the backward instead of saving them, after the joint graph's
   rewrites (``rewrites/``, stage ``"joint"``);
2. each forward, backward or inference graph is rewritten for fusion (stage
   ``"aten"``: misaligned matmuls padded, bmms read transposed computed transposed,
   one-hot sums per row, reshapes moved below pointwise ops, sums through views,
   strided tensors read broadcast copied once);
3. partitioned (``partition/``): fusible regions become ``FusedRegion`` modules
   running FusionDefinitions (``regions/``), everything else stays an ATen call;
4. the views left between regions are built from their traced strides (stage
   ``"partitioned"``), and a training graph that draws no random numbers and
   computes on the GPU alone is replayed as one CUDA graph (``regions/graphs.py``),
   which checks on every call that a replay is safe;
5. what was fused and why not is reported (``report/``).

``rewrites/registry.py`` lists every rewrite of steps 1, 2 and 4 in order.
"""
from __future__ import annotations

import functools
import logging
import time
from collections import Counter

import torch

from ..compat import (aot_autograd, aot_forward_metadata, functorch_config, fx_graph_cse, mark_boxed,
                      min_cut_partition, unset_fake_temporarily)
from ..errors import SettingError
from ..runtime import ahead
from ..runtime.phases import phase, timed
from ..settings import BY_NAME, OPTIONS, checked, config, read, validate_environment
from .decompositions import decomposition_table
from .partition.partitioner import fuse_regions
from .regions import graphs
from .regions.region import FusedRegion, warn_once
from .report import accuracy, logs
from .rewrites.registry import rewritten

def _unfaked():
    """Translation probes dtypes with small real tensors: leave any fake mode first."""
    return unset_fake_temporarily()


_log = logging.getLogger("pyfuser.dynamo.regions.graphs")  # graphs.py's logger


@timed("tracing")
def compile_graph(gm: torch.fx.GraphModule, example_inputs, backward=False, check=None, kind=None, options=()):
    """AOTAutograd's forward / backward / inference compiler; a training graph that
    can be replayed as a CUDA graph is (``graphs.py``).  ``check``: the accuracy mode
    (``accuracy.py``; None: as it is now).  ``kind`` names the graph in the logs
    (``logs.py``; default "backward" or "forward").  ``options``: (setting, value)
    pairs of ``torch.compile``'s options, in force while the graph compiles and runs."""
    if not options:
        with logs.scoped_level(read("log")):
            return _compile_graph(gm, backward, check, kind)
    values = dict(options)
    with config.patch(**values), logs.scoped_level(read("log")):
        return _scoped(_compile_graph(gm, backward, check, kind), values)


def _scoped(compiled, values: dict):
    """Boxed ``compiled`` run with settings ``values`` in force (and their log level)."""

    def run(args):
        with config.patch(**values), logs.scoped_level(read("log")):
            return compiled(args)

    mark_boxed(run)
    return run


def _compile_graph(gm, backward, check, kind):
    from functorch.compile import make_boxed_func

    traced = gm
    kind = kind or ("backward" if backward else "forward")
    name, start = logs.graph_name(kind), time.perf_counter()
    try:
        with _unfaked(), logs.compiling(gm, name):
            gm = fuse_regions(rewritten(gm, "aten"))
    except Exception as err:  # never fail the user's compile: run the graph as it is
        msg = str(err).splitlines()[0] if str(err) else ""
        warn_once(f"partition: {type(err).__name__}", f"partitioning the graph failed ({type(err).__name__}: {msg}); "
                                                      "the whole graph runs in ATen")
        return make_boxed_func(gm.forward)
    try:
        logs.graph_compiled(gm, name, kind, time.perf_counter() - start)
    except Exception as err:  # a report: never fail the user's compile for it
        warn_once(f"logs: {type(err).__name__}", f"reporting {name} failed ({type(err).__name__}: {err})")
    gm = rewritten(gm, "partitioned")
    if accuracy.enabled() if check is None else check:
        return _checked(traced, gm, "backward graph" if backward else "forward graph")
    pending = _compile_ahead(gm)
    forward = logs.first_run_watched(gm.forward, gm, name, pending)  # progress and, at INFO, what it built
    if kind in ("forward", "backward") and graphs.enabled():
        visible, why_not = (0, None) if backward else _visible_outputs()
        why_not = why_not or graphs.not_graphable(gm)
        if why_not is None:
            sized = graphs.symbolic(gm)
            _log.info("%s: replayed as one CUDA graph%s after %d ordinary calls, while its checks pass",
                      name, " per size" if sized else "", graphs.WARMUP_CALLS)
            call = graphs.SizedGraphs if sized else graphs.GraphedCall
            return call(forward, role=kind, visible=visible, mutated=graphs.mutated_inputs(gm))
        _log.info("%s: not replayed as a CUDA graph: %s", name, why_not)
    return make_boxed_func(forward)


def _compile_ahead(gm):
    """The graph's regions planned and their kernels handed to the compile workers
    (``runtime/ahead.py``) in the graph's order; a ``Pending`` to wait for before the
    first run, or None."""
    regions = [m for m in gm.modules() if isinstance(m, FusedRegion) and not m.broken]
    if not regions or not ahead.enabled(regions[0].device):
        return None
    pending = ahead.Pending()
    try:
        with _unfaked():
            jobs = [job for region in regions for job in region.plan_ahead()]
            pending.submit(jobs, regions[0].device)
    except Exception as err:  # the pool could not start: the regions compile at their first calls
        warn_once(f"ahead: {type(err).__name__}", f"compiling kernels ahead failed ({type(err).__name__}: {err}); "
                                                  "each compiles at its first launch")
    return pending if len(pending) else None


def _visible_outputs():
    """``(n, None)``: a training forward graph's first ``n`` outputs are what its
    caller gets (AOTAutograd's mutated inputs, user outputs and their bases; the rest
    are saved for the backward), or ``(0, why)`` when AOTAutograd does not say."""
    meta = aot_forward_metadata()
    if meta is None or not hasattr(meta, "num_forward"):
        return 0, "AOTAutograd's output metadata is not available"
    if getattr(meta, "tokens", None):
        return 0, "the graph threads effect tokens"
    return meta.num_forward, None


def _checked(traced, gm, kind):
    """Accuracy mode (``accuracy.py``): ``gm``'s regions and fast-path views checked as
    they run, and the whole graph against ``traced``; never replayed as a CUDA graph."""
    from functorch.compile import make_boxed_func

    _GRAPHS_CHECKED[kind] += 1
    name = f"{kind} {_GRAPHS_CHECKED[kind]}"
    accuracy.check_views(gm, name)
    in_aten = accuracy.with_regions_in_aten(gm, FusedRegion)
    accuracy.check_regions(gm, FusedRegion, name)
    return accuracy.CheckedGraph(name, traced, in_aten, make_boxed_func(gm.forward))


_GRAPHS_CHECKED: Counter = Counter()


def partition_joint(joint_module, joint_inputs, **kwargs):
    """AOTAutograd's partition function: the min-cut partitioner, after the joint
    graph's rewrites (``rewrites/remat.py``: tensors made from scalars alone copied per
    reader, fp32 softmaxes of 16-bit scores marked for recomputation).  The
    partitioner's own common-subexpression pass would merge the copies again, so it
    runs here, before them, and not in the partitioner; it stays out of the rewrite
    registry because it is min-cut's pass, on when functorch's ``cse`` setting is."""
    if functorch_config().cse:
        joint_module.graph = fx_graph_cse(joint_module.graph)
        joint_module.recompile()
    joint_module = rewritten(joint_module, "joint")
    with functorch_config().patch(cse=False):
        return min_cut_partition(joint_module, joint_inputs, **kwargs)


@functools.lru_cache(maxsize=None)
def _aot_backend(check: bool, options: tuple = ()):
    """AOTAutograd with pyfuser's compilers.  The accuracy mode is bound when Dynamo
    compiles: AOTAutograd compiles a backward graph at its first call, maybe after
    the mode was switched, and it must be checked as its forward is.  ``options``:
    ``torch.compile``'s, as sorted (setting, value) pairs."""
    compiler = functools.partial(compile_graph, check=check, options=options)
    return aot_autograd(fw_compiler=compiler, bw_compiler=functools.partial(compiler, backward=True),
                        inference_compiler=functools.partial(compiler, kind="inference"),
                        partition_fn=partition_joint, decompositions=decomposition_table())


def pyfuser_backend(gm: torch.fx.GraphModule, example_inputs, options=None, **kwargs):
    """``torch.compile(model, backend=pyfuser_backend)``, also registered as "pyfuser".

    ``options`` (``torch.compile(..., options={...})``): settings of this compiled model
    (``settings.OPTIONS``: dump, prof, check, cuda_graphs, log, progress), in force
    while its graphs compile and run.  An unknown option, a process-wide setting, or a
    value pyfuser cannot use (here or in a ``PYFUSER_*`` variable) raises
    ``SettingError`` now, rather than leaving the model unfused."""
    values = backend_options(options)
    with config.patch(**values):
        validate_environment()
        check = accuracy.enabled()
        _start_workers(example_inputs)
    with phase("tracing"):
        return _aot_backend(check, tuple(sorted(values.items())))(gm, example_inputs, **kwargs)


def _start_workers(example_inputs):
    """The compile workers started while the graph is traced (``ahead.start_workers``),
    for a graph with an input on a GPU."""
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor) and x.device.type == "cuda"), None)
    if device is None:
        return
    try:
        ahead.start_workers(device)
    except Exception as err:  # the workers start with the first jobs, or the kernels compile at their launches
        warn_once(f"ahead: {type(err).__name__}", f"starting the compile workers failed ({type(err).__name__}: {err})")


def backend_options(options) -> dict:
    """``torch.compile``'s ``options``, checked: setting name -> parsed value."""
    if not options:
        return {}
    if not isinstance(options, dict):
        raise SettingError(f"torch.compile(backend='pyfuser', options=...): expected a dict, got {options!r}")
    for name in options:
        if name not in OPTIONS:
            known = BY_NAME.get(name)
            why = (f"{name!r} is a process-wide setting: set {known.env} or pyfuser.config.{name}" if known else
                   f"unknown option {name!r}")
            raise SettingError(f"torch.compile(backend='pyfuser', options=...): {why}; options: {', '.join(OPTIONS)} "
                               f"(docs/SETTINGS.md)")
    return checked(options, "torch.compile(backend='pyfuser', options=...)")
