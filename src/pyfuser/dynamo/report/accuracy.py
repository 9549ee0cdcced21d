"""Accuracy mode: what the backend computes, checked against ATen as it runs.

    PYFUSER_CHECK=1 python train.py                 # or, in Python:
    with pyfuser.dynamo.check_accuracy():           # before the model is compiled
        loss = compiled(x); loss.backward()

What a user reaches for when a loss diverges.  Three checks, each comparing on the
same inputs, so a wrong result is named where it is made and not where it shows:

* every fused region (``CheckedRegion``) runs its ATen submodule beside the fusion;
* every fast-path view (``checked_reinterpret``) also runs the view op(s) it
  replaced: sizes, strides, storage and offset must be ATen's;
* every graph AOTAutograd handed the backend (forward, backward, inference) is also
  run as traced, in ATen, and compared with the rewritten graph run with its
  regions in ATen (``CheckedGraph``): that catches the rewrites outside regions
  (``pad_matmuls``, ``one_hot``, ``sink_views``, ``sum_views``, the in-place
  ``index_add``, partitioning's hoisted views) without the regions' own rounding,
  which would otherwise add up over a deep graph into false alarms.

Not checked: the decompositions and ``remat.py``'s copies, which AOTAutograd traces
into the graphs themselves (compare the loss and gradients with eager for those).

The mode is read when Dynamo compiles a graph and binds its backward too (compiled
at the first ``backward()``); the CUDA-graph replay of backward graphs is off under
it (a replay would hide the regions' runs). The model gets pyfuser's results,
computed as without the mode: the ATen runs read copies of the inputs they would
write, and put back the random-number generators' state they drew from.

Outputs that depend on random numbers (dropout) are not compared: pyfuser's and
ATen's generators draw different numbers.  Regions reading a mask made elsewhere
are compared (both paths read the same mask).  Compare with dropout off to cover
everything.

The mode says what it checked: ``pyfuser.dynamo.check_summary()`` (``summary``) gives
the regions and graphs compared, the calls, and the largest difference an output
that passed had (absolute, and as a share of its tolerance); a process that checked
anything prints that line on stderr at exit.

Tolerance per dtype (``TOLERANCES``, overridable with ``set_tolerance``): an output
passes where ``|got - want| <= atol * scale + rtol * |want|``, ``scale`` being the
largest finite ``|want|`` of that output (at least 1): a fused region reorders sums,
whose rounding is relative to the terms summed and not to the result.  NaN equals
NaN, infinities must match, integers and bools are exact.
"""
from __future__ import annotations

import atexit
import math
import sys
import threading
from dataclasses import dataclass

import torch

from ...compat import mark_boxed, op_schema, share_codegen
from ...errors import AccuracyError
from ...settings import read
from ..regions import views
from ..regions.region import STATS

# dtype -> (rtol, atol).  fp32: a few dozen ulps (another exp, another summation
# order).  fp16 / bf16: each node is rounded to its dtype as in ATen, but a value an
# fp32 hair apart (a sum in another order, fp32 intermediates of a decomposed
# softmax) can round one ulp away and the ulp grow down a region's chain: about ten
# roundings of the 16-bit type.
TOLERANCES = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (4e-2, 4e-2),
}

_switch: list = [None]  # None: PYFUSER_CHECK decides


def enabled() -> bool:
    """Whether graphs compiled now are checked: ``check_accuracy``'s switch, else
    ``pyfuser.config.check`` (``PYFUSER_CHECK``, or the option ``check``)."""
    if _switch[0] is not None:
        return _switch[0]
    return read("check")


class check_accuracy:
    """``check_accuracy(True)`` turns the mode on for graphs compiled from now on
    (``False`` off, ``None`` back to ``PYFUSER_CHECK``); as a context manager the
    previous setting comes back at exit."""

    def __init__(self, on: bool | None = True):
        self._previous = _switch[0]
        _switch[0] = on

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _switch[0] = self._previous


def set_tolerance(dtype: torch.dtype, rtol: float, atol: float):
    """The tolerance outputs of ``dtype`` are checked with (see the module docstring)."""
    if not (dtype.is_floating_point and rtol >= 0 and atol >= 0):
        raise AccuracyError(f"set_tolerance: expected a float dtype and rtol, atol >= 0, got {dtype}, {rtol}, {atol}")
    TOLERANCES[dtype] = (float(rtol), float(atol))


# -- comparing ---------------------------------------------------------------------------


def mismatch(got, want):
    """None when ``got`` (pyfuser's) matches ``want`` (ATen's) within the tolerance of
    ``want``'s dtype; else a dict describing the first mismatching element."""
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        if isinstance(got, torch.Tensor) or isinstance(want, torch.Tensor) or not _same_value(got, want):
            return {"what": f"pyfuser gave {_short(got)}, ATen {_short(want)}"}
        return None
    if got.shape != want.shape or got.dtype != want.dtype:
        return {"what": f"pyfuser gave {got.dtype}{list(got.shape)}, ATen {want.dtype}{list(want.shape)}"}
    if want.numel() == 0:
        return None
    g, w = got.detach(), want.detach().to(got.device)
    if w.dtype.is_floating_point:
        g, w = g.double(), w.double()
        rtol, atol = TOLERANCES.get(want.dtype, (0.0, 0.0))
        finite = torch.isfinite(w)
        scale = max(1.0, w.abs().where(finite, 0.0).max().item())
        near = (g - w).abs() <= atol * scale + rtol * w.abs()  # an infinity only equals itself
        close = (g == w) | (g.isnan() & w.isnan()) | (near & finite & torch.isfinite(g))
    else:
        rtol = atol = scale = 0.0
        close = g == w
    if bool(close.all()):
        return None
    first = int((~close).flatten().nonzero()[0])
    index = tuple(int(i) for i in _unravel(first, want.shape))
    diff = (g.double() - w.double()).abs()
    both = torch.isfinite(diff)
    abs_diff = diff.where(both, 0.0).max().item()
    rel = (diff / w.double().abs()).where(both & (w != 0), 0.0).max().item()
    return {"what": f"max abs diff {abs_diff:.6g}, max rel diff {rel:.6g} (rtol {rtol:g}, atol {atol:g} x {scale:.6g} "
                    f"for {want.dtype}); first mismatch at index {list(index)}: pyfuser {g[index].item()!r}, "
                    f"ATen {w[index].item()!r}",
            "index": index, "got": g[index].item(), "want": w[index].item()}


def _unravel(flat: int, shape):
    index = []
    for size in reversed(tuple(shape)):
        index.append(flat % size)
        flat //= size
    return reversed(index)


def _same_value(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _short(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"a tensor {v.dtype}{list(v.shape)}"
    return repr(v)[:80]


def _outputs(v) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


# -- what the checks saw: ``summary()``, printed at exit ---------------------------------


@dataclass(frozen=True)
class CheckSummary:
    """What the accuracy mode checked in this process: ``regions`` and ``graphs`` (names)
    compared at least once, ``calls`` comparisons, and the largest difference seen in
    an output that passed: ``largest`` (absolute), ``share`` (of its tolerance there,
    the closest to failing), ``where`` (the region or graph, and the output)."""

    regions: tuple
    graphs: tuple
    calls: int
    views: int
    largest: float
    share: float
    where: str | None

    def __str__(self):
        worst = (f"largest difference {self.largest:.3g} ({100 * self.share:.1f}% of its tolerance) in {self.where}"
                 if self.where else "no float outputs compared")
        return (f"pyfuser accuracy check: {len(self.regions)} regions and {len(self.graphs)} graphs checked over "
                f"{self.calls} calls ({self.views} fast-path views), every output within tolerance; {worst}")


_seen = {"regions": {}, "graphs": {}, "calls": 0, "views": 0, "largest": 0.0, "share": -1.0, "where": None}
_SEEN_LOCK = threading.Lock()
_at_exit = [False]


def summary() -> CheckSummary:
    """What the accuracy mode checked so far (``pyfuser.dynamo.check_summary()``)."""
    with _SEEN_LOCK:
        s = dict(_seen)
        return CheckSummary(tuple(s["regions"]), tuple(s["graphs"]), s["calls"], s["views"],
                            s["largest"], max(s["share"], 0.0), s["where"])


def reset_summary():
    with _SEEN_LOCK:
        _seen.update(regions={}, graphs={}, calls=0, views=0, largest=0.0, share=-1.0, where=None)


def _say_at_exit():
    s = summary()
    if s.calls:
        sys.stderr.write(f"{s}\n")


def _watch_at_exit():
    if not _at_exit[0]:
        _at_exit[0] = True
        atexit.register(_say_at_exit)


def _difference(got, want):
    """(largest |got - want|, its largest share of the tolerance) of a float output
    that passed; None for other outputs."""
    if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor) and want.dtype.is_floating_point
            and got.shape == want.shape and want.numel()):
        return None
    g, w = got.detach().double(), want.detach().to(got.device).double()
    rtol, atol = TOLERANCES.get(want.dtype, (0.0, 0.0))
    both = torch.isfinite(g) & torch.isfinite(w)
    scale = max(1.0, w.abs().where(torch.isfinite(w), 0.0).max().item())
    diff = (g - w).abs().where(both, 0.0)
    allowed = atol * scale + rtol * w.abs()
    share = (diff / allowed).where(allowed > 0, 0.0).max().item()
    return diff.max().item(), share


def _record(where: str, region: bool, got, want, skip):
    worst = None
    for pos, (g, w) in enumerate(zip(got, want)):
        d = None if pos in skip else _difference(g, w)
        if d is not None and (worst is None or d[1] > worst[1]):
            worst = (d[0], d[1], pos)
    with _SEEN_LOCK:
        _seen["regions" if region else "graphs"][where] = True  # a dict: ordered, unique
        _seen["calls"] += 1
        if worst is not None and worst[1] > _seen["share"]:
            _seen.update(largest=worst[0], share=worst[1], where=f"{where}, output {worst[2]}")


def raise_first(where: str, detail: str, got, want, skip=frozenset(), names=(), region=True):
    """Compare each output of ``got`` with ``want`` (positions in ``skip`` are not);
    raise an ``AccuracyError`` at the first that disagrees; else record the largest
    difference (``summary``)."""
    got, want = _outputs(got), _outputs(want)
    if len(got) != len(want):
        raise AccuracyError(f"pyfuser accuracy check: {where} returned {len(got)} outputs, ATen {len(want)}; "
                            f"{detail}", where=where)
    for pos, (g, w) in enumerate(zip(got, want)):
        if pos in skip:
            continue
        bad = mismatch(g, w)
        if bad is not None:
            name = f" ({names[pos]})" if pos < len(names) and names[pos] else ""
            raise AccuracyError(f"pyfuser accuracy check: {where} output {pos}{name} differs from ATen: "
                                f"{bad['what']}; {detail}", where=where, output=pos, index=bad.get("index"),
                                got=bad.get("got"), want=bad.get("want"))
    _record(where, region, got, want, skip)


# -- what a graph writes and what depends on random numbers ------------------------------


def _random(node) -> bool:
    return node.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


def draws_random(graph) -> bool:
    return any(_random(n) for n in graph.nodes)


def random_outputs(graph) -> frozenset:
    """Positions of the outputs computed from random numbers drawn in ``graph``."""
    tainted = set()
    for node in graph.nodes:
        if _random(node) or any(a in tainted for a in node.all_input_nodes):
            tainted.add(node)
    out = next(n for n in graph.nodes if n.op == "output")
    return frozenset(i for i, v in enumerate(_outputs(out.args[0])) if v in tainted)


def output_names(graph) -> tuple:
    out = next(n for n in graph.nodes if n.op == "output")
    return tuple(f"{v.name} = {_target(v)}" if isinstance(v, torch.fx.Node) else "" for v in _outputs(out.args[0]))


def _target(node) -> str:
    return str(node.target) if node.op == "call_function" else node.op


def _aliases_input(node) -> bool:
    schema = op_schema(node.target)
    return bool(schema and schema.returns and schema.returns[0].alias_info is not None and schema.arguments
                and node.args and isinstance(node.args[0], torch.fx.Node))


def written_inputs(graph) -> frozenset:
    """Positions of the placeholders ``graph`` writes, directly or through views."""
    placeholders = {n: i for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder")}
    written = set()
    for node in graph.nodes:
        schema = op_schema(node.target) if node.op == "call_function" else None
        if schema is None:
            continue
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            v = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            while isinstance(v, torch.fx.Node) and v not in placeholders and _aliases_input(v):
                v = v.args[0]
            if v in placeholders:
                written.add(placeholders[v])
    return frozenset(written)


def copies_of(args, written) -> list:
    """``args`` with the tensors at positions ``written`` cloned (strides kept)."""
    return [a.clone(memory_format=torch.preserve_format) if i in written and isinstance(a, torch.Tensor) else a
            for i, a in enumerate(args)]


def _devices(args) -> list:
    return sorted({a.device.index or 0 for a in args if isinstance(a, torch.Tensor) and a.device.type == "cuda"})


def run_aside(fn, args, random: bool):
    """``fn(*args)`` with the generators' state put back after it when it draws."""
    if not random:
        return fn(*args)
    with torch.random.fork_rng(devices=_devices(args) or ([torch.cuda.current_device()]
                                                          if torch.cuda.is_available() else [])):
        return fn(*args)


# -- regions -----------------------------------------------------------------------------


class CheckedRegion(torch.nn.Module):
    """A ``FusedRegion`` run beside its ATen submodule; returns the region's outputs."""

    def __init__(self, region, where: str):
        super().__init__()
        self.region, self.where = region, f"region {region.name} of {where}"
        graph = region.fallback.graph
        nodes = [f"{n.name} = {n.target}" for n in graph.nodes if n.op == "call_function"]
        self.detail = "region nodes: " + "; ".join(nodes)
        self.names = output_names(graph)
        self.skip = random_outputs(graph)
        self.random = draws_random(graph)
        self.written = written_inputs(graph)

    def forward(self, *args):
        ref = copies_of(args, self.written)
        got = self.region(*args)
        want = run_aside(self.region.fallback, ref, self.random)
        STATS["checked_region_calls"] += 1
        raise_first(self.where, self.detail, got, want, self.skip, self.names)
        return got


def check_regions(gm: torch.fx.GraphModule, region_type, where: str) -> int:
    """Wrap each ``region_type`` child of ``gm`` (a graph named ``where``) in a
    ``CheckedRegion``; returns how many."""
    _watch_at_exit()
    count = 0
    for name, mod in list(gm.named_children()):
        if isinstance(mod, region_type):
            setattr(gm, name, CheckedRegion(mod, where))
            count += 1
    return count


# -- views -------------------------------------------------------------------------------


def _same_view(name: str, ops, x, got, want):
    """``got`` must be ``want``: sizes, strides (of dims longer than 1), storage, offset."""
    detail = (f"view node {name} ({' -> '.join(map(str, ops))} of an input of size {list(x.shape)}, stride "
              f"{list(x.stride())}, storage offset {x.storage_offset()})")
    STATS["checked_views"] += 1
    with _SEEN_LOCK:
        _seen["views"] += 1
    if got.shape != want.shape:
        raise AccuracyError(f"pyfuser accuracy check: {detail}: size {list(got.shape)}, ATen {list(want.shape)}",
                            where=name)
    if want.numel() == 0:
        return
    problems = []
    strides = [(a, b) for a, b, n in zip(got.stride(), want.stride(), want.shape) if n > 1]
    if any(a != b for a, b in strides):
        problems.append(f"stride {list(got.stride())}, ATen {list(want.stride())}")
    if got.untyped_storage().data_ptr() != want.untyped_storage().data_ptr():
        problems.append("another storage than ATen's")
    elif got.storage_offset() != want.storage_offset():
        problems.append(f"storage offset {got.storage_offset()}, ATen {want.storage_offset()}")
    if problems:
        bad = mismatch(got, want)
        values = f"; {bad['what']}" if bad else ""
        raise AccuracyError(f"pyfuser accuracy check: fast-path {detail}: {', '.join(problems)}{values}",
                            where=name, output=0, index=bad and bad.get("index"), got=bad and bad.get("got"),
                            want=bad and bad.get("want"))


def checked_reinterpret(name, x, in_stride, size, stride, delta, op, args, kwargs):
    """``views.reinterpret`` beside the view op it replaced."""
    got = views.reinterpret(x, in_stride, size, stride, delta, op, args, kwargs)
    _same_view(name, (op,), x, got, op(*args, **kwargs))
    return got


def checked_reinterpret_chain(name, x, in_stride, size, stride, delta, chain):
    """``views.reinterpret_chain`` beside the view ops it replaced, run in turn."""
    got = views.reinterpret_chain(x, in_stride, size, stride, delta, chain)
    want = x
    for op, rest, kwargs in chain:
        want = op(want, *rest, **kwargs)
    _same_view(name, [op for op, _, _ in chain], x, got, want)
    return got


_CHECKED_VIEWS = {views.reinterpret: checked_reinterpret, views.reinterpret_chain: checked_reinterpret_chain}


def check_views(gm: torch.fx.GraphModule, where: str) -> int:
    """Point ``gm``'s fast-path views at their checked twins (their messages name the
    node and ``where``, its graph); returns how many."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _CHECKED_VIEWS:
            node.target = _CHECKED_VIEWS[node.target]
            node.args = (f"{node.name} of {where}", *node.args)
            count += 1
    if count:
        gm.recompile()
    return count


# -- graphs ------------------------------------------------------------------------------


class CheckedGraph:
    """A boxed callable: the compiled graph ``run``, then ``rewritten`` (the compiled
    graph with its regions in ATen) against ``traced`` (the graph as AOTAutograd
    handed it), both in ATen on the same inputs; returns ``run``'s outputs."""

    def __init__(self, name: str, traced, rewritten, run):
        mark_boxed(self)
        self.name, self.traced, self.rewritten, self.run = name, traced, rewritten, run
        self.skip = random_outputs(traced.graph)
        self.random = draws_random(traced.graph)
        self.written = written_inputs(traced.graph)
        self.names = output_names(traced.graph)

    def __call__(self, args):
        args = list(args)
        ref = copies_of(args, self.written)
        ref2 = copies_of(args, self.written)
        got = self.run(args)
        want = run_aside(self.traced, ref, self.random)
        mine = run_aside(self.rewritten, ref2, self.random)
        STATS["checked_graph_calls"] += 1
        raise_first(f"{self.name} (the backend's rewrites outside regions, regions run in ATen)",
                    "outputs are named by the traced graph's nodes", mine, want, self.skip, self.names, region=False)
        return got


def with_regions_in_aten(gm: torch.fx.GraphModule, region_type) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose ``region_type`` children are their ATen submodules."""
    graph = torch.fx.Graph()
    share_codegen(graph, gm.graph)
    graph.output(graph.graph_copy(gm.graph, {}))
    out = torch.fx.GraphModule(gm, graph)
    for name, mod in list(out.named_children()):
        if isinstance(mod, region_type):
            setattr(out, name, mod.fallback)
    return out
