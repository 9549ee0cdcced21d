"""The model-zoo benchmark's logic on CPU at the zoo's tiny sizes (no timing claims)."""
import pytest

from pyfuser.bench import zoo_bench

pytest.importorskip("transformers")


def test_run_model_counts_and_losses_on_cpu(monkeypatch, capsys):
    monkeypatch.setattr(zoo_bench, "SLOW_STEP_S", 0.0)  # every step reports itself
    res = zoo_bench.run_model("gpt2", steps=2, warmup=1, device="cpu", tiny=True,
                              implementations=("eager", "pyfuser"))
    out = capsys.readouterr().out
    assert "[zoo] gpt2 pyfuser, warmup step 1:" in out and "[zoo] gpt2 eager, timed step 3:" in out
    assert "pyfuser kernel(s) compiled" in out
    eager, fused = res["eager"], res["pyfuser"]
    assert len(eager["losses"]) == len(fused["losses"]) == 2
    assert fused["counts"]["warmup_fusions"] > 0 and fused["counts"]["warmup_graphs"] > 0
    assert fused["counts"].get("timed_graphs", 0) == 0  # a fixed shape: no recompile
    assert zoo_bench.loss_gap(res, "pyfuser") < 1e-2
    rows = zoo_bench.markdown_rows("gpt2", res)
    assert len(rows) == 2 and all(r.count("|") == zoo_bench.HEADER[0].count("|") for r in rows)


def test_varlen_lengths_cover_every_value():
    lengths = zoo_bench.varlen_lengths(1024, 23, 20, seed=0)
    assert len(lengths) == 23 and len(set(lengths)) == 20
    assert min(lengths) == 512 and max(lengths) <= 1024 and all(n % 8 == 0 for n in lengths)
    assert zoo_bench.varlen_lengths(8, 5, 5, seed=1) == zoo_bench.varlen_lengths(8, 5, 5, seed=1)


def test_unknown_model_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        zoo_bench.main(["--models", "resnet"])
    assert e.value.code == 2 and "resnet" in capsys.readouterr().err


def test_variable_steps_are_split_by_whether_their_length_was_met_before():
    # warm-up 64; then 65 (new), 64 (settling), 66 (new), 65, 64 (settling), 64 (seen), 65 (settling), 65 (seen)
    split = zoo_bench.split_by_novelty([10.0, 1.0, 30.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                                       [64, 65, 64, 66, 65, 64, 64, 65, 65], warmup=1)
    assert split == {"median_new_ms": 20.0, "median_settling_ms": 2.5, "median_seen_ms": 5.0,
                     "new_steps": 2, "settling_steps": 4, "seen_steps": 2}
    assert zoo_bench.split_by_novelty([5.0], [8, 9], warmup=1)["median_seen_ms"] is None


def test_varlen_rows_match_the_header():
    var = {"median_new_ms": 3.0, "median_settling_ms": 2.5, "median_seen_ms": 2.0, "new_steps": 2,
           "settling_steps": 1, "seen_steps": 2, "memory_reserved_gb": 1.25,
           "counts": {"warmup_kernels_compiled": 4, "timed_kernels_compiled": 1}}
    v = {"lengths": [4, 5, 6, 5, 6], "variable": {"pyfuser": var},
         "fixed": {"pyfuser": {"median_ms": 1.0, "counts": {"warmup_kernels_compiled": 4}}}}
    (row,) = zoo_bench.varlen_rows("bert", v)
    assert row.count("|") == zoo_bench.VARLEN_HEADER[0].count("|")
    assert "| 3.00 (2) | 2.50 (1) | 2.00 (2) | 1.00 | 2.000 |" in row and "| 1.25 |" in row
