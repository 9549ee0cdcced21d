"""The backend's logs, registered with ``torch._logging``: what was fused and why not.

    TORCH_LOGS="pyfuser" python train.py      # INFO: per graph its regions, the ops left outside and why,
                                              # whether it is replayed as a CUDA graph and if not why,
                                              # progress of long compiles, kernels built at the first run
    TORCH_LOGS="+pyfuser" python train.py     # DEBUG: also each region's FusionDefinition and kernels
    torch._logging.set_logs(modules={"pyfuser": logging.INFO})        # the same, in the process
    torch._logging.set_logs(modules={"pyfuser_fusions": True})        # one artifact alone

``TORCH_LOGS`` names the logger ``pyfuser`` (this package's loggers all sit under it)
and two artifacts, on at DEBUG or by name: ``pyfuser_fusions`` (each region's
FusionDefinition, headed by the region's name, FX nodes and source lines) and
``pyfuser_kernels`` (the Triton source of each region's kernels, after the graph's
first run, as ``output_code`` is for Inductor).  Torch parses ``TORCH_LOGS`` when it
is imported, before pyfuser registers anything: ``pyfuser`` and ``+pyfuser`` work
there (torch takes them as the package's module name), the artifact names only through
``set_logs``.

Every line names its region as ``<graph>.<submodule>``, the graph as its kind and
Dynamo's compile id (``forward 0/0``), and each region its fusion ids, so a
``PYFUSER_DUMP`` of ``fusion7`` leads back to the region, its FX nodes and the model's
source lines.  With ``PYFUSER_DUMP`` set, the backend prints that mapping on stdout
too, next to the dumps.

While a graph is partitioned and translated, and while its first run builds kernels,
a heartbeat logs progress (regions translated, kernels compiled) every
``HEARTBEAT_S`` seconds at INFO, so a long compile is never a silent minute.

Records carry their data for tools and tests: ``record.pyfuser_report`` (a
``report.GraphReport``), ``pyfuser_region`` (a ``report.RegionReport``),
``pyfuser_progress`` (counts) and ``pyfuser_kernel`` (a kernel's name).
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections import Counter

from ...compat import artifact_logger, compile_id, register_torch_logs
from ...runtime import dump
from ...runtime.cache import cache_info
from ...runtime.executor import kernel_sources
from ...settings import read
from . import reports
from ..regions.region import STATS, FusedRegion

ARTIFACTS = {
    "pyfuser_fusions": "pyfuser's FusionDefinition of each torch.compile region, with its FX nodes and source lines",
    "pyfuser_kernels": "the Triton kernels pyfuser generated for each torch.compile region",
}
register_torch_logs("pyfuser", ["pyfuser"], ARTIFACTS)

log = logging.getLogger(__name__)
fusions_log = artifact_logger(__name__, "pyfuser_fusions")
kernels_log = artifact_logger(__name__, "pyfuser_kernels")

HEARTBEAT_S = 10.0
MAX_SOURCES = 3  # source lines per region at INFO (all of them in pyfuser_fusions)
_graph_numbers: Counter = Counter()
_collectors: list = []  # lists that ``collecting`` hands out: (GraphReport, gm) of each graph compiled


def graph_name(kind: str) -> str:
    """``<kind> <compile id>`` (``forward 0/0``), or ``<kind> #<n>`` outside a Dynamo compile
    (a backward graph is compiled at the first ``backward()``)."""
    _graph_numbers[kind] += 1
    cid = compile_id()
    return f"{kind} {cid}" if cid else f"{kind} #{_graph_numbers[kind]}"


@contextlib.contextmanager
def collecting():
    """Collect the (GraphReport, partitioned graph) of every graph compiled inside."""
    found: list = []
    _collectors.append(found)
    try:
        yield found
    finally:
        _collectors.remove(found)


def _progress() -> dict:
    return {"regions": STATS.get("regions", 0), "fusions_created": STATS.get("fusions_created", 0),
            "kernels_compiled": cache_info()["kernels_compiled"]}


def _progress_line() -> str:
    p = _progress()
    return (f"{p['regions']} regions, {p['fusions_created']} FusionDefinitions translated, "
            f"{p['kernels_compiled']} kernels compiled so far")


@contextlib.contextmanager
def progress(what: str):
    """Every ``HEARTBEAT_S`` until the block ends, log what has been done (at INFO); with
    INFO off, say it on stderr once the block has run ``pyfuser.config.progress``
    seconds (``PYFUSER_PROGRESS``; 0: never), then every ``HEARTBEAT_S``."""
    info = log.isEnabledFor(logging.INFO)
    after = HEARTBEAT_S if info else read("progress")
    if not after:
        yield
        return
    done = threading.Event()
    start = time.perf_counter()

    def beat():
        wait = after
        while not done.wait(wait):
            wait = HEARTBEAT_S
            if info:
                log.info("pyfuser: still %s after %.0f s: %s", what, time.perf_counter() - start, _progress_line(),
                         extra={"pyfuser_progress": _progress()})
            else:
                sys.stderr.write(f"pyfuser: still {what} after {time.perf_counter() - start:.0f} s: "
                                 f"{_progress_line()} (PYFUSER_PROGRESS=0 silences this)\n")
                sys.stderr.flush()

    thread = threading.Thread(target=beat, name="pyfuser-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def compiling(gm, name: str):
    """The block that partitions and translates graph ``name``, with progress logged."""
    n = sum(node.op == "call_function" for node in gm.graph.nodes)
    log.info("pyfuser: %s: partitioning %d ATen nodes and translating its regions", name, n)
    return progress(f"partitioning and translating {name}")


def graph_compiled(gm, name: str, kind: str, seconds: float):
    """Report partitioned graph ``gm``: INFO lines, the ``pyfuser_fusions`` artifact, the
    fusion-to-region map beside ``PYFUSER_DUMP``'s output, and the collectors'."""
    want = _collectors or log.isEnabledFor(logging.INFO) or fusions_log.isEnabledFor(logging.DEBUG) \
        or dump.enabled_dumps()
    if not want:
        return None
    rep = reports.build(gm, name, kind)
    for found in _collectors:
        found.append((rep, gm))
    if log.isEnabledFor(logging.INFO):
        log.info("%s", "\n".join(summary_lines(rep, seconds)), extra={"pyfuser_report": rep})
    if fusions_log.isEnabledFor(logging.DEBUG):
        for region in rep.regions:
            fusions_log.debug("%s", "\n".join(_fusion_text(gm, region)), extra={"pyfuser_region": region})
    if dump.enabled_dumps():
        for region in rep.regions:
            ids = ", ".join(f"fusion{i}" for i in region.fusion_ids)
            dump.emit(f"pyfuser.dynamo: {region.name} runs {ids or 'no fusion'}: "
                      f"nodes {', '.join(n.name for n in region.nodes)}"
                      + "".join(f"\n    from {s}" for s in region.sources))
    return rep


def summary_lines(rep, seconds=None) -> list:
    """The INFO text of a graph's report."""
    c = rep.counts
    total = c.get("inside", 0) + c.get("outside", 0)
    took = "" if seconds is None else f" in {seconds:.2f} s"
    lines = [f"pyfuser: {rep.name}: {len(rep.regions)} regions{took}; {c.get('inside', 0)} of {total} "
             f"non-matmul ATen ops fused ({100 * rep.fused_ops:.0f}%)"]
    for r in rep.regions:
        ids = ", ".join(str(i) for i in r.fusion_ids) or "none"
        state = "" if r.fused else f" [runs in ATen: fallback: {r.fallback}]"
        srcs = list(r.sources)
        more = f" (+{len(srcs) - MAX_SOURCES} more)" if len(srcs) > MAX_SOURCES else ""
        lines.append(f"  region {r.name} (fusion {ids}): {len(r.nodes)} ops{state}")
        lines += [f"      from {s}" for s in srcs[:MAX_SOURCES]]
        if more:
            lines.append(f"      {more.strip()}")
    views = matmuls = 0
    for o in rep.outside:
        if o.code == "view_at_edge":
            views += 1
        elif o.node.target in reports.MATMULS:
            matmuls += 1
        else:
            where = f"  at {o.node.source}" if o.node.source else ""
            lines.append(f"  outside {o.node.name} ({o.node.target}): {o.code}: {o.reason.detail}{where}")
    if matmuls or views:
        lines.append(f"  outside by design: {matmuls} matmuls (no_rule), {views} views at region edges (view_at_edge)")
    return lines


def _fusion_text(gm, region) -> list:
    mod = getattr(gm, region.module)
    lines = [f"pyfuser: region {region.name} (fusion {', '.join(map(str, region.fusion_ids)) or 'none'})",
             "  FX nodes: " + ", ".join(f"{n.name} = {n.target}" for n in region.nodes)]
    lines += [f"  from {s}" for s in region.sources]
    for entry in mod.entries.values():
        if hasattr(entry, "fd"):
            lines += [f"# fusion{entry.fd.id}", repr(entry.fd).rstrip("\n")]
    return lines


def first_run_watched(fn, gm, name: str, pending=None):
    """``fn`` (the graph's forward) with its first call watched: at INFO, logged
    (``first_run_logged``); else with the progress heartbeat alone when that is on.
    ``pending``: the graph's kernels compiling ahead (``runtime.ahead.Pending``), waited
    for before that first call."""
    if pending is not None:
        fn = _after_compiles(fn, name, pending)
    if log.isEnabledFor(logging.INFO):
        return first_run_logged(fn, gm, name)
    if not read("progress"):
        return fn
    state = {"first": True}

    def run(*args):
        if not state["first"]:
            return fn(*args)
        state["first"] = False
        with progress(f"running {name} for the first time (building its kernels)"):
            return fn(*args)

    return run


_level_lock = threading.Lock()
_levels: list = []  # the levels of the scoped_level blocks in force
_saved: dict = {}  # while any is: the logger's own level and propagate, and the handler added


@contextlib.contextmanager
def scoped_level(level: str):
    """``pyfuser.config.log`` ("info", "debug"; "": nothing): inside the block the
    ``pyfuser`` logger logs at that level to stderr, as ``TORCH_LOGS=pyfuser`` (or
    ``+pyfuser``) would, unless it already does."""
    want = {"info": logging.INFO, "debug": logging.DEBUG}.get(level)
    root = logging.getLogger("pyfuser")
    if want is None or (root.isEnabledFor(want) and root.handlers and not _levels):
        yield
        return
    with _level_lock:
        if not _levels:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            _saved.update(level=root.level, propagate=root.propagate, handler=handler)
            root.addHandler(handler)
            root.propagate = False  # no second copy through a root handler
        _levels.append(want)
        root.setLevel(min(_levels))
    try:
        yield
    finally:
        with _level_lock:
            _levels.remove(want)
            if _levels:
                root.setLevel(min(_levels))
            else:
                root.removeHandler(_saved["handler"])
                root.setLevel(_saved["level"])
                root.propagate = _saved["propagate"]
                _saved.clear()


def _after_compiles(fn, name: str, pending):
    """``fn`` whose first call waits for ``pending`` (with the progress heartbeat)."""
    state = {"pending": pending}

    def run(*args):
        p = state["pending"]
        if p is not None:
            state["pending"] = None
            start = time.perf_counter()
            with progress(f"compiling the {len(p)} kernels of {name} in {p.workers} worker processes"):
                compiled, failed = p.wait()
            log.info("pyfuser: %s: %d kernels compiled ahead (%d failed) in %d worker processes; waited %.2f s",
                     name, compiled, failed, p.workers, time.perf_counter() - start)
        return fn(*args)

    return run


def first_run_logged(fn, gm, name: str):
    """``fn`` (the graph's forward), logging its first call: the kernels it builds with a
    heartbeat, then the segments of each region that run as torch ops, and with
    ``pyfuser_kernels`` each region's kernels.  Used only while INFO is on."""
    state = {"first": True}
    regions = [m for m in gm.children() if isinstance(m, FusedRegion)]

    def run(*args):
        if not state["first"]:
            return fn(*args)
        state["first"] = False
        before, start = cache_info()["kernels_compiled"], time.perf_counter()
        with progress(f"running {name} for the first time (building the kernels of {len(regions)} regions)"):
            out = fn(*args)
        built = cache_info()["kernels_compiled"] - before
        log.info("pyfuser: %s: first run built %d kernels in %.2f s", name, built, time.perf_counter() - start,
                 extra={"pyfuser_progress": dict(_progress(), graph=name, kernels_built=built)})
        _log_segments(gm, name)
        return out

    return run


def _log_segments(gm, name):
    rep = reports.build(gm, name, "", explain=True)
    lines = []
    for r in rep.regions:
        for s in r.segments:
            if s.scheduler is None:
                codes = ", ".join(f"{sched}={code}" for sched, code, _ in s.rejections) or s.host
                lines.append(f"  {r.name}: segment {s.index} of fusion {s.fusion_id} (outputs {', '.join(s.outputs)}) "
                             f"runs as torch ops: {codes}")
    if lines:
        log.info("pyfuser: %s: segments no scheduler takes:\n%s", name, "\n".join(lines),
                 extra={"pyfuser_report": rep})
    if kernels_log.isEnabledFor(logging.DEBUG):
        for r in rep.regions:
            mod = getattr(gm, r.module)
            for entry in mod.entries.values():
                for kname, sched, src in kernel_sources(entry.fd) if hasattr(entry, "fd") else ():
                    kernels_log.debug("pyfuser: region %s, fusion %d, kernel %s (%s):\n%s", r.name, entry.fd.id,
                                      kname, sched, src, extra={"pyfuser_region": r, "pyfuser_kernel": kname})

