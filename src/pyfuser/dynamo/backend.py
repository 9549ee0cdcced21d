"""The TorchDynamo backend: AOTAutograd, decompositions, partitioning, fusions.

    model = torch.compile(model, backend="pyfuser")

Dynamo hands the backend an FX graph of torch calls.  AOTAutograd traces it to ATen
(forward and backward, with the decompositions of ``decompositions.py``) and splits
the joint graph with the min-cut rematerialization partitioner, which recomputes
cheap fusible values in the backward instead of saving them (it saves dropout's
bool mask, not the float tensors around it), after ``remat.py`` has given each
reader of a tensor made from scalars alone (an attention mask) its own copy to
recompute.  Each of the two graphs is then
partitioned (``partition.py``): fusible regions become FusionDefinitions run by
pyfuser, everything else stays an ATen call.  Before that, matmuls with sizes that
are not multiples of 8 are padded (``pad_matmuls.py``: a vocabulary of 30522),
and ``REWRITES`` give the partitioner fewer, larger regions reading their inputs in
order (bmms read transposed computed transposed, one-hot sums per row, reshapes moved
below pointwise ops, sums through views, strided tensors read broadcast copied once);
after it, the views left between regions are built from their traced strides
(``views.py``) instead of going through ATen's dispatcher.  A training graph
(forward or backward) that draws no random numbers and computes on the GPU alone is
replayed as one CUDA graph (``graphs.py``), which checks on every call that a replay
is safe.
"""
from __future__ import annotations

import functools
import logging
import time
from collections import Counter

import torch

from ..compat import (aot_autograd, aot_forward_metadata, functorch_config, fx_graph_cse, mark_boxed,
                      min_cut_partition, share_codegen, unset_fake_temporarily)
from ..errors import SettingError
from ..settings import BY_NAME, OPTIONS, checked, config, read, validate_environment
from .regions import graphs
from .report import accuracy, logs
from .rewrites.broadcast_copies import broadcast_copies
from .decompositions import decomposition_table
from .rewrites.in_place import index_add_in_place
from .rewrites.one_hot import one_hot_sums
from .rewrites.pad_matmuls import pad_matmuls, propagate_meta
from .partition.partitioner import fuse_regions
from .regions.region import FusedRegion, warn_once
from .rewrites.remat import tag_scalar_derived, tag_upcast_softmax
from .rewrites.sink_views import sink_views
from .rewrites.sum_views import sums_through_views
from .rewrites.transposed_matmuls import transposed_matmuls
from .regions.views import fast_views


def _unfaked():
    """Translation probes dtypes with small real tensors: leave any fake mode first."""
    return unset_fake_temporarily()


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A GraphModule sharing ``gm``'s attributes with a copy of its graph (node meta
    shallow-copied), so a partitioning that fails half-way leaves ``gm`` runnable."""
    graph = torch.fx.Graph()
    share_codegen(graph, gm.graph)
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def _padded(gm):
    """A copy of ``gm`` with its misaligned 16-bit matmuls padded (``pad_matmuls``), or
    an unpadded copy when the rewrite fails (it is an optimization: say so once)."""
    work = _copy(gm)
    try:
        pad_matmuls(work)
        return work
    except Exception as err:
        warn_once(f"pad_matmuls: {type(err).__name__}", f"padding matmuls failed ({type(err).__name__}: "
                                                        f"{str(err).splitlines()[0] if str(err) else ''}); "
                                                        "they run unpadded")
        return _copy(gm)


_log = logging.getLogger("pyfuser.dynamo.regions.graphs")  # graphs.py's logger

# Rewrites that give the partitioner fewer, larger regions, in order: (name, pass).
REWRITES = (("transposed_matmuls", transposed_matmuls), ("one_hot", one_hot_sums), ("sink_views", sink_views),
            ("sum_views", sums_through_views), ("index_add_in_place", index_add_in_place),
            ("broadcast_copies", broadcast_copies))


def _rewritten(gm):
    """A copy of ``gm`` after each of ``REWRITES``.  A pass that fails is skipped with
    one warning (they are optimizations): the passes run again on a fresh copy without
    it, since it may have left the graph half rewritten.  One copy in the common case,
    not one per pass: a copy of a large model's backward is a noticeable part of its
    compile (docs/TUNING.md#compile-time)."""
    skipped: set = set()
    while True:
        work, name = _copy(gm), None
        try:
            for name, rewrite in REWRITES:
                if name not in skipped and rewrite(work):
                    propagate_meta(work)
            return work
        except Exception as err:
            skipped.add(name)
            warn_once(f"{name}: {type(err).__name__}", f"the {name} rewrite failed ({type(err).__name__}: "
                                                        f"{str(err).splitlines()[0] if str(err) else ''}); "
                                                        "the graph stays as traced there")


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
            gm = fuse_regions(_rewritten(_padded(gm)))
    except Exception as err:  # never fail the user's compile: run the graph as it is
        msg = str(err).splitlines()[0] if str(err) else ""
        warn_once(f"partition: {type(err).__name__}", f"partitioning the graph failed ({type(err).__name__}: {msg}); "
                                                      "the whole graph runs in ATen")
        return make_boxed_func(gm.forward)
    try:
        logs.graph_compiled(gm, name, kind, time.perf_counter() - start)
    except Exception as err:  # a report: never fail the user's compile for it
        warn_once(f"logs: {type(err).__name__}", f"reporting {name} failed ({type(err).__name__}: {err})")
    fast = _copy(gm)
    try:
        fast_views(fast)
        gm = fast
    except Exception as err:  # an optimization of host time only: keep ATen's views
        warn_once(f"views: {type(err).__name__}", f"rewriting views failed ({type(err).__name__}); ATen takes them")
    if accuracy.enabled() if check is None else check:
        return _checked(traced, gm, "backward graph" if backward else "forward graph")
    forward = logs.first_run_watched(gm.forward, gm, name)  # progress and, at INFO, what it built
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
    rewritten = accuracy.with_regions_in_aten(gm, FusedRegion)
    accuracy.check_regions(gm, FusedRegion, name)
    return accuracy.CheckedGraph(name, traced, rewritten, make_boxed_func(gm.forward))


_GRAPHS_CHECKED: Counter = Counter()


def partition_joint(joint_module, joint_inputs, **kwargs):
    """AOTAutograd's partition function: the min-cut partitioner, with tensors made
    from scalars alone copied per reader and fp32 softmaxes of 16-bit scores marked
    for recomputation first (``remat.py``).  The partitioner's own common-subexpression pass would merge the
    copies again, so it runs here, before them, and not in the partitioner."""
    if functorch_config().cse:
        joint_module.graph = fx_graph_cse(joint_module.graph)
        joint_module.recompile()
    work = _copy(joint_module)
    try:
        tag_scalar_derived(work)
        tag_upcast_softmax(work)
        joint_module = work
    except Exception as err:  # an optimization: the cut is still valid without it
        warn_once(f"remat: {type(err).__name__}", f"copying scalar-derived tensors for recomputation failed "
                                                  f"({type(err).__name__}); min-cut partitions as it would")
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
    return _aot_backend(check, tuple(sorted(values.items())))(gm, example_inputs, **kwargs)


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
