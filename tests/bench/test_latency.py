"""``python -m pyfuser.bench --latency`` on CPU: the driver end to end on one seed
fusion (two fresh processes), the model measurement in this process on the zoo's MLP,
and the report of a run with a failed process."""
import json

import torch

from pyfuser.bench import latency
from pyfuser.bench.__main__ import main as bench_main
from pyfuser.runtime.phases import PHASES, PhaseReport


def _row(lines, name):
    return next(line for line in lines if line.startswith(f"| {name} |")).split("|")[2:-1]


def test_latency_runs_a_seed_cold_and_warm_in_fresh_processes(tmp_path, capsys):
    rc = bench_main(["--latency", "--device", "cpu", "--latency-parts", "seeds", "--latency-seeds",
                     "log_softmax_sub", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = out.splitlines()
    head = next(line for line in lines if line.startswith("| phase |"))
    assert [c.strip() for c in head.split("|")[2:-1]] == ["seeds cold", "seeds warm"]
    for name in ("planning", "module_load", "first_launch"):  # one fusion, one kernel
        assert all(c.strip().endswith("(1)") for c in _row(lines, name)), name
    for name in ("tracing", "spill_check", "triton_compile"):
        assert [c.strip() for c in _row(lines, name)] == ["-", "-"], name
    (path,) = tmp_path.glob("latency-*.json")
    saved = json.loads(path.read_text())
    runs = saved["results"]["seeds"]["log_softmax_sub"]
    for mode in ("cold", "warm"):
        r = PhaseReport.from_dict(runs[mode]["first"])
        assert r.counts["module_load"] == 1 and 0.0 < r.attributed <= r.wall
        assert runs[mode]["process_s"] > r.wall
    assert saved["header"]["device"] == "cpu" and saved["table"].startswith("| phase |")


def test_model_first_step_and_later_steps():
    torch._dynamo.reset()
    res = latency.measure_model("mlp", "cpu", steps=2)
    first, later = PhaseReport.from_dict(res["first"]), PhaseReport.from_dict(res["later"])
    assert first.counts["dynamo"] == 1 and first.seconds["dynamo"] > 0.0
    for name in ("tracing", "partitioning", "translation", "planning", "first_launch"):
        assert first.counts[name] >= 1, name
    assert not any(later.counts.values())  # the second step compiles nothing
    assert len(res["step_walls"]) == 2 and abs(res["step_walls"][0] - first.wall) < 0.05 * first.wall + 0.01
    torch._dynamo.reset()


def _child(wall, codegen, kernels=()):
    r = PhaseReport()
    r.add("codegen", codegen)
    for k, t in kernels:
        r.add("triton_compile", t, k, "pointwise")
    r.wall = wall
    return r.as_dict()


def test_report_sums_the_seeds_and_names_a_failed_process():
    results = {
        "seeds": {"a": {"cold": {"first": _child(2.0, 0.5, [("k1", 0.75)]), "process_s": 5.0},
                        "warm": {"first": _child(1.0, 0.25), "process_s": 4.0}},
                  "b": {"cold": {"first": _child(3.0, 1.0, [("k2", 1.25)]), "process_s": 6.0, "import_s": 0.5},
                        "warm": {"error": "exit status 1", "output": "Traceback"}}},
        "model": {"cold": {"first": _child(9.0, 2.0), "later": _child(1.0, 0.0), "step_walls": [9.0, 1.0],
                           "process_s": 12.0},
                  "warm": {"error": "timed out after 5 s"}},
    }
    lines = latency.report_lines(results, "gpt2")
    head = [c.strip() for c in lines[0].split("|")[2:-1]]
    assert head == ["seeds cold", "seeds warm", "gpt2 step 1 cold", "gpt2 steps 2+ cold"]
    assert [c.strip() for c in _row(lines, "codegen")] == ["1.500 (2)", "0.250 (1)", "2.000 (1)", "0.000 (1)"]
    assert [c.strip() for c in _row(lines, "wall")] == ["5.000", "1.000", "9.000", "1.000"]
    assert len([line for line in lines if line.startswith("| ")]) == 1 + len(PHASES) + 2
    assert "seed b: cold 3.000 s (process 6.0 s, imports before 0.5 s), warm FAILED (exit status 1)" in lines
    assert "model gpt2: cold steps 9.00 + 1.00 s (process 12.0 s, imports before 0.0 s), warm FAILED (timed out after 5 s)" in lines
    assert lines[-3:] == ["slowest Triton compiles (cold, of 2; 2.00 s in all):", "  seed b: k2 (pointwise): 1.250 s",
                          "  seed a: k1 (pointwise): 0.750 s"]


def test_model_through_another_backend_records_no_pyfuser_phase():
    """``--latency-against`` trains the same model through another backend in its own
    process; ``measure_model``'s backend argument is what that process uses."""
    torch._dynamo.reset()
    res = latency.measure_model("mlp", "cpu", steps=2, backend="eager")
    first = PhaseReport.from_dict(res["first"])
    assert res["backend"] == "eager" and first.counts["dynamo"] == 1
    assert not any(first.counts[name] for name in ("tracing", "partitioning", "planning", "first_launch"))
    assert "peak_allocated" not in res  # measured on the GPU only
    torch._dynamo.reset()


def test_report_puts_pyfuser_beside_torch_compile():
    def run(first, later, peak):
        return {"first": _child(first, 0.0), "later": _child(sum(later), 0.0), "step_walls": [first, *later],
                "process_s": first + 5, "peak_allocated": peak * 2**30, "peak_reserved": (peak + 1) * 2**30}
    results = {"seeds": {},
               "model": {"cold": run(10.0, [0.1, 0.3, 0.2, 0.4], 4.0), "warm": run(2.0, [0.1, 0.1], 4.0)},
               "against": {"cold": run(20.0, [0.4, 0.4, 0.3, 0.5], 5.0), "warm": {"error": "exit status 1", "output": ""}}}
    lines = latency.report_lines(results, "gpt2")
    i = lines.index("gpt2 against torch.compile (pyfuser / torch.compile):")
    assert latency.MODEL_STEPS == 3  # step 3 records pyfuser's graphs: the medians are of steps 4 and 5
    assert lines[i + 1] == ("  cold: first step 10.00 s / 20.00 s = 0.50x; step 2 100.0 ms / 400.0 ms; "
                            "steps 4+ median 300.0 ms / 400.0 ms; "
                            "peak allocated 4.00 GiB / 5.00 GiB = 0.80x (reserved 5.00 / 6.00 GiB)")
    assert lines[i + 2] == "  warm: not compared (a process failed)"
    assert lines[i + 3] == "  pyfuser's warm first step is 20% of its cold one"
    assert any(line.startswith("model gpt2 (torch.compile): cold steps 20.00 + 0.40 + 0.40 + 0.30 + 0.50 s")
               for line in lines)
