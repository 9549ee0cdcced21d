"""The bench's "training_ops" group on CPU: forward + backward through autograd of eager
and torch.compile(backend="pyfuser") at tiny sizes, checked against the fp32 reference;
its selection, byte model and report table."""
import json

import torch

from pyfuser.bench import report, training_ops, training_ops_run
from pyfuser.bench.__main__ import DRY_SCALE, main
from pyfuser.bench.cases import select
from pyfuser.bench.harness import Options

NAMES = [c.name for c in training_ops.CASES]


def test_group_dry_run_checks_outputs_and_gradients(tmp_path, capsys):
    assert main(["--dry-run", "--cases", "training_ops", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    data = json.load(open(next(tmp_path.glob("*.json"))))
    rows = {r["case"]: r for r in data["rows"]}
    assert list(rows) == NAMES
    for name, r in rows.items():
        case = training_ops.BY_NAME[name]
        assert r["group"] == "training_ops" and r["check"] == "ok", (name, r["check_detail"], r["errors"])
        n_grads = sum(t.requires_grad for t in case.make_inputs(case.sizes(DRY_SCALE), "cpu", torch.Generator()))
        for impl in ("eager", "pyfuser"):
            detail = r["checks"][impl]
            assert detail.startswith("ok ") and f"grad{n_grads - 1} " in detail, (name, impl, detail)
        assert r["checks"]["liger"].startswith("n/a"), r["checks"]["liger"]
        assert r["bytes"] == case.bytes(case.sizes(DRY_SCALE)) > 0
        assert f"| {name} |" in out
    assert "| case | shape/dtype | eager ms | inductor ms | pyfuser ms | liger ms |" in out
    assert "| case | shape/dtype | pyfuser ms |" not in out  # no fusion rows: no fusion table


def _bad_case():
    """A closure whose bf16 result is off by 5%: every implementation fails the check."""
    def scaled_product(a, b):
        return (a * b * (1.0 if a.dtype == torch.float32 else 1.05),)

    return training_ops.OpCase("scaled_fwd_bwd", "glu", (8, 32), training_ops.glu_inputs, scaled_product, None,
                               lambda s: "")


def test_a_wrong_result_fails_the_check():
    opts = Options(device="cpu", scale=1.0, timing=False, compile=False)
    row = training_ops_run.run_case(_bad_case(), opts, None)
    assert row["check"] == "FAIL", row["check_detail"]
    assert row["checks"]["eager"].startswith("FAIL") and row["checks"]["pyfuser"].startswith("FAIL")
    assert "out0 bfloat16: error" in row["checks"]["pyfuser"]


def test_compare_names_the_gradient_that_differs():
    ref = (torch.ones(4, 8),), (torch.full((4, 8), 2.0),)
    good = (torch.ones(4, 8, dtype=torch.bfloat16),), (torch.full((4, 8), 2.0, dtype=torch.bfloat16),)
    assert training_ops_run.compare(good, ref)[0]
    bad = good[0], (good[1][0].clone().index_fill_(1, torch.tensor([3]), 2.5),)
    ok, detail = training_ops_run.compare(bad, ref)
    assert not ok and "grad0 bfloat16: error" in detail and "out0 0.00" in detail


def test_selected_only_by_name():
    assert [c.name for c in training_ops.select("training_ops")] == NAMES
    assert [c.name for c in training_ops.select("cross_entropy_32000_fwd_bwd")] == ["cross_entropy_32000_fwd_bwd_bf16"]
    assert [c.name for c in training_ops.select("rope_gqa_fwd_bwd_bf16,host")] == ["rope_gqa_fwd_bwd_bf16"]
    for spec in ("", "layer_norm", "training", "rms_norm,cross_entropy", "general"):
        assert training_ops.select(spec) == [], spec
    assert select("training_ops") == []  # nor do the fusion cases answer to the group's name


def test_byte_model():
    R, H = 16384, 4096
    # fwd: x, w -> y, rstd; bwd: dy, x, w, rstd -> dx, dw
    assert training_ops.BY_NAME["rms_norm_fwd_bwd_bf16"].bytes((R, H)) == 5 * R * H * 2 + 3 * H * 2 + 2 * R * 4
    # fwd: a, b -> c (3 tensors); bwd: dc, a, b -> da, db (5)
    assert training_ops.BY_NAME["swiglu_fwd_bwd_bf16"].bytes((R, H)) == (3 + 5) * R * H * 2
    ln, nobias = (training_ops.BY_NAME[n].bytes((R, H)) for n in ("layer_norm_fwd_bwd_bf16",
                                                                   "layer_norm_nobias_fwd_bwd_bf16"))
    assert ln - nobias == 2 * H * 2  # the bias read, its gradient written
    B, S, Hq, Hkv, D = 4, 2048, 32, 8, 128
    q, k = B * S * Hq * D * 2, B * S * Hkv * D * 2
    assert training_ops.BY_NAME["rope_gqa_fwd_bwd_bf16"].bytes((B, S, Hq, Hkv, D)) == 4 * (q + k) + 4 * S * D * 2


def test_cpu_timing_fills_the_group_columns(tmp_path):
    args = ["--dry-run", "--cpu-timing", "--no-compile", "--cases", "swiglu_fwd_bwd_bf16", "--out", str(tmp_path)]
    assert main(args) == 0
    (r,) = json.load(open(next(tmp_path.glob("*.json"))))["rows"]
    assert r["eager_ms"] > 0 and r["pyfuser_ms"] > 0 and r["pyfuser_pct_of_copy"] is not None
    assert r["speedup_vs_eager"] == round(r["eager_ms"] / r["pyfuser_ms"], 3)
    assert r["inductor_ms"] is None and r["liger_ms"] is None


def test_report_table_and_geomeans():
    base = {"group": "training_ops", "shape": "[2,3] bf16", "eager_ms": 4.0, "inductor_ms": 2.0, "pyfuser_ms": 1.0,
            "liger_ms": 1.5, "eager_pct_of_copy": 20.0, "inductor_pct_of_copy": 40.0, "pyfuser_pct_of_copy": 80.0,
            "liger_pct_of_copy": 53.3, "speedup_vs_inductor": 2.0, "speedup_vs_liger": 1.5, "check": "ok",
            "checks": {"liger": "ok out0 0.1"}}
    rows = [dict(base, case="a"),
            dict(base, case="b", liger_ms=None, liger_pct_of_copy=None, speedup_vs_liger=None, speedup_vs_inductor=0.5,
                 checks={"liger": "n/a (Liger has no masked softmax)"}),
            {"case": "s", "group": "suite", "speedup_vs_inductor": 3.0, "check": "ok", "regs": [], "spills": []}]
    table = report.markdown_table(rows)
    assert "| a | [2,3] bf16 | 4.000 | 2.000 | 1.000 | 1.500 | 20% | 40% | 80% | 53% | 2.00x | 1.50x | ok |" in table
    assert "| b | [2,3] bf16 | 4.000 | 2.000 | 1.000 | n/a | 20% | 40% | 80% | n/a | 0.50x | n/a | ok |" in table
    assert table.splitlines()[0].count("|") == len(report.COLUMNS) + 1  # the fusions' table first
    s = report.summary(rows)
    assert s["geomean_speedup_vs_inductor_training_ops"] == 1.0 and s["geomean_speedup_vs_liger_training_ops"] == 1.5
    assert s["geomean_speedup_vs_inductor_suite"] == 3.0 and s["geomean_speedup_vs_inductor_all"] == 3.0
    lines = report.summary_lines({}, rows)
    assert "geomean speedup vs torch.compile, training ops forward + backward (2 cases): 1.00x" in lines
    assert "geomean speedup vs Liger Kernel, training ops forward + backward (1 cases): 1.50x" in lines
    assert "geomean_speedup_vs_liger_training_ops" not in report.summary(rows[2:])
