"""Planning a fusion without running it, and compiling its kernels ahead in workers.

On the GPU a kernel's first launch compiles it (Triton's MLIR passes, then ptxas:
about a second each), and a training step met its kernels one at a time.  The
torch.compile backend knows every region's FusionDefinition and its inputs'
shapes, strides and dtypes once a graph is partitioned, so before the graph first
runs it plans each region here (``plan_ahead``: the runtime's own plan, stored in
the fusion's runtime cache with its kernels under the names the first execute will
look up) and hands each kernel step to the pool of worker processes
(``workers.py``), which compile it for the device's architecture into Triton's
cache directory (``compile_step``), with the C launcher a load of it builds first
(``compat.build_launcher``: the C compiler, once per argument signature).  The first
execute then finds each binary and launcher there: loads, not compiles
(docs/TUNING.md#compile-ahead).

Nothing else changes: the first execute prepares, checks spills and launches as
without it; a binary the workers did not make (a misaligned input, a job that
failed) is compiled then, as before.  A worker walks a step's spill-check
candidates (``spills.candidates``) in the runtime's order until one passes
``spills.rejection`` on ptxas's report, so the first execute's own check finds every
candidate it compiles.

Planning offline is also how the bench's tools read registers and spills on a
machine without a GPU (``bench/offline.py``): meta inputs (address 0 counts as
16-byte aligned, as fresh allocations are), a binding that says ``cuda``, and
arguments built from meta tensors (``offline_args``).
"""
from __future__ import annotations

import logging
import os
import time

import torch

from ..ir.concretize import bind
from ..ir.values import ScalarVal, TensorVal
from ..schedulers.base import current_choices
from ..segment.subfusion import bind_sub
from ..settings import read
from .args import arg_value, launch_kw
from .phases import timed
from .spills import candidates
from .toolchain import triton_ptxas

log = logging.getLogger("pyfuser.compile")


class MetaEnv(dict):
    """Values for building kernel arguments offline: the binding's, else a meta tensor
    of an intermediate's shape, else a typed placeholder for a host-computed scalar."""

    def __init__(self, b):
        super().__init__(b.values)
        self.b = b

    def __missing__(self, v):
        if isinstance(v, TensorVal):
            return torch.empty(self.b.shapes[v], dtype=v.dtype.torch, device="meta")
        assert isinstance(v, ScalarVal), v
        return {torch.bool: True}.get(v.dtype.torch, 0.5 if v.dtype.torch.is_floating_point else 3)


def offline_args(src, sched, seg, params, b, env):
    """What ``args.warmup_args`` builds, from meta tensors: args, and a CUDA launch's
    keywords (``args.launch_kw``)."""
    outs = {o: torch.empty(b.shapes[o], dtype=o.dtype.torch, device="meta") for o in src.outputs}
    rng = {id(a.source[1]): (0, 0) for a in src.args if a.kind == "rng"}
    args = [_meta_scratch(a) if a.source[0] == "scratch" else arg_value(a, b, env, outs, rng) for a in src.args]
    return args, launch_kw(src, params, cuda=True)


def _meta_scratch(a):
    """A split reduction's scratch buffer, as a meta tensor (only its type matters here)."""
    return torch.empty(1, dtype=getattr(torch, a.source[5]), device="meta")


def bind_offline(fd, inputs, device):
    """(runtime cache, binding, signature) of ``fd`` for meta ``inputs`` as an execute on
    CUDA ``device`` would make them."""
    from .executor import runtime_of

    rt = runtime_of(fd)
    b = bind(fd.ir, inputs)
    b.device = torch.device(device)
    b.input_pos = {v: i for i, v in enumerate(fd.ir.inputs)}
    return rt, b, rt.signature(b, fd.ir.live_exprs())


def step_binding(rt, b, env, step):
    """(segment, binding, env) of a kernel step of a plan bound offline."""
    if step.sub is None:
        return rt.segment(b, step.outputs), b, env
    sb = bind_sub(step.sub, b, env)
    return rt.sub_segment(b, step.sub), sb, MetaEnv(sb)


# -- compiling ahead -------------------------------------------------------------------------
@timed("ahead")
def plan_ahead(fd, inputs, device) -> list:
    """Plan ``fd`` for meta ``inputs`` on CUDA ``device`` into its runtime cache (the
    plan and every spill-check candidate's kernel) and return one compile job per
    kernel step: the candidates in order, each ``(name, source, argument specs,
    keywords, register budget)``.  A signature already planned gives no jobs (its
    kernels were compiled or handed out before)."""
    rt, b, sig = bind_offline(fd, inputs, device)
    jobs = []
    with rt.lock:
        if sig in rt.plans:
            return jobs
        plan = rt.make_plan(b, sig)
        rt.plans[sig] = plan
        env = MetaEnv(b)
        check = current_choices().spill_check
        for step in plan.steps:
            if step.is_host or step.scheduler is None:
                continue
            seg, sb, senv = step_binding(rt, b, env, step)
            sched = step.scheduler
            params = sched.heuristics(seg)
            kernels = []
            for p in (candidates(sched, seg, params) if check else [params]):
                src, fn = rt.build(seg, sched, p, sig)
                args, kw = offline_args(src, sched, seg, p, sb, senv)
                kernels.append((src.name, src.source, tuple(map(arg_spec, args)), kw, sched.max_registers(seg, p)))
            jobs.append(tuple(kernels))
    return jobs


def arg_spec(x):
    """A kernel argument as plain data for a worker: a tensor as its layout, its
    storage offset included (an offset that is not a multiple of 16 bytes changes
    the plan's signature and Triton's specialization of the pointer)."""
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), tuple(x.stride()), str(x.dtype).removeprefix("torch."), x.storage_offset())
    return x


def meta_arg(spec):
    """The meta tensor (or value) an ``arg_spec`` stands for."""
    if isinstance(spec, tuple) and spec and spec[0] == "tensor":
        _, shape, stride, dtype, offset = spec
        return meta_strided(shape, stride, getattr(torch, dtype), offset)
    return spec


def meta_strided(shape, stride, dtype, offset: int = 0) -> torch.Tensor:
    """A meta tensor of this layout, ``offset`` elements into its storage: its
    ``data_ptr()`` is ``offset`` times the element size (address 0 being 16-byte
    aligned), as the alignment checks of the plan and of Triton's launch read it."""
    size = offset + (1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0)
    return torch.empty(size, dtype=dtype, device="meta").as_strided(shape, stride, offset)


def compile_step(arch: int, kernels) -> int:
    """In a worker: compile a step's candidates for sm_<arch> into Triton's cache, with
    the C launcher each one's load builds, in the spill check's walk
    (``spills.first_fit`` with ``spills.refusal`` on ptxas's report: up to the first one
    accepted, the last unchecked).  Returns how many were compiled."""
    from ..compat import build_launcher, compile_offline
    from .cache import load_kernel
    from .spills import first_fit, ptxas_usage, refusal

    compiled = []

    def compile_one(kernel):
        name, source, specs, kw, _ = kernel
        compiled.append(kernel)
        ck = compile_offline(load_kernel(name, source, "cuda"), [meta_arg(s) for s in specs], kw, arch)
        try:  # the spill check loads each candidate it compiles: its launcher too
            build_launcher(ck)
        except Exception as err:  # no CUDA driver library here: the load builds it
            log.debug("pyfuser: no launcher built ahead for %s: %s: %s", name, type(err).__name__, err)
        return ck

    def reject(kernel):
        usage = ptxas_usage(compile_one(kernel))
        return refusal(usage.regs, usage.spills, kernel[4])

    with triton_ptxas():
        chosen = first_fit(list(kernels), reject)
        if not any(k is chosen for k in compiled):
            compile_one(chosen)
    return len(compiled)


def compiled_before(arch: int, job) -> bool:
    """Whether Triton's cache already holds the binary of ``job``'s first candidate (a
    process that ran these kernels before: no worker needs to start).  A later
    candidate is one the spill check reached in that process, after the first."""
    from ..compat import cached_offline
    from .cache import load_kernel

    name, source, specs, kw, _ = job[0]
    try:
        with triton_ptxas():
            return cached_offline(load_kernel(name, source, "cuda"), [meta_arg(s) for s in specs], kw, arch)
    except Exception:  # unknown: compile it
        return False


WAIT_LIMIT_S = 600.0  # a graph's first run waits for its compile jobs at most this long
# Fewer new kernel steps than this compile at their first launches unless workers are
# running: starting them (each imports torch and Triton) costs more than they save
# (docs/TUNING.md#compile-ahead).
MIN_JOBS = 8


class Pending:
    """Compile jobs handed to the workers (``submit``), to
    ``wait`` for before the graph they belong to first runs.  A job that failed only
    costs its time (the first execute compiles what is missing); it is logged at
    DEBUG."""

    def __init__(self):
        self.futures: list = []
        self.started = time.perf_counter()
        self.workers = 0

    def __len__(self):
        return len(self.futures)

    def submit(self, jobs: list, device):
        """Hand ``jobs`` (``plan_ahead``'s: a signature planned before gives none) to the
        process's worker pool, leaving out those Triton's cache holds; nothing when
        fewer than ``MIN_JOBS`` are left and no worker is running (a graph's kernels
        compile in parallel when the workers started at the backend's entry still run,
        however few: a loss's graph)."""
        from . import workers

        enough = 1 if workers.running() else MIN_JOBS
        if len(jobs) < enough:
            return
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        arch = major * 10 + minor
        fresh = [job for job in jobs if not compiled_before(arch, job)]
        if len(fresh) < enough:
            return
        pool = workers.pool(workers_wanted(), workers.worker_env(_worker_settings()))
        self.workers = pool.size
        self.futures += [pool.submit(f"{__name__}.compile_step", arch, job) for job in fresh]

    @timed("ahead_wait")
    def wait(self, limit: float = WAIT_LIMIT_S):
        """Block until every job is done, or ``limit`` seconds: a job still running then
        counts as failed (the first run compiles its kernels itself; the worker goes on,
        unheard).  Returns (binaries compiled, jobs failed); failures are logged at DEBUG."""
        compiled = failed = 0
        deadline = time.perf_counter() + limit
        for f in self.futures:
            try:
                compiled += f.result(timeout=max(0.0, deadline - time.perf_counter()))
            except Exception as err:
                failed += 1
                log.debug("pyfuser: a kernel compiled ahead failed (the first run compiles it): %s: %s",
                          type(err).__name__, err)
        log.debug("pyfuser: %d kernel steps compiled ahead (%d binaries, %d failed) by %d workers in %.1f s",
                  len(self.futures), compiled, failed, self.workers, time.perf_counter() - self.started)
        return compiled, failed


def start_workers(device):
    """Start the process's compile workers now when ``device``'s kernels would be
    compiled ahead: a graph's backend entry calls this before tracing it, so the
    workers' imports (about 2 s) overlap the tracing instead of delaying its first run
    (docs/TUNING.md#compile-ahead).  Workers with no job exit when idle."""
    from . import workers

    if enabled(device):
        workers.pool(workers_wanted(), workers.worker_env(_worker_settings())).start()


def workers_wanted() -> int:
    """Worker processes: ``PYFUSER_COMPILE_WORKERS`` (0: none), at most one less than
    the machine's cores."""
    return min(read("compile_workers"), max(1, (os.cpu_count() or 2) - 1))


def _worker_settings() -> dict:
    """What a worker must share with this process to make the same binaries: Triton's
    cache directory and pyfuser's kernel directory, as this process resolved them."""
    from triton import knobs

    from .cache import cache_dir

    return {"TRITON_CACHE_DIR": knobs.cache.dir, "PYFUSER_CACHE_DIR": cache_dir()}


def enabled(device) -> bool:
    """Whether kernels for ``device`` are compiled ahead: on CUDA, with workers allowed,
    and with nothing asking to watch the first execute (dumps, profiles, overrides)."""
    from .executor import fast_path_allowed

    return torch.device(device).type == "cuda" and read("compile_workers") > 0 and fast_path_allowed()
