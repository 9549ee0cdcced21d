"""The BERT benchmark's plumbing, on CPU with a tiny BERT (the GPU run is the lead's)."""
import subprocess
import sys

import pytest

from pyfuser.dynamo import bert_bench

TINY = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=300,
            max_position_embeddings=32)


def test_imports_without_transformers():
    code = "import sys, pyfuser.dynamo.bert_bench; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_run_bert_benchmark_on_cpu():
    pytest.importorskip("transformers")
    results = bert_bench.run_bert_benchmark(2, 8, steps=2, device="cpu", dropout=True, warmup=1,
                                            implementations=("eager", "pyfuser"), config_overrides=TINY)
    eager, ours = results["eager"], results["pyfuser"]
    assert len(eager["losses"]) == len(ours["losses"]) == 2
    assert abs(eager["losses"][0] - ours["losses"][0]) < 0.2  # same weights and data; masks differ
    assert ours["fusions"] > 0 and ours["pyfuser_launches_per_step"] > 0 and ours["fallbacks"] == 0
    assert eager["fusions"] == 0 and eager["pyfuser_launches_per_step"] == 0
    table = bert_bench.markdown_table(2, 8, results)
    assert "| pyfuser |" in table and "| eager |" in table
