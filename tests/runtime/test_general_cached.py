"""Plans of several steps (host steps, kernels reading stored intermediates,
reference steps) run a cached ``Program`` after their first execute: no re-binding,
no heuristics, no kernel cache lookups.  Each fusion is checked against the
reference executor, random numbers included: the reference draws the same (seed,
offset) after the same ``torch.manual_seed``."""
import pytest
import torch

import pyfuser
from pyfuser.reference import run_reference
from pyfuser.runtime import args as args_mod, executor, prepare
from pyfuser.runtime.plan import ExecutorCache
from pyfuser.segment.steps import Plan, Step

from ..helpers import without_scheduler
from .general_fusions import (GENERAL, define, embedding, embedding_inputs, layer_norm_backward,
                              layer_norm_backward_inputs, linear_between_pointwise, linear_inputs)

RANDOM = ("dropout_linear", "random_rows")


# Tests of the backend's fast path, which scheduler choices turn off: they plan with
# every scheduler.
EVERY_SCHEDULER = {"test_program_for_runs_general_plans", "test_the_fast_path_follows_the_environment"}


@pytest.fixture(autouse=True)
def _two_kernel_plans(request):
    """The row-and-column fusions here (layer-norm backward, random rows) stand for plans
    whose second kernel reads the first one's stored results: planned without the
    inner-outer tile, which runs them as one kernel."""
    if request.node.originalname in EVERY_SCHEDULER:
        yield
        return
    with without_scheduler("inner_outer"):
        yield


@pytest.fixture
def paths(monkeypatch):
    """How many executes took ``_execute_slow`` (bind, plan, prepare), and how many
    kernels were looked up or built (``ExecutorCache.build``)."""
    counts = {"slow": 0, "build": 0}
    slow, build = executor._execute_slow, ExecutorCache.build

    def counting(name, fn):
        def wrapper(*a, **k):
            counts[name] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(executor, "_execute_slow", counting("slow", slow))
    monkeypatch.setattr(ExecutorCache, "build", counting("build", build))
    return counts


def reference(fd, inputs, seed):
    """The reference executor's outputs with the random state an execute right after
    ``torch.manual_seed(seed)`` draws."""
    torch.manual_seed(seed)
    rng_state, _ = args_mod.make_rng_state(fd.ir, torch.device("cpu"))
    return run_reference(fd.ir, list(inputs), rng_state=rng_state)


def assert_outputs(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def kernels(fd):
    return sum(s.scheduler is not None for s in list(fd._runtime.plans.values())[-1].steps)


@pytest.mark.parametrize("name", list(GENERAL))
def test_later_executes_take_the_cached_program(name, paths):
    build, make = GENERAL[name]
    fd = define(build)
    for seed in range(3):
        inputs = make(seed=seed)
        before = pyfuser.cache_info()
        torch.manual_seed(seed)
        outs = fd.execute(list(inputs))
        after = pyfuser.cache_info()
        assert_outputs(outs, reference(fd, inputs, seed))
        assert after["launches"] - before["launches"] == kernels(fd)
        if seed == 0:
            built = paths["build"]
        else:
            assert after["misses"] == before["misses"]
    assert list(fd._runtime.plans.values())[-1].general
    assert paths["slow"] == 1, paths
    assert paths["build"] == built, "a cached execute must not look kernels up"
    assert len(fd._runtime.programs) == 1


@pytest.mark.parametrize("name", RANDOM)
def test_random_numbers_are_fresh_on_every_execute(name):
    """Each execute draws new numbers, the reference's for the same seed (checked in
    ``test_later_executes_take_the_cached_program``)."""
    build, make = GENERAL[name]
    inputs = make(seed=0)
    fd = define(build)
    torch.manual_seed(11)
    outs = [fd.execute(list(inputs)) for _ in range(3)]
    assert not torch.equal(outs[1][0], outs[2][0]), "each execute draws new numbers"


@pytest.mark.parametrize("case", ["linear k=0", "linear m=0", "layer_norm_backward n=0", "embedding s=0"])
def test_zero_size_intermediates_and_outputs(case, paths):
    """Zero-size values no step writes (a host op's empty input, empty outputs) are
    fresh empty tensors on every execute."""
    fd, make = {
        "linear k=0": (define(linear_between_pointwise), lambda s: linear_inputs(k=0, seed=s)),
        "linear m=0": (define(linear_between_pointwise), lambda s: linear_inputs(m=0, seed=s)),
        "layer_norm_backward n=0": (define(layer_norm_backward, 0, 20),
                                    lambda s: layer_norm_backward_inputs(n=0, seed=s)),
        "embedding s=0": (define(embedding), lambda s: embedding_inputs(s=0, seed=s)),
    }[case]
    outs = []
    for seed in range(3):
        inputs = make(seed)
        outs.append(fd.execute(list(inputs)))
        assert_outputs(outs[-1], reference(fd, inputs, seed))
    assert paths["slow"] == 1
    (prep,) = fd._runtime.programs.values()
    assert "(empty)" in repr(prep), "a zero-size value no step writes"
    assert all(outs[1][k] is not outs[2][k] for k, o in enumerate(outs[1]) if o.numel() == 0)


def test_aliases_and_views_of_inputs():
    fd = define(embedding)
    fd.execute(embedding_inputs(seed=0))
    ids, table = embedding_inputs(seed=1)
    _, same, view = fd.execute([ids, table])
    assert same is ids
    assert view.data_ptr() == table.data_ptr() and torch.equal(view, table.T)


def test_host_inputs_stored_narrow_and_cast_on_the_host():
    """The linear's fp32 input is an upcast of fp16 ``x * x``: the first kernel stores
    it at 16 bits and the cached program replays the cast before the linear."""
    fd = define(linear_between_pointwise)
    fd.execute(linear_inputs(seed=0))
    (prep,) = fd._runtime.programs.values()
    first, host = prep.launches[0], prep.program[1]
    assert [o.dtype.torch for o in first.src.outputs] == [torch.float16, torch.float32]
    assert [e.op for e, _, _ in host.calls] == ["cast", "linear"]
    text = repr(prep)
    assert "host linear" in text and "kernel " in text and "outputs " in text


def test_program_for_runs_general_plans(paths):
    """The torch.compile backend's direct path: ``program_for``, then ``run``."""
    fd = define(linear_between_pointwise)
    fd.execute(linear_inputs(seed=0))
    inputs = linear_inputs(seed=1)
    prog = executor.program_for(fd, inputs)
    assert prog is not None and executor.fast_path_allowed()
    assert_outputs(prog.run(inputs), fd.reference(inputs))
    assert paths["slow"] == 1


def test_poisoned_and_recorded_launches(monkeypatch):
    fd = define(linear_between_pointwise)
    fd.execute(linear_inputs(seed=0))
    record: list = []
    monkeypatch.setattr(executor, "POISON_OUTPUTS", True)
    monkeypatch.setattr(executor, "RECORD_LAUNCHES", record)
    inputs = linear_inputs(seed=1)
    assert not executor.fast_path_allowed(), "poison and record are hooks: a region must call execute"
    assert_outputs(fd.execute(list(inputs)), fd.reference(list(inputs)))
    assert len(record) == kernels(fd) == 2


def test_dumps_are_hooks_of_the_cached_program(paths, monkeypatch, capsys):
    fd = define(linear_between_pointwise)
    fd.execute(linear_inputs(seed=0))
    monkeypatch.setenv("PYFUSER_DUMP", "cache")
    monkeypatch.delenv("PYFUSER_PROF", raising=False)
    inputs = linear_inputs(seed=1)
    assert_outputs(fd.execute(list(inputs)), fd.reference(list(inputs)))
    assert paths["slow"] == 1
    out = capsys.readouterr().out
    assert "hit: launches already prepared" in out and "pyfuser_f" in out


@pytest.mark.parametrize("name", ["layer_norm_backward", "dropout_linear"])
def test_reference_steps_are_host_calls_of_the_program(name, paths):
    """A step no scheduler took runs the reference executor's exprs as host calls of
    the cached program, random ones drawing the run's (seed, offset)."""
    build, make = GENERAL[name]
    fd = define(build)
    fd.execute(list(make(seed=0)))
    rt = fd._runtime
    sig = list(rt.plans)[-1]
    rt.plans[sig] = Plan({}, [Step(list(fd.ir.outputs), None)], signature=sig)
    rt.programs.clear()
    for seed in (1, 2):
        inputs = make(seed=seed)
        torch.manual_seed(seed)
        assert_outputs(fd.execute(list(inputs)), reference(fd, inputs, seed))
    assert paths["slow"] == 2, "the first execute, and the one after the plan was replaced"
    (prog,) = rt.programs.values()
    assert not prog.launches and "host " in repr(prog)


def test_spill_check_builds_warm_up_arguments_for_every_kernel(monkeypatch):
    """The GPU's spill check on every kernel of a general plan, run on the CPU: the
    warm-up arguments of kernels on intermediates are tensors of the right shapes and
    dtypes (placeholders), and the check's choice is what the program launches
    (the interpreter has no compiled kernel to read spills from: the heuristics' params)."""
    warmed = []
    warmup = args_mod.warmup_args

    def spy(src, params, sched, seg, b):
        args, grid, kw = warmup(src, params, sched, seg, b)
        for a, x in zip(src.args, args):
            if a.kind == "ptr" and a.source[0] in ("tensor", "output"):
                assert tuple(x.shape) == b.shapes[a.source[1]] and x.dtype == a.source[1].dtype.torch
        warmed.append(src.name)
        return args, grid, kw

    monkeypatch.setattr(prepare, "checks_spills", lambda device: True)
    monkeypatch.setattr(prepare, "warmup_args", spy)
    fd = define(linear_between_pointwise)
    for seed in range(2):
        inputs = linear_inputs(seed=seed)
        assert_outputs(fd.execute(list(inputs)), fd.reference(list(inputs)))
    (prep,) = fd._runtime.programs.values()
    assert warmed == [la.src.name for la in prep.launches]


@pytest.mark.gpu
def test_general_plan_kernels_pass_the_spill_check(monkeypatch):
    """On CUDA every kernel of a general plan is built through ``choose_params``."""
    calls = []
    choose = prepare.choose_params

    def spy(rt, seg, sched, *a, **k):
        calls.append(sched.NAME)
        return choose(rt, seg, sched, *a, **k)

    monkeypatch.setattr(prepare, "choose_params", spy)
    fd = define(layer_norm_backward)
    inputs = [x.cuda() for x in layer_norm_backward_inputs(seed=0)]
    assert_outputs(fd.execute(inputs), fd.reference(inputs))
    assert len(calls) == kernels(fd) == 2


def test_the_straight_line_runner_matches_the_loop():
    """After its first execute, a program without host steps runs as one generated
    function (``straight.straight_line``): the same outputs, random numbers and launch
    count as ``Program``'s loop; a program with host steps keeps the loop."""
    build, make = GENERAL["random_rows"]
    fd = define(build)
    inputs = make(seed=0)
    fd.execute(list(inputs))
    (prep,) = fd._runtime.programs.values()
    fd.execute(list(inputs))  # the first run without hooks builds it
    assert callable(prep._straight) and "def straight(inputs):" in prep._straight.source
    for seed in (3, 4):
        torch.manual_seed(seed)
        before = pyfuser.cache_info()["launches"]
        fast = prep.run(list(inputs))
        assert pyfuser.cache_info()["launches"] - before == len(prep.launches)
        torch.manual_seed(seed)
        loop = prep._counted(list(inputs), None)
        assert len(fast) == len(loop)
        for x, y in zip(fast, loop):
            assert torch.equal(x, y)

    with_host = define(GENERAL["linear"][0])
    with_host.execute(list(GENERAL["linear"][1](seed=0)))
    with_host.execute(list(GENERAL["linear"][1](seed=0)))
    (prep,) = with_host._runtime.programs.values()
    assert prep._straight is False


def test_the_straight_line_runner_rebuilds_views_of_inputs():
    """An output that is an input's reshape is rebuilt from the input per execute."""
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.reshape(x, new_shape=[24]))
        fd.add_output(fd.ops.mul(x, 2.0))

    fd = define(build)
    for seed in range(3):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed))
        flat, doubled = fd.execute([x])
        assert flat.data_ptr() == x.data_ptr() and torch.equal(flat, x.reshape(24))
        torch.testing.assert_close(doubled, x * 2)
    (prep,) = fd._runtime.programs.values()
    assert callable(prep._straight) and prep._views


@pytest.mark.parametrize("dump_value,prof_value,allowed", [
    (None, None, True), ("", None, True), ("cache", None, False), (None, "0", True), (None, "", True),
    (None, "print", False), (None, "bogus", False), ("kernel_code", "print", False)])
def test_the_fast_path_follows_the_environment(monkeypatch, dump_value, prof_value, allowed):
    """``executor.fast_path_allowed`` reads PYFUSER_DUMP and PYFUSER_PROF raw: any dump,
    a profile or a value it does not know sends the call to ``execute`` (which
    validates it), as an override does."""
    for name, value in (("PYFUSER_DUMP", dump_value), ("PYFUSER_PROF", prof_value)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert executor.fast_path_allowed() is allowed
    if allowed:
        from pyfuser.schedulers.base import Choices

        with Choices(block_k=4):
            assert not executor.fast_path_allowed()
