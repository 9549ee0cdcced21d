"""The phase timers (``runtime/phases.py``): exclusive attribution, threads, and what a
fusion's first and cached executes record."""
import threading

import pytest
import torch

from pyfuser.runtime import phases
from pyfuser.runtime.phases import PHASES, PhaseError, PhaseReport, charge, phase, recording, timed

from .conftest import gelu_fd, gelu_inputs


class Clock:
    """A perf_counter that moves only when told."""

    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(phases, "time", c)
    return c


def test_nested_phases_are_subtracted_from_their_parent(clock):
    with recording() as r:
        clock.t = 1.0
        with phase("planning"):
            clock.t = 3.0
            with phase("scheduling"):
                clock.t = 7.0
            clock.t = 8.0
            charge("triton_compile", 0.5, "k1", "pointwise")  # measured elsewhere: out of planning too
        clock.t = 10.0
    assert r.seconds["scheduling"] == 4.0
    assert r.seconds["planning"] == 8.0 - 1.0 - 4.0 - 0.5
    assert r.seconds["triton_compile"] == 0.5 and r.kernels == {"k1": ["pointwise", 0.5]}
    assert r.wall == 10.0 and r.unattributed == 3.0
    assert r.attributed + r.unattributed == r.wall
    assert r.counts["planning"] == r.counts["scheduling"] == r.counts["triton_compile"] == 1


def test_decorated_function_is_a_phase_and_keeps_its_name(clock):
    @timed("codegen")
    def emit(n):
        """Emits."""
        clock.t += n
        return n * 2

    assert emit(1.0) == 2.0  # not recording: the plain call
    with recording() as r:
        assert emit(2.0) == 4.0
    assert r.seconds["codegen"] == 2.0 and r.counts["codegen"] == 1
    assert emit.__name__ == "emit" and emit.__doc__ == "Emits."


def test_nothing_is_recorded_outside_a_recording():
    assert phase("planning") is phase("codegen")  # one shared no-op context
    with phase("planning"):
        pass
    charge("triton_compile", 1.0)
    with recording() as r:
        pass
    assert r.attributed == 0.0 and not any(r.counts.values())


def test_unknown_phase_and_nested_recording_are_errors():
    with pytest.raises(PhaseError, match="unknown phase 'planing'"):
        timed("planing")
    with recording():
        with pytest.raises(PhaseError, match="unknown phase 'codgen'"):
            with phase("codgen"):
                pass
        with pytest.raises(PhaseError, match="already on"):
            with recording():
                pass
    with recording():  # the failed attempt left no recording behind
        pass


def test_each_thread_nests_its_own_phases():
    """A phase on another thread is not subtracted from this thread's open phase."""
    inside, done = threading.Event(), threading.Event()
    span = {}

    def outer():
        with phase("planning"):
            t0 = phases.time.perf_counter()
            inside.set()
            done.wait(10)
            span["outer"] = phases.time.perf_counter() - t0

    def inner():
        inside.wait(10)
        with phase("scheduling"):
            threading.Event().wait(0.05)
        done.set()

    with recording() as r:
        threads = [threading.Thread(target=outer), threading.Thread(target=inner)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert r.seconds["scheduling"] >= 0.05
    assert r.seconds["planning"] >= span["outer"] >= 0.05


def test_threads_add_without_losing_counts():
    def work():
        for _ in range(200):
            with phase("prepare"):
                with phase("codegen"):
                    pass

    with recording() as r:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert r.counts["prepare"] == r.counts["codegen"] == 1600
    assert 0.0 <= r.attributed <= r.wall


def test_first_execute_records_the_runtime_phases_and_a_cached_one_nothing():
    fd, inputs = gelu_fd(), gelu_inputs()
    with recording() as first:
        fd.execute(inputs)
    for name in ("planning", "scheduling", "prepare", "codegen", "module_load", "first_launch"):
        assert first.counts[name] >= 1 and first.seconds[name] > 0.0, name
    for name in ("tracing", "partitioning", "translation", "spill_check", "triton_compile", "graph_capture"):
        assert first.counts[name] == 0, name  # no backend here; CPU: no Triton compile
    assert first.attributed <= first.wall
    with recording() as cached:
        fd.execute(inputs)
    assert not any(cached.counts.values()) and cached.attributed == 0.0 and cached.wall > 0.0


def test_report_round_trips_merges_and_prints():
    a = PhaseReport()
    a.add("codegen", 1.5)
    a.add("triton_compile", 2.0, "k2", "inner_normalization")
    a.wall = 5.0
    b = PhaseReport.from_dict(a.as_dict())
    assert b.as_dict() == a.as_dict()
    both = a.merged(b)
    assert both.seconds["codegen"] == 3.0 and both.counts["codegen"] == 2 and both.wall == 10.0
    assert both.slowest_kernels() == [("k2", "inner_normalization", 4.0)]
    rows = str(a).splitlines()
    assert len(rows) == 2 + len(PHASES) + 2
    assert rows[2 + list(PHASES).index("codegen")].split("|")[2].split() == ["1.500", "(1)"]
    assert rows[-2].split("|")[2].strip() == "1.500" and rows[-1].split("|")[2].strip() == "5.000"


@pytest.mark.gpu
def test_first_execute_on_the_gpu_records_the_spill_check_and_each_compile():
    fd, inputs = gelu_fd(), gelu_inputs()
    with recording() as first:
        fd.execute(inputs)
        torch.cuda.synchronize()
    assert first.counts["spill_check"] >= 1 and first.counts["triton_compile"] >= 1
    assert first.kernels and all(k.startswith(f"pyfuser_f{fd.id}_k") and s for k, (s, _) in first.kernels.items())
    assert first.seconds["triton_compile"] == pytest.approx(sum(t for _, t in first.kernels.values()))
    with recording() as cached:
        fd.execute(inputs)
    assert not any(cached.counts.values())
