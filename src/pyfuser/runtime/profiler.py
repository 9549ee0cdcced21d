"""The profiler's records: ``fd.execute(inputs, profile=True)``, then ``fd.profile()``.

A ``FusionProfile`` holds one execute: one ``KernelProfile`` per launch (and per host
segment), the fusion's bytes (inputs + outputs, each counted once; an output that is
an input or a view of one moves nothing) and its time.  Bandwidth is reported as
effective GB/s and as a share of the device-to-device copy bandwidth, which is
measured once per process and device (``copy_bandwidth``).

On CUDA each kernel is timed with CUDA events around its launch (synchronizing; a
launch that compiled is timed again, so compile time never counts as run time).  On
CPU the kernels run in Triton's interpreter: the times are wall times of those
launches, and there is no copy bandwidth to compare with (None).

``PYFUSER_PROF=print`` profiles every execute and prints the table.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from ..errors import PyfuserError
from ..settings import OVERRIDES, from_env, getenv, read

_COPY_GBPS: dict = {}


OFF = ("", "0")  # PYFUSER_PROF values that print nothing


def printing() -> bool:
    """Whether every execute profiles and prints (``PYFUSER_PROF=print``, or an override)."""
    if OVERRIDES:
        return read("prof") == "print"
    raw = getenv("PYFUSER_PROF")
    if raw in OFF:
        return False
    return from_env("prof") == "print"


def copy_bandwidth(device: torch.device) -> float | None:
    """GB/s of a device-to-device copy (bytes read + written), measured once per device;
    None on CPU."""
    if device.type != "cuda":
        return None
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _COPY_GBPS:
        # 1 GiB each way, as the benchmark harness measures it (a smaller copy reads low:
        # docs/TUNING.md#copy-bandwidth); less where the device has not that much free.
        free = torch.cuda.mem_get_info(device)[0]
        n = 1 << 30 if free > 8 * (1 << 30) else 1 << 27
        src = torch.empty(n, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        dst.copy_(src)
        times = []
        for _ in range(7):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        ms = sorted(times)[len(times) // 2]
        _COPY_GBPS[key] = 2 * n / (ms * 1e-3) / 1e9
        del src, dst
    return _COPY_GBPS[key]


def gbps(nbytes: int, ms: float | None) -> float | None:
    return None if not ms else nbytes / (ms * 1e-3) / 1e9


def pct(value: float | None, of: float | None) -> float | None:
    return None if value is None or not of else 100.0 * value / of


@dataclass
class KernelProfile:
    name: str  # the generated kernel's name (pyfuser_f<fusion>_k<number>), or host<i>
    number: int  # N in the kernel_time line's kernel<N>
    scheduler: str  # the scheduler's NAME, or "host" for a segment run with torch ops
    params: object  # the scheduler's frozen params dataclass (None for host segments)
    time_ms: float  # CUDA: event time of the launch; CPU: wall time of the interpreter launch
    input_bytes: int  # fusion inputs this kernel reads (nbytes of each, counted once)
    output_bytes: int  # outputs it writes
    grid: tuple = ()
    num_warps: int | None = None
    num_stages: int | None = None
    block_sizes: dict = field(default_factory=dict)  # the kernel's constexprs (BLOCK_SIZE, ...)
    registers: int | None = None  # CUDA only: the compiled kernel's n_regs
    spills: int | None = None  # CUDA only: n_spills
    compile_ms: float | None = None  # pyfuser codegen + import, plus Triton's compile on CUDA
    copy_gbps: float | None = None  # the device's measured copy bandwidth (None on CPU)

    @property
    def bytes(self) -> int:
        return self.input_bytes + self.output_bytes

    @property
    def gbps(self) -> float | None:
        return gbps(self.bytes, self.time_ms)

    @property
    def pct_of_copy(self) -> float | None:
        return pct(self.gbps, self.copy_gbps)


@dataclass
class FusionProfile:
    fusion_id: int
    device: str
    timing: str  # what the times are: "cuda events" or "interpreter wall time"
    kernels: list  # KernelProfile, in launch order
    input_bytes: int  # fusion inputs, each counted once
    output_bytes: int  # fusion outputs that are not inputs or views of inputs
    wall_ms: float  # the whole execute on the host, dumps and synchronization included
    copy_gbps: float | None = None

    @property
    def bytes(self) -> int:
        return self.input_bytes + self.output_bytes

    @property
    def time_ms(self) -> float:
        return sum(k.time_ms for k in self.kernels)

    @property
    def gbps(self) -> float | None:
        return gbps(self.bytes, self.time_ms)

    @property
    def pct_of_copy(self) -> float | None:
        return pct(self.gbps, self.copy_gbps)

    def __str__(self) -> str:
        return format_table(self)


COLUMNS = ("kernel", "scheduler", "time ms", "GB/s", "% copy", "in bytes", "out bytes", "grid", "warps",
           "regs", "spills", "compile ms")


def _cell(x, fmt="{}") -> str:
    return "-" if x is None else fmt.format(x)


def _num(x) -> str:
    """Three decimals, or three significant digits below 1 (interpreter GB/s are tiny)."""
    return "-" if x is None else f"{x:.3f}" if abs(x) >= 1 else f"{x:.3g}"


def _row(k: KernelProfile) -> list[str]:
    return [k.name, k.scheduler, f"{k.time_ms:.4f}", _num(k.gbps), _cell(k.pct_of_copy, "{:.1f}"),
            str(k.input_bytes), str(k.output_bytes), "x".join(map(str, k.grid)) or "-", _cell(k.num_warps),
            _cell(k.registers), _cell(k.spills), _cell(k.compile_ms, "{:.1f}")]


def format_table(p: FusionProfile) -> str:
    if p.timing == "cuda events":
        note = f"times: CUDA events per launch; copy bandwidth {_cell(p.copy_gbps, '{:.1f}')} GB/s"
    else:
        note = ("times: wall time of Triton-interpreter launches on CPU (not GPU times); "
                "no copy bandwidth, registers or spills on CPU")
    head = [f"Fusion {p.fusion_id} profile ({p.device}; {note})",
            f"  total {p.time_ms:.4f} ms in {len(p.kernels)} kernel(s), {p.input_bytes} B in + {p.output_bytes} B out,"
            f" {_num(p.gbps)} GB/s ({_cell(p.pct_of_copy, '{:.1f}% of copy') if p.copy_gbps else 'no copy roofline'}), "
            f"execute wall {p.wall_ms:.3f} ms"]
    rows = [list(COLUMNS)] + [_row(k) for k in p.kernels]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    body = ["  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in rows]
    return "\n".join(head + body)


class NoProfileError(PyfuserError, LookupError):
    """``fd.profile()`` before any ``execute(..., profile=True)``."""


# -- nvFuser's names for the records ----------------------------------------------------
# nvFuser's KernelProfile and FusionProfile fields, read from pyfuser's records.
KernelProfile.compile_time_ms = property(lambda k: k.compile_ms)
KernelProfile.effective_bandwidth_gbs = property(lambda k: k.gbps)
KernelProfile.percentage_peak_bandwidth = property(lambda k: k.pct_of_copy)
KernelProfile.segment_id = property(lambda k: k.number)
FusionProfile.segments = property(lambda p: len(p.kernels))
FusionProfile.kernel_profiles = property(lambda p: p.kernels)
FusionProfile.kernel_time_ms = property(lambda p: p.time_ms)
FusionProfile.host_time_ms = property(lambda p: p.wall_ms)
FusionProfile.compile_time_ms = property(lambda p: sum(k.compile_ms or 0.0 for k in p.kernels))
FusionProfile.effective_bandwidth_gbs = property(lambda p: p.gbps)
FusionProfile.percentage_peak_bandwith = property(lambda p: p.pct_of_copy)  # nvFuser's spelling


_CAPTURING: list = []  # the PythonProfilers inside whose ``with`` block executes run now
_CAPTURING_LOCK = threading.Lock()


def capturing() -> bool:
    return bool(_CAPTURING)


def deliver(p: FusionProfile) -> None:
    """Hand an execute's profile to every ``PythonProfiler`` open now."""
    with _CAPTURING_LOCK:
        for prof in _CAPTURING:
            prof._profiles.append(p)


class PythonProfiler:
    """nvFuser's profiler as a context manager: every ``fd.execute`` inside the block
    is profiled, as ``execute(..., profile=True)`` would be, and ``prof.profile`` is the
    ``FusionProfile`` of the last one (``prof.profiles``: all, in order).

    ``auto_scheduled=False`` is nvFuser's switch to profiling ``manual_execute``, which
    pyfuser does not have: every fusion here is scheduled automatically, so it changes
    nothing."""

    def __init__(self, auto_scheduled: bool = True):
        self.auto_scheduled = auto_scheduled
        self._profiles: list = []

    def __enter__(self):
        with _CAPTURING_LOCK:
            self._profiles = []
            _CAPTURING.append(self)
        return self

    def __exit__(self, *exc):
        with _CAPTURING_LOCK:
            _CAPTURING.remove(self)
        return False

    @property
    def profiles(self) -> list:
        return list(self._profiles)

    @property
    def profile(self) -> FusionProfile:
        if not self._profiles:
            raise NoProfileError("PythonProfiler.profile: no fusion was executed inside the profiler's `with` block")
        return self._profiles[-1]

    def get_fusion_profile(self) -> FusionProfile:
        return self.profile

    def reset_profiler(self) -> None:
        self._profiles = []
