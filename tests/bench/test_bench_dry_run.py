"""python -m pyfuser.bench without a GPU: --dry-run builds cases at tiny sizes on CPU
(Triton interpreter) and checks them against eager; the report writers work from rows."""
import json
import os

from pyfuser.bench import report
from pyfuser.bench.__main__ import main
from pyfuser.bench.cases import CASES, select

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


def test_cpu_timing_path_and_docs(tmp_path):
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


def test_model_flag_is_reserved(capsys):
    assert main(["--model", "bert"]) == 2
    assert "not implemented yet" in capsys.readouterr().out


def test_report_table_and_geomean():
    rows = [{"case": "a", "group": "suite", "shape": "[2,3] fp16", "pyfuser_ms": 1.0, "inductor_ms": 2.0,
             "eager_ms": 4.0, "pyfuser_pct_of_copy": 80.0, "inductor_pct_of_copy": 40.0, "speedup_vs_inductor": 2.0,
             "kernels": 1, "regs": [40], "spills": [0], "check": "ok"},
            {"case": "b", "group": "suite", "speedup_vs_inductor": 0.5, "check": "FAIL", "regs": [], "spills": []}]
    table = report.markdown_table(rows)
    assert table.splitlines()[0].count("|") == len(report.COLUMNS) + 1
    assert "| a | [2,3] fp16 | 1.000 | 2.000 | 4.000 | 80% | 40% | 2.00x | 1 | 40 | 0 | ok |" in table
    assert report.summary(rows)["geomean_speedup_vs_inductor_suite"] == 1.0
