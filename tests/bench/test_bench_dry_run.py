"""python -m pyfuser.bench without a GPU: --dry-run builds cases at tiny sizes on CPU
(Triton interpreter) and checks them against eager; the report writers work from rows."""
import datetime
import json
import os
import types

import pytest
import torch

from pyfuser.bench import __main__ as bench_main, report
from pyfuser.bench.__main__ import DRY_SCALE, main
from pyfuser.bench.cases import BY_NAME, CASES, select

DRY_CASES = "bert_softmax_dropout_noview,log_softmax_full,layer_norm_4096,bias_grad,attention_softmax,host"


def test_dry_run_checks_cases_and_writes_json(tmp_path, capsys):
    rc = main(["--dry-run", "--cases", DRY_CASES, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    files = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    assert len(files) == 1, files
    data = json.load(open(tmp_path / files[0]))
    rows = {r["case"]: r for r in data["rows"]}
    assert set(rows) == {c.name for c in select(DRY_CASES)}
    for r in rows.values():
        assert r["check"] == "ok", (r["case"], r["check_detail"], r["errors"])
        assert r["kernels"] >= 1 and r["bytes"] > 0
        for key in ("pyfuser_ms", "inductor_ms", "eager_ms", "pyfuser_pct_of_copy", "inductor_pct_of_copy",
                    "speedup_vs_inductor", "spills", "regs"):
            assert key in r
    # an output that is a view of the input moves no bytes: log_softmax_full = input + fp16 + fp32 outputs
    r = rows["log_softmax_full"]
    rows_, v = r["sizes"][0] * r["sizes"][1], r["sizes"][2]
    assert r["bytes"] == rows_ * v * (2 + 2 + 4)
    for key in ("date", "gpu", "commit", "torch", "triton", "copy_gbps"):
        assert key in data
    assert "| case | shape/dtype | pyfuser ms |" in out
    assert rc == 0


class _OneDay(datetime.datetime):
    """A clock that stays on one day (both runs of the test below may not straddle midnight)."""

    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 2, 12, 0, 0, tzinfo=tz)


def test_cpu_timing_path_and_docs(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_main, "datetime", types.SimpleNamespace(datetime=_OneDay, timezone=datetime.timezone))
    docs = tmp_path / "BENCHMARKS.md"
    args = ["--dry-run", "--cpu-timing", "--no-compile", "--cases", "host,softmax_128", "--out", str(tmp_path),
            "--docs", str(docs)]
    assert main(args) == 0
    data = json.load(open(next(tmp_path.glob("*.json"))))
    rows = {r["case"]: r for r in data["rows"]}
    assert rows["softmax_128_fp16"]["pyfuser_ms"] > 0 and rows["softmax_128_fp16"]["eager_ms"] > 0
    assert rows["host_overhead_pointwise"]["host_us_per_call"] > 0
    text = docs.read_text()
    assert text.startswith("# Benchmarks") and text.count("<!-- bench-run:") == 1
    assert main(args) == 0  # the same date + GPU again: the section is replaced, not added
    assert docs.read_text().count("<!-- bench-run:") == 1


def test_every_case_builds_at_tiny_scale():
    for case in CASES:
        fd = case.define(case.sizes(1 / 4096))
        assert fd.ir.outputs, case.name


def test_model_flag_names_the_models_it_knows(capsys):
    """``--model bert`` runs the BERT benchmark (``tests/dynamo/test_bert_bench.py``
    runs it on a tiny BERT); another name is a usage error that lists bert."""
    with pytest.raises(SystemExit) as exc:
        main(["--model", "gpt"])
    assert exc.value.code == 2 and "bert" in capsys.readouterr().err


def test_report_table_and_geomean():
    rows = [{"case": "a", "group": "suite", "shape": "[2,3] fp16", "pyfuser_ms": 1.0, "inductor_ms": 2.0,
             "eager_ms": 4.0, "pyfuser_pct_of_copy": 80.0, "inductor_pct_of_copy": 40.0, "speedup_vs_inductor": 2.0,
             "kernels": 1, "regs": [40], "spills": [0], "check": "ok"},
            {"case": "b", "group": "suite", "speedup_vs_inductor": 0.5, "check": "FAIL", "regs": [], "spills": []}]
    table = report.markdown_table(rows)
    assert table.splitlines()[0].count("|") == len(report.COLUMNS) + 1
    assert "| a | [2,3] fp16 | 1.000 | 2.000 | 4.000 | 80% | 40% | 2.00x | 1 | 40 | 0 | ok |" in table
    assert report.summary(rows)["geomean_speedup_vs_inductor_suite"] == 1.0
    rows.append(dict(rows[0], case="c", group="training", speedup_vs_inductor=4.0))
    s = report.summary(rows)
    assert s["geomean_speedup_vs_inductor_training"] == 4.0
    assert s["geomean_speedup_vs_inductor_all"] == 1.587  # (2 * 0.5 * 4) ** (1/3)
    assert "geomean speedup vs torch.compile, training fusions (1 cases): 4.00x" in report.summary_lines({}, rows)
    # held-out cases: their own mean, outside "all", and the ones below torch.compile named
    rows += [dict(rows[0], case="g1", group="general", speedup_vs_inductor=0.9),
             dict(rows[0], case="g2", group="general", speedup_vs_inductor=1.6)]
    s = report.summary(rows)
    assert s["geomean_speedup_vs_inductor_general"] == 1.2 and s["general_below_inductor"] == ["g1"]
    assert s["geomean_speedup_vs_inductor_all"] == 1.587
    assert ("geomean speedup vs torch.compile, held-out fusions (2 cases, not tuned on): 1.20x; below 1.0x: g1"
            in report.summary_lines({}, rows))


def test_held_out_cases_are_their_own_group():
    general = select("general")
    assert len(general) >= 15 and all(c.group == "general" for c in general)
    assert not {c.name for c in general} & {c.name for c in CASES if c.group != "general"}


TRAINING = ["layer_norm_backward_bf16", "rms_norm_backward_bf16", "log_softmax_backward_bf16",
            "gelu_tanh_backward_bf16", "gelu_erf_backward_bf16", "rope_forward_bf16", "cross_entropy_bf16",
            "adam_step_fp32", "dropout_residual_layer_norm_backward_bf16"]


def test_select_by_group_and_tag():
    names = [c.name for c in select("training")]
    assert names[:2] == ["softmax_backward_fp16", "dropout_residual_layer_norm_bf16"]  # tagged suite cases
    assert names[2:] == TRAINING
    assert [c.name for c in select("seed")] == [c.name for c in CASES if c.group == "seed"]
    assert [c.name for c in select("gelu_erf,host")] == ["gelu_erf_backward_bf16", "host_overhead_pointwise"]


def test_training_cases_dry_run_count_every_launch(tmp_path, capsys):
    """The training fusions at tiny sizes on CPU: checked against eager, and the kernel
    count of each row is every kernel of its plan (segmented cases launch several)."""
    assert main(["--dry-run", "--cases", "training", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    data = json.load(open(next(tmp_path.glob("*.json"))))
    rows = {r["case"]: r for r in data["rows"]}
    assert set(TRAINING) <= set(rows)
    for r in rows.values():
        assert r["check"] == "ok", (r["case"], r["check_detail"], r["errors"])
        case = BY_NAME[r["case"]]
        fd = case.define(case.sizes(DRY_SCALE))
        fd.execute(case.make_inputs(case.sizes(DRY_SCALE), "cpu", torch.Generator().manual_seed(0)))
        steps = list(fd._runtime.plans.values())[-1].steps
        kernels = sum(1 for s in steps if s.scheduler is not None)
        assert (r["kernels"], r["host_segments"]) == (kernels, len(steps) - kernels), r["case"]
        assert r["bytes"] > 0
    # row and column sums: one inner-outer kernel; cross-entropy's gather is read in its kernel
    for name in ("layer_norm_backward_bf16", "rms_norm_backward_bf16", "dropout_residual_layer_norm_backward_bf16"):
        assert rows[name]["kernels"] == 1, name
    assert rows["cross_entropy_bf16"]["host_segments"] == 0
    assert "| cross_entropy_bf16 |" in out and "+1 host |" not in out
    # bytes: inputs + outputs once; Adam reads four [R, N] fp32 tensors and writes three
    r = rows["adam_step_fp32"]
    assert r["bytes"] == 7 * r["sizes"][0] * r["sizes"][1] * 4
