"""Compiling kernels ahead in worker processes (``runtime/workers.py``, ``runtime/ahead.py``).

The pool runs real worker processes here; the compiles are Triton's, for sm_90, with
its ptxas (no GPU needed).  That the first launch on a GPU then finds the binaries
is tests/dynamo/test_gpu.py's ``test_compile_ahead_fills_the_first_launch``."""
import os
import time

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.runtime import ahead, workers
from pyfuser.runtime.executor import runtime_of

from ..codegen.common import need_ptxas


def _wait_until(condition, seconds=60):
    """Poll ``condition`` until it holds or ``seconds`` pass (workers start and exit
    on threads of their own)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def pools():
    """Pools made by ``pools(size, extra_env=None, idle=None)``, closed after the test."""
    made = []

    def make(size, extra_env=None, idle=None):
        made.append(workers.Pool(size, workers.worker_env(extra_env or {}), idle=idle))
        return made[-1]

    yield make
    for p in made:
        p.close()


@pytest.fixture
def pool(pools):
    return pools(2)


def test_a_job_runs_in_another_process(pool):
    assert pool.submit("os.getpid").result(timeout=120) != os.getpid()


def test_a_failing_job_says_why_and_the_worker_goes_on(pool):
    with pytest.raises(workers.WorkerError, match="ZeroDivisionError"):
        pool.submit("operator.truediv", 1, 0).result(timeout=120)
    assert pool.submit("operator.add", 2, 3).result(timeout=120) == 5


def test_a_worker_that_dies_fails_its_job_and_is_replaced(pools):
    p = pools(1)
    first = p.submit("os.getpid").result(timeout=120)
    with pytest.raises(workers.WorkerError, match="failed"):
        p.submit("os._exit", 3).result(timeout=120)
    assert p.submit("os.getpid").result(timeout=120) not in (first, os.getpid())


def test_an_idle_worker_exits_and_the_next_job_starts_another(pools):
    p = pools(1, idle=0.2)
    first = p.submit("os.getpid").result(timeout=120)
    _wait_until(lambda: not p.procs)
    assert not p.procs, "the idle worker is still running"
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)  # exited and reaped
    assert p.submit("operator.add", 2, 3).result(timeout=120) == 5
    assert p.submit("os.getpid").result(timeout=120) not in (first, os.getpid())


def test_started_workers_run_before_any_job_and_exit_when_idle(pools):
    p = pools(2, idle=1.0)
    p.start()
    _wait_until(lambda: len(p.procs) == 2)
    assert len(p.procs) == 2 and len(p.threads) == 2  # started with no job
    p.start()  # no more than ``size``
    assert len(p.threads) == 2
    assert p.submit("os.getpid").result(timeout=120) in {proc.pid for proc in p.procs}
    _wait_until(lambda: not p.procs)
    assert not p.procs, "the started workers did not exit when idle"
    assert not workers.running()  # (not the process's pool)


def test_the_backend_starts_the_workers_for_a_graph_on_a_gpu(monkeypatch):
    """Dynamo's call of the backend starts the workers before tracing (for inputs on a
    GPU only), so their imports overlap the tracing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from pyfuser.dynamo import backend

    started = []
    monkeypatch.setattr(ahead, "start_workers", started.append)
    backend._start_workers([torch.ones(2), 3])
    assert started == []
    with FakeTensorMode():
        on_gpu = torch.empty(2, device="cuda")
    backend._start_workers([torch.ones(2), on_gpu])
    assert [d.type for d in started] == ["cuda"]


def test_what_a_job_prints_does_not_corrupt_the_results(pool):
    assert pool.submit("builtins.print", "noise on stdout").result(timeout=120) is None
    assert pool.submit("operator.mul", 6, 7).result(timeout=120) == 42


def test_jobs_not_started_fail_when_the_pool_closes():
    p = workers.Pool(1, workers.worker_env({}))
    slow = p.submit("time.sleep", 3)
    queued = [p.submit("operator.add", i, 1) for i in range(3)]
    p.close()
    assert slow.result(timeout=60) is None  # the job in hand finishes
    for f in queued:
        with pytest.raises(workers.WorkerError, match="closed"):
            f.result(timeout=60)
    with pytest.raises(workers.WorkerError, match="closed"):
        p.submit("os.getpid")


def _softmax():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        x = fd.ops.cast(t, DataType.Float)
        m = fd.ops.max(x, dims=[1], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(x, m))
        fd.add_output(fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)), DataType.Half))
        fd.add_output(fd.ops.add(x, x))
    return fd


def test_plan_ahead_plans_once_into_the_fusions_runtime():
    """The plan is stored under the signature a CUDA execute computes (its kernels under
    the names that execute will look up), one job per kernel step; planning again
    hands out nothing."""
    fd = _softmax()
    inputs = [torch.empty(64, 4096, dtype=torch.float16, device="meta")]
    jobs = ahead.plan_ahead(fd, inputs, "cuda:0")
    rt = runtime_of(fd)
    (sig, plan), = rt.plans.items()
    steps = [s for s in plan.steps if not s.is_host and s.scheduler is not None]
    assert len(jobs) == len(steps) >= 1
    built = {src.name: src.source for src, _ in rt.kernels.values()}
    for job in jobs:
        for name, source, specs, kw, budget in job:
            assert built[name] == source and "num_warps" in kw
            assert all(not isinstance(s, torch.Tensor) for s in specs)  # plain data for the pipe
    assert ahead.plan_ahead(fd, inputs, "cuda:0") == []


def test_an_input_at_a_storage_offset_is_planned_and_compiled_at_that_offset():
    """A region input that starts 8 bytes into its storage (a causal LM's labels shifted
    by one) is not 16-byte aligned: the plan ahead must be the one its execute makes
    (another signature than an aligned input's), and the worker's argument must say so
    to Triton's specialization of the pointer (else the first launch compiles again)."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], dtype=DataType.Int)
        fd.add_output(fd.ops.add(fd.ops.mul(t, t), t))
    shifted = ahead.meta_strided((2, 8), (9, 1), torch.int64, 1)  # labels[:, 1:] of a [2, 9] batch
    assert shifted.storage_offset() == 1 and shifted.data_ptr() % 16 == 8
    jobs = ahead.plan_ahead(fd, [shifted], "cuda:0")
    assert ahead.plan_ahead(fd, [ahead.meta_strided((2, 8), (9, 1), torch.int64, 2)], "cuda:0")  # 16 bytes in
    assert len(runtime_of(fd).plans) == 2  # two signatures: misaligned and aligned
    specs = [s for job in jobs for kernel in job for s in kernel[2] if isinstance(s, tuple) and s[0] == "tensor"]
    rebuilt = [ahead.meta_arg(s) for s in specs if s[1] == (2, 8) and s[2] == (9, 1)]
    assert rebuilt and all(x.storage_offset() == 1 and x.data_ptr() % 16 == 8 for x in rebuilt)
    empty = ahead.meta_strided((0, 3), (3, 1), torch.float32, 5)
    assert empty.shape == (0, 3) and empty.storage_offset() == 5


def test_a_region_plans_ahead_at_its_inputs_storage_offsets(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx

    from pyfuser.dynamo.regions.region import FusedRegion

    shifted = torch.randint(0, 50, (2, 9))[:, 1:]  # 8 bytes into the batch's storage
    region = FusedRegion(make_fx(lambda labels: labels * 2 + 1, tracing_mode="fake")(shifted), "shifted")
    seen = []
    monkeypatch.setattr(ahead, "plan_ahead", lambda fd, inputs, device: seen.append(inputs) or [])
    monkeypatch.setattr(region, "device", torch.device("cuda"))
    assert region.plan_ahead() == [] and len(seen) == 1
    (x,) = seen[0]
    assert x.device.type == "meta" and (x.shape, x.stride()) == (shifted.shape, shifted.stride())
    assert x.storage_offset() == 1 and x.data_ptr() % 16 == 8


def test_a_worker_walks_the_spill_candidates_in_order(tmp_path, monkeypatch):
    """The first candidate is compiled; a second only when the first is rejected (here by
    a register budget no kernel meets); the last is never checked."""
    need_ptxas()
    fd = _softmax()
    job = ahead.plan_ahead(fd, [torch.empty(64, 4096, dtype=torch.float16, device="meta")], "cuda:0")[0]
    name, source, specs, kw, _ = job[0]
    first = (name, source, specs, kw, None)
    starved = (name, source, specs, kw, 1)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert ahead.compile_step(90, (first, first)) == 1
    assert ahead.compile_step(90, (starved, first)) == 2
    assert ahead.compile_step(90, (starved,)) == 1


def test_workers_compile_into_the_shared_triton_cache(tmp_path, pools):
    """A worker's compile lands in the Triton cache directory this process names: this
    process's cache lookup finds it (``compiled_before``: what a second process asks
    before starting workers), and a compile of the same kernel here adds nothing (a hit)."""
    need_ptxas()
    from pyfuser.compat import compile_offline
    from pyfuser.runtime.cache import load_kernel

    fd = _softmax()
    jobs = ahead.plan_ahead(fd, [torch.empty(64, 4096, dtype=torch.float16, device="meta")], "cuda:0")
    cache = tmp_path / "triton"
    from triton import knobs

    with knobs.cache.scope():
        knobs.cache.dir = str(cache)
        assert not any(ahead.compiled_before(90, job) for job in jobs)
    p = pools(2, {"TRITON_CACHE_DIR": str(cache)})
    assert sum(p.submit("pyfuser.runtime.ahead.compile_step", 90, job).result(timeout=300) for job in jobs) \
        >= len(jobs)
    entries = sorted(os.listdir(cache))
    assert any(f.endswith(".cubin") for d in entries for f in os.listdir(cache / d))
    name, source, specs, kw, _ = jobs[0][0]
    with knobs.cache.scope():
        knobs.cache.dir = str(cache)
        assert all(ahead.compiled_before(90, job) for job in jobs)  # a second process hands out nothing
        compile_offline(load_kernel(name, source, "cuda"), [ahead.meta_arg(s) for s in specs], kw, 90)
    assert sorted(os.listdir(cache)) == entries


def test_compiling_ahead_is_off_on_the_cpu_and_with_no_workers(monkeypatch):
    assert not ahead.enabled(torch.device("cpu"))
    monkeypatch.setenv("PYFUSER_COMPILE_WORKERS", "0")
    assert not ahead.enabled(torch.device("cuda", 0))
    assert ahead.workers_wanted() == 0
    monkeypatch.setenv("PYFUSER_COMPILE_WORKERS", "100000")
    assert ahead.workers_wanted() == max(1, (os.cpu_count() or 2) - 1)


def test_closing_with_kill_does_not_wait_for_the_job_in_hand():
    import time

    p = workers.Pool(1, workers.worker_env({}))
    assert p.submit("os.getpid").result(timeout=120)
    slow = p.submit("time.sleep", 60)
    time.sleep(0.5)
    t0 = time.perf_counter()
    p.close(kill=True)
    with pytest.raises(workers.WorkerError):
        slow.result(timeout=30)
    assert time.perf_counter() - t0 < 20


def test_the_wait_has_a_limit():
    """A job that does not end in time counts as failed: the first run compiles it."""
    p = workers.Pool(1, workers.worker_env({}))
    try:
        pending = ahead.Pending()
        pending.futures.append(p.submit("time.sleep", 30))
        assert pending.wait(limit=0.5) == (0, 1)
    finally:
        p.close(kill=True)


def test_a_graph_with_few_new_kernels_compiles_them_at_their_launches():
    """Below ``MIN_JOBS`` new kernel steps no worker is asked (starting one costs more)."""
    pending = ahead.Pending()
    jobs = [((f"k{i}", f"src {i} {os.getpid()}", (), {}, None),) for i in range(ahead.MIN_JOBS - 1)]
    pending.submit(jobs, torch.device("cuda", 0))  # returns before it needs the device
    assert len(pending) == 0


def test_running_says_whether_the_process_pool_has_live_workers():
    workers.close()
    assert not workers.running()
    workers.pool(1, workers.worker_env({})).start()
    _wait_until(workers.running)
    assert workers.running()
    workers.close()
    assert not workers.running()


def test_a_few_new_kernels_go_to_workers_that_are_running(monkeypatch):
    """Workers already running (started at the backend's entry) cost nothing to ask:
    a graph's few kernels (a loss's) compile there in parallel, not one by one at
    their launches."""
    submitted = []

    class Running:
        size = 3

        def submit(self, function, *args):
            submitted.append(args[1])
            return None

    monkeypatch.setattr(workers, "running", lambda: True)
    monkeypatch.setattr(workers, "pool", lambda size, env: Running())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.setattr(ahead, "compiled_before", lambda arch, job: False)
    jobs = [((f"k{i}", f"src {i}", (), {}, None),) for i in range(2)]
    pending = ahead.Pending()
    pending.submit(jobs, torch.device("cuda", 0))
    assert submitted == jobs and len(pending) == 2
    monkeypatch.setattr(workers, "running", lambda: False)
    pending = ahead.Pending()
    pending.submit(jobs, torch.device("cuda", 0))
    assert len(pending) == 0


def test_a_worker_builds_each_compiled_candidates_launcher(tmp_path, monkeypatch):
    """Loading a kernel onto the GPU first builds its C launcher (Triton's
    ``CudaLauncher``, compiled by the C compiler unless Triton's cache holds it); the
    worker builds one for each candidate it compiles, from the same compiled kernel a
    load would use.  Here the C compile is recorded, not run (no CUDA driver library to
    link against on this machine); where it fails the job still succeeds."""
    need_ptxas()
    from triton.backends.nvidia import driver

    fd = _softmax()
    job = ahead.plan_ahead(fd, [torch.empty(64, 4096, dtype=torch.float16, device="meta")], "cuda:0")[0]
    name, source, specs, kw, _ = job[0]
    first, starved = (name, source, specs, kw, None), (name, source, specs, kw, 1)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    built = []

    class Module:
        launch = None

    monkeypatch.setattr(driver, "library_dirs", lambda: [])
    monkeypatch.setattr(driver, "compile_module_from_src",
                        lambda src, name, **kw: built.append((name, src)) or Module())
    assert ahead.compile_step(90, (starved, first)) == 2
    assert [n for n, _ in built] == ["__triton_launcher"] * 2
    assert all("cuLaunchKernelEx" in src or "cuLaunchKernel" in src for _, src in built)

    def no_linker(**kw):
        raise RuntimeError("libcuda.so cannot found!")

    monkeypatch.setattr(driver, "compile_module_from_src", lambda src, name, **kw: no_linker())
    assert ahead.compile_step(90, (first,)) == 1
