"""The BERT benchmark's plumbing, on CPU with a tiny BERT (the GPU run is the lead's)."""
import ast
import inspect

import pytest

from pyfuser.bench import bert_bench

TINY = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=300,
            max_position_embeddings=32)


def test_transformers_is_imported_lazily():
    tree = ast.parse(inspect.getsource(bert_bench))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top for a in n.names] + [n.module for n in top if isinstance(n, ast.ImportFrom)]
    assert not any(name and name.startswith("transformers") for name in names)


def test_run_bert_benchmark_on_cpu():
    pytest.importorskip("transformers")
    results = bert_bench.run_bert_benchmark(2, 8, steps=1, device="cpu", dropout=True, warmup=1,
                                            implementations=("eager", "pyfuser"), config_overrides=TINY)
    eager, ours = results["eager"], results["pyfuser"]
    assert len(eager["losses"]) == len(ours["losses"]) == 1
    assert abs(eager["losses"][0] - ours["losses"][0]) < 0.2  # same weights and data; masks differ
    assert ours["fusions"] > 0 and ours["pyfuser_launches_per_step"] > 0 and ours["fallbacks"] == 0
    assert eager["fusions"] == 0 and eager["pyfuser_launches_per_step"] == 0
    table = bert_bench.markdown_table(2, 8, results)
    assert "| pyfuser |" in table and "| eager |" in table


def test_turns_keep_each_implementation_s_random_stream():
    """Timed steps take turns between implementations; each keeps its own random state,
    so eager's dropout masks (and losses) are those of eager run alone."""
    pytest.importorskip("transformers")
    run = lambda impls: bert_bench.run_bert_benchmark(2, 8, steps=2, device="cpu", dropout=True, warmup=1,  # noqa: E731
                                                      implementations=impls, config_overrides=TINY)
    alone, together = run(("eager",)), run(("eager", "pyfuser"))
    assert together["eager"]["losses"] == alone["eager"]["losses"]
    assert len(together["pyfuser"]["host_ms"]) == 2 and together["pyfuser"]["fusions"] > 0
    assert together["eager"]["fusions"] == 0 and together["eager"]["region_calls_per_step"] == 0


def test_each_pyfuser_implementation_counts_its_own_fusions():
    """The uncaptured backend runs after pyfuser's and reuses nothing it reports: its
    fusions are counted, not taken from pyfuser's translation cache as 0."""
    pytest.importorskip("transformers")
    results = bert_bench.run_bert_benchmark(2, 8, steps=1, device="cpu", dropout=True, warmup=1,
                                            implementations=("pyfuser", bert_bench.UNCAPTURED),
                                            config_overrides=TINY)
    ours, uncaptured = results["pyfuser"], results[bert_bench.UNCAPTURED]
    assert ours["fusions"] > 0 and uncaptured["fusions"] == ours["fusions"]


def test_kernel_class_separates_matmuls_from_fused_work():
    assert bert_bench.kernel_class("sm90_xmma_gemm_f16f16_f32f16_tn_n_tilesize128x128x64") == "matmul"
    assert bert_bench.kernel_class("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT") == "matmul"
    assert bert_bench.kernel_class("cutlass::Kernel2<cutlass_80_wmma_tensorop_h161616gemm>") == "matmul"
    assert bert_bench.kernel_class("Memset (Device)") == "copy"
    assert bert_bench.kernel_class("pyfuser_f3_k1") == "other"
    assert bert_bench.kernel_class("triton_per_fused__softmax_native_dropout_0") == "other"


def test_kernel_traffic_counts_each_argument_once():
    """A broadcast input counts its distinct elements; the profiler's pyfuser rows get
    MB and GB/s, ATen rows none."""
    import torch

    from pyfuser import DataType, FusionDefinition

    x = torch.randn(64, 32)
    b = torch.randn(32).expand(64, 32)
    assert bert_bench.tensor_bytes(b) == 32 * 4 and bert_bench.tensor_bytes(x) == 64 * 32 * 4
    with FusionDefinition() as fd:
        tx, tb = fd.define_tensor(shape=[-1, -1]), fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.cast(fd.ops.add(tx, fd.ops.broadcast_in_dim(tb, shape=[64, 32], broadcast_dims=[1])),
                                  DataType.Half))
    fd.execute([x, b[0]])
    traffic = bert_bench.kernel_traffic(lambda: fd.execute([x, b[0]]))
    [(name, nbytes)] = traffic.items()
    assert name.startswith("pyfuser_f") and nbytes == 64 * 32 * 4 + 32 * 4 + 64 * 32 * 2
    rows = bert_bench.pyfuser_kernel_rows([{"name": name, "calls": 1, "ms": 0.001}, {"name": "aten", "calls": 1,
                                                                                      "ms": 1.0}], traffic)
    assert rows == [{"name": name, "calls": 1, "ms": 0.001, "mb": nbytes / 1e6, "gbps": nbytes / 1e3}]


def test_paired_speedup_is_the_median_of_the_turns_ratios():
    speedup, faster = bert_bench.paired_speedup([10.0, 20.0, 30.0], [12.0, 18.0, 36.0])
    assert speedup == pytest.approx(1.2) and faster == 2


def test_bench_model_bert_runs_the_bert_benchmark(tmp_path, capsys):
    """``python -m pyfuser.bench --model bert``: the issue's command line, here with a
    tiny BERT on CPU."""
    import json

    pytest.importorskip("transformers")
    from pyfuser.bench.__main__ import main

    out = tmp_path / "bert.json"
    assert main(["--model", "bert", "--device", "cpu", "--tiny", "--configs", "2x8", "--steps", "2", "--warmup", "1",
                 "--impl", "eager,pyfuser", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "batch 2 x seq 8" in text and "| pyfuser |" in text and "| eager |" in text
    ours = json.loads(out.read_text())["2x8"]["pyfuser"]
    assert len(ours["losses"]) == 2 and ours["fusions"] > 0 and ours["fallbacks"] == 0
