"""One execute's hooks: the dumps that follow launches, the profiler, poisoned
outputs and recorded launches.

``execute`` builds a ``Probe`` only when one of those is on (or for the first run of
a new program, to time Triton's compile); otherwise ``Program.run`` launches with no
check beyond ``hooks is None``.  The probe launches each kernel itself, so it can
poison the outputs first, print launch parameters, time the launch, and read the
compiled kernel (registers, spills, PTX) afterwards.  What it remembers across
executes (the PTX already printed, whether the definition was) is its own, kept per
fusion in ``Notes``.
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

import torch

from ..compat import newest_compiled, registers
from . import dump, phases, profiler
from .cache import COUNTERS
from .launch import poison_tensor


@dataclass
class KernelInfo:
    """What the runtime remembers about one generated kernel, for dumps and profiles."""

    name: str
    number: int  # N in pyfuser_f<fusion>_k<N> and in kernel_time's kernel<N>
    scheduler: str
    params: object
    build_ms: float  # emit + write + import of the generated source
    jit_ms: float = 0.0  # CUDA: Triton compiles seen at launch (first launch of each specialization)
    seen: set = field(default_factory=set)  # hashes of the Triton compiled kernels already launched


@dataclass(frozen=True)
class LaunchMeta:
    info: KernelInfo
    input_positions: tuple  # positions of the fusion's tensor inputs this kernel reads


def input_positions(src, pos: dict) -> tuple:
    return tuple(sorted({pos[a.source[1]] for a in src.args if a.kind == "ptr" and a.source[0] == "tensor"}))


def compiled_kernel(fn, ret):
    """The Triton CompiledKernel a CUDA launch used: ``fn[grid](...)`` returns it in triton
    3.6; otherwise the newest entry of the JIT function's per-device cache."""
    if ret is not None and hasattr(ret, "n_regs"):
        return ret
    try:
        return newest_compiled(fn)
    except Exception:  # noqa: BLE001 - dumps must never break a run
        return None


def _ptx(ck) -> str:
    try:
        return ck.asm["ptx"]
    except Exception as err:  # noqa: BLE001
        return f"(no PTX available from the compiled kernel: {err})"


@dataclass
class Notes:
    """What the dumps remember about one fusion across executes."""

    definition_dumped: bool = False
    ptx_noted: set = field(default_factory=set)  # (kernel name, compiled hash) whose PTX was printed


_NOTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # FusionDefinition -> Notes


class Probe:
    """The hooks of one execute (see the module docstring): ``active`` dumps,
    ``profile``, ``poison`` (fill outputs with NaN, or the integer maximum, before the
    kernels write them), ``record`` (a list each launch appends (fn, grid, args,
    kwargs) to), ``first`` (the run that prepared the program: its launches are no
    cache hits)."""

    def __init__(self, fd, rt, active: frozenset, profile: bool, device: torch.device, *, poison=False,
                 record=None, first=False, story=()):
        self.fd, self.rt, self.active, self.profile = fd, rt, active, profile
        self.device = device
        self.poison, self.record, self.first = poison, record, first
        self.story = story  # the cache's story of this execute (``story.telling``): empty for a hit
        self.cuda = device.type == "cuda"
        self.timed = profile or "kernel_time" in active
        self.records: list = []
        self.launched: list = []  # LaunchMeta of each launch this execute made
        self.t0 = time.perf_counter()
        self.copy_gbps = profiler.copy_bandwidth(device) if profile else None
        self.notes: Notes = _NOTES.setdefault(fd, Notes())
        if "python_definition" in active and not self.notes.definition_dumped:
            self.notes.definition_dumped = True
            dump.emit(f"# fusion{fd.id}\n{repr(fd)}")

    # -- launches ------------------------------------------------------------------------
    def launch(self, meta: LaunchMeta, fn, grid, args, kw, inputs, out_tensors):
        if self.poison:
            for t in out_tensors.values():
                poison_tensor(t)
        self.launched.append(meta)
        self._launch(meta, fn, grid, args, kw, inputs, out_tensors)
        if self.record is not None:
            self.record.append((fn, grid, args, kw))

    def _launch(self, meta: LaunchMeta, fn, grid, args, kw, inputs, out_tensors):
        info = meta.info
        if "launch_params" in self.active:
            dump.emit(dump.launch_params(info.number, info.name, info.scheduler, grid, kw, self.device.type))
        events = None
        if self.cuda and self.timed:
            torch.cuda.synchronize(self.device)
            events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            events[0].record()
        t = time.perf_counter()
        ret = fn[grid](*args, **kw)
        wall_ms = (time.perf_counter() - t) * 1e3
        if events is not None:
            events[1].record()
        ck = compiled_kernel(fn, ret) if self.cuda else None
        compiled = ck is not None and ck.hash not in info.seen
        if compiled:  # this launch compiled (or loaded from Triton's disk cache) the kernel
            info.seen.add(ck.hash)
            info.jit_ms += wall_ms
            phases.charge("triton_compile", wall_ms / 1e3, info.name, info.scheduler)
        if "ptx" in self.active:
            self._dump_ptx(info, ck)
        if not self.timed:
            return
        if events is None:
            ms = wall_ms
        elif compiled:  # the events spanned the compile: time one more launch
            ms = self._cuda_time(fn, grid, args, kw)
        else:
            events[1].synchronize()
            ms = events[0].elapsed_time(events[1])
        nin = sum(inputs[p].nbytes for p in meta.input_positions)
        nout = sum(t.nbytes for t in out_tensors.values())
        regs, spills = registers(ck)
        if "kernel_time" in self.active:
            if self.cuda:
                dump.emit(dump.kernel_time(info.number, ms, profiler.gbps(nin + nout, ms) or 0.0, regs, spills,
                                           info.name))
            else:
                dump.emit(dump.kernel_time_cpu(info.number, info.name, ms))
        if self.profile:
            meta_ck = getattr(ck, "metadata", None)
            self.records.append(profiler.KernelProfile(
                info.name, info.number, info.scheduler, info.params, ms, nin, nout, tuple(grid),
                kw.get("num_warps") if self.cuda else None,
                getattr(meta_ck, "num_stages", None) if meta_ck is not None else None,
                {k: v for k, v in kw.items() if k not in dump.COMPILE_OPTIONS},
                regs, spills, info.build_ms + info.jit_ms, self.copy_gbps))

    def _dump_ptx(self, info: KernelInfo, ck):
        key = (info.name, getattr(ck, "hash", None))
        if key in self.notes.ptx_noted:
            return
        self.notes.ptx_noted.add(key)
        if not self.cuda:
            dump.emit(dump.ptx_cpu(info.name))
        elif ck is None:
            dump.emit(f"ptx: {info.name}: Triton returned no compiled kernel to read the PTX from")
        else:
            dump.emit(f"===== PTX of {info.name} (kernel{info.number}) =====\n{_ptx(ck)}")

    def _cuda_time(self, fn, grid, args, kw) -> float:
        """Event time of one more launch with the same arguments: a kernel writes only its
        own fresh outputs, so running it twice gives the same results."""
        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn[grid](*args, **kw)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def host_step(self, index: int, outputs: dict, wall_ms: float, inputs):
        if self.profile:
            nin = sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor))
            self.records.append(profiler.KernelProfile(
                f"host{index}", 0, "host", None, wall_ms, nin, sum(t.nbytes for t in outputs.values())))

    # -- end of execute ------------------------------------------------------------------
    def finish(self, inputs, outs):
        if "fusion_args" in self.active:
            dump.emit(dump.fusion_args(self.fd.id, self.fd.ir.inputs, inputs, outs))
        if "cache" in self.active:
            dump.emit(self.cache_report())
        if self.profile:
            p = profiler.FusionProfile(
                self.fd.id, str(self.device), "cuda events" if self.cuda else "interpreter wall time",
                self.records, _bytes(inputs), _bytes(outs, exclude=inputs),
                (time.perf_counter() - self.t0) * 1e3, self.copy_gbps)
            self.fd.last_profile = p
            profiler.deliver(p)
            if profiler.printing():
                dump.emit(str(p))

    def cache_report(self) -> str:
        if self.story:
            lines = [f"cache fusion{self.fd.id}: miss: {self.story[0]}"] + [f"  {e}" for e in self.story[1:]]
        else:
            names = ", ".join(m.info.name for m in self.launched)
            lines = [f"cache fusion{self.fd.id}: hit: launches already prepared for these inputs ({names})"]
        lines.append(f"  process totals: compiled {COUNTERS['kernels_compiled']}, hits {COUNTERS['hits']}, "
                     f"misses {COUNTERS['misses']}, launches {COUNTERS['launches']}")
        return "\n".join(lines)


def _bytes(tensors, exclude=()) -> int:
    """nbytes of each distinct tensor, leaving out those sharing storage with ``exclude``
    (outputs that are inputs or views of inputs move no bytes)."""
    skip = {x.untyped_storage().data_ptr() for x in exclude if isinstance(x, torch.Tensor) and x.numel()}
    seen, total = set(), 0
    for x in tensors:
        if not isinstance(x, torch.Tensor) or id(x) in seen:
            continue
        seen.add(id(x))
        if x.numel() and x.untyped_storage().data_ptr() in skip:
            continue
        total += x.nbytes
    return total
