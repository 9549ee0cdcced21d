"""Where the time of a first execute or of a first training step goes: phase timers.

    from pyfuser.runtime import phases

    with phases.recording() as report:
        fd.execute(inputs)              # or a compiled model's first step
    print(report)                       # seconds and count per phase, the wall time

The pipeline's stages time themselves with ``with phase("codegen"):`` or the
decorator ``@timed("planning")``.  Nobody recording, either costs one read of a
module global (``_active``) and a function call; the cached execute and a region's
fast path call neither.

Attribution is exclusive: a phase opened inside another (module loading inside
scheduling inside planning) is subtracted from its parent, so each second is counted
once and the phases of one thread sum to no more than the recording's wall time.
What no phase covers (Dynamo's bytecode tracing, the ATen ops between regions, the
optimizer, Python between the stages) is the report's ``unattributed``: wall time
less the phases.  Each thread keeps its own stack of open phases and the report adds
under a lock, so phases on other threads (autograd runs a CUDA backward on a device
thread of its own) count too; those run while the recording thread waits outside
any phase, so the sum still matches the wall time.

``charge(name, seconds)`` books a time measured elsewhere as a phase and takes it out
of the enclosing one: the probe's compile time of a kernel's first launch
(``probe.KernelInfo.jit_ms``) is booked as ``triton_compile`` that way, not timed twice.
Triton compiles are also listed per kernel (``PhaseReport.kernels``).
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time

from ..errors import PyfuserError

# Phase -> what it covers, in pipeline order (the report's rows).
PHASES = {
    "dynamo": "Dynamo's own compile of each frame (bytecode tracing, guards): torch's compile metrics less "
              "its calls of the backend; booked by the bench (``charge``), not timed here",
    "tracing": "Dynamo -> ATen: the backend's entry, AOTAutograd's tracing, min-cut and its compiler callbacks, "
               "less the stages below",
    "rewrites": "the graph rewrites (dynamo/rewrites, each stage)",
    "partitioning": "fusible regions of each ATen graph (dynamo/partition), less translation",
    "translation": "FX region -> FusionDefinition (dynamo/regions/translate.py)",
    "ahead": "the torch.compile backend planning a graph's regions before its first run and handing their "
             "kernels to the compile workers (runtime/ahead.py), less the stages below",
    "ahead_wait": "waiting for the compile workers before a graph's first run",
    "planning": "execute's first call at a new signature or fingerprint: bind, signature, segmentation "
                "(make_plan), less the stages below",
    "scheduling": "the schedulers' checks and heuristics for each group the planner offers",
    "prepare": "the Program of a plan at one fingerprint (prepare.py): heuristics again, launch arguments",
    "codegen": "a kernel's Triton source: the schedulers' run-time checks (they generate it) and emit",
    "module_load": "the kernel's file written and its module imported (runtime/cache.py)",
    "spill_check": "compiling ahead and checking spills (runtime/spills.py, GPU), less the compiles, loads and "
                   "ptxas reports",
    "triton_compile": "Triton compiling a kernel (GPU): in the spill check or at its first launch",
    "kernel_load": "a compiled kernel loaded for the spill check's register count (GPU): its module, and "
                   "Triton's C launcher (built by the C compiler the first time its signature is met)",
    "ptxas_report": "ptxas run again on a kernel for its spill count (``spills.ptxas_usage``), where the "
                    "driver reports local memory and no earlier process kept the answer",
    "first_launch": "the first run of a new Program (its launches; CPU: the interpreter), less the compiles",
    "graph_capture": "recording a training graph as a CUDA graph (dynamo/regions/graphs.py)",
}

_active = None  # the PhaseReport being recorded, or None
_START_LOCK = threading.Lock()
_OFF = contextlib.nullcontext()


class PhaseError(PyfuserError, ValueError):
    """A phase name that ``PHASES`` lacks, or a recording inside a recording."""


def _check(name: str):
    if name not in PHASES:
        raise PhaseError(f"phases: unknown phase {name!r}; expected one of {', '.join(PHASES)}")


class PhaseReport:
    """One recording: per phase the exclusive seconds and how many times it was entered,
    the Triton compiles per kernel (name -> [scheduler, seconds]) and the wall time."""

    def __init__(self):
        self._lock = threading.Lock()
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.counts = dict.fromkeys(PHASES, 0)
        self.kernels: dict = {}
        self.wall = 0.0

    def add(self, name: str, seconds: float, kernel: str | None = None, scheduler: str = "", entered: int = 1):
        with self._lock:
            self.seconds[name] += seconds
            self.counts[name] += entered
            if kernel is not None:
                row = self.kernels.setdefault(kernel, [scheduler, 0.0])
                row[0] = row[0] or scheduler
                row[1] += seconds

    @property
    def attributed(self) -> float:
        return sum(self.seconds.values())

    @property
    def unattributed(self) -> float:
        return self.wall - self.attributed

    def as_dict(self) -> dict:
        """A JSON-ready copy (``from_dict`` reads it back)."""
        with self._lock:
            return {"seconds": dict(self.seconds), "counts": dict(self.counts), "wall": self.wall,
                    "kernels": [[k, s, t] for k, (s, t) in self.kernels.items()]}

    @classmethod
    def from_dict(cls, d: dict) -> PhaseReport:
        r = cls()
        for name, s in d.get("seconds", {}).items():
            if name in PHASES:
                r.seconds[name] = s
                r.counts[name] = d.get("counts", {}).get(name, 0)
        r.kernels = {k: [s, t] for k, s, t in d.get("kernels", [])}
        r.wall = d.get("wall", 0.0)
        return r

    def merged(self, other: PhaseReport) -> PhaseReport:
        """The sum of two reports (several first executes as one column)."""
        r = PhaseReport.from_dict(self.as_dict())
        for name in PHASES:
            r.seconds[name] += other.seconds[name]
            r.counts[name] += other.counts[name]
        for k, (s, t) in other.kernels.items():
            row = r.kernels.setdefault(k, [s, 0.0])
            row[1] += t
        r.wall += other.wall
        return r

    def slowest_kernels(self, n: int = 10) -> list:
        """(kernel, scheduler, seconds) of the ``n`` slowest Triton compiles."""
        rows = sorted(((k, s, t) for k, (s, t) in self.kernels.items()), key=lambda r: -r[2])
        return rows[:n]

    def __str__(self):
        return table({"seconds": self})


def table(columns: dict) -> str:
    """A markdown table of ``columns`` (header -> PhaseReport): one row per phase
    (seconds, and in brackets how many times it was entered), then the unattributed
    time and the wall time."""
    heads = list(columns)
    width = max([12] + [len(h) for h in heads])
    lines = ["| phase | " + " | ".join(h.rjust(width) for h in heads) + " |",
             "|---|" + "|".join("-" * (width + 1) + ":" for _ in heads) + "|"]
    for name in PHASES:
        cells = [f"{r.seconds[name]:.3f} ({r.counts[name]})" if r.counts[name] else "-" for r in columns.values()]
        lines.append(f"| {name} | " + " | ".join(c.rjust(width) for c in cells) + " |")
    for label, get in (("unattributed", lambda r: r.unattributed), ("wall", lambda r: r.wall)):
        lines.append(f"| {label} | " + " | ".join(f"{get(r):.3f}".rjust(width) for r in columns.values()) + " |")
    return "\n".join(lines)


# -- timing ------------------------------------------------------------------------------------
class _Local(threading.local):
    def __init__(self):
        self.stack: list = []  # this thread's open timers, innermost last


_local = _Local()


class _Timer:
    __slots__ = ("report", "name", "kernel", "scheduler", "start", "inner")

    def __init__(self, report: PhaseReport, name: str, kernel=None, scheduler=""):
        _check(name)
        self.report, self.name, self.kernel, self.scheduler = report, name, kernel, scheduler

    def __enter__(self):
        _local.stack.append(self)
        self.inner = 0.0  # seconds of the phases nested in this one
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        elapsed = time.perf_counter() - self.start
        stack = _local.stack
        stack.pop()
        if stack:
            stack[-1].inner += elapsed
        if self.report is _active:  # a phase still open when its recording ended is dropped
            self.report.add(self.name, elapsed - self.inner, self.kernel, self.scheduler)
        return False


def phase(name: str, kernel: str | None = None, scheduler: str = ""):
    """A context manager timing phase ``name`` (a key of ``PHASES``) while a recording
    is on; ``kernel``, ``scheduler``: the kernel a ``triton_compile`` compiles."""
    report = _active
    if report is None:
        return _OFF
    return _Timer(report, name, kernel, scheduler)


def timed(name: str):
    """Decorator: each call of the function is phase ``name``."""
    _check(name)

    def wrap(fn):
        @functools.wraps(fn)
        def timed_call(*args, **kwargs):
            report = _active
            if report is None:
                return fn(*args, **kwargs)
            with _Timer(report, name):
                return fn(*args, **kwargs)

        return timed_call

    return wrap


def charge(name: str, seconds: float, kernel: str | None = None, scheduler: str = ""):
    """Book ``seconds`` measured elsewhere as phase ``name``, taken out of the phase open
    on this thread."""
    report = _active
    if report is None:
        return
    _check(name)
    stack = _local.stack
    if stack:
        stack[-1].inner += seconds
    report.add(name, seconds, kernel, scheduler)


def recording_now() -> bool:
    return _active is not None


@contextlib.contextmanager
def recording():
    """Record every thread's phases until the block ends; yields the ``PhaseReport``
    (its ``wall`` set at the end).  One recording at a time per process."""
    global _active
    report = PhaseReport()
    with _START_LOCK:
        if _active is not None:
            raise PhaseError("phases.recording: a recording is already on in this process (one at a time)")
        _active = report
    start = time.perf_counter()
    try:
        yield report
    finally:
        report.wall = time.perf_counter() - start
        _active = None
