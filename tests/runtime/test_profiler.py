"""The profiler: execute(profile=True), fd.profile(), PYFUSER_PROF=print."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, Fusion, FusionDefinition, PyfuserError
from pyfuser.bench.seeds import build_bert_softmax_dropout
from pyfuser.runtime import profiler

from .conftest import BERT_SIZES, bert_fd, bert_inputs, device, gelu_fd, gelu_inputs


def test_profile_before_any_profiled_execute_says_what_to_do():
    fd = gelu_fd()
    fd.execute(gelu_inputs())
    with pytest.raises(PyfuserError, match=r"execute\(inputs, profile=True\)"):
        fd.profile()


def test_profile_fields_are_consistent_with_the_tensors(dumps):
    dumps("")
    fd, inputs = bert_fd(), bert_inputs()
    outs = fd.execute(inputs, profile=True)
    p = fd.profile()
    assert p is fd.last_profile and p.fusion_id == fd.id
    assert p.input_bytes == sum(x.nbytes for x in inputs)
    assert p.output_bytes == sum(o.nbytes for o in outs)
    (k,) = p.kernels
    assert k.name == f"pyfuser_f{fd.id}_k1" and k.number == 1 and k.scheduler == "inner_normalization"
    assert type(k.params).__name__ in ("InnerPersistent", "InnerChunked")
    assert (k.input_bytes, k.output_bytes) == (p.input_bytes, p.output_bytes)
    assert k.time_ms > 0 and p.time_ms == k.time_ms
    assert k.gbps == pytest.approx(k.bytes / (k.time_ms * 1e-3) / 1e9)
    assert p.gbps == pytest.approx(p.bytes / (p.time_ms * 1e-3) / 1e9)
    assert len(k.grid) >= 1 and all(isinstance(g, int) and g > 0 for g in k.grid)
    assert k.block_sizes and all(n.startswith("BLOCK") for n in k.block_sizes)
    assert k.compile_ms is not None and k.compile_ms > 0
    assert p.wall_ms >= p.time_ms
    if device() == "cpu":
        assert p.timing == "interpreter wall time"
        assert p.copy_gbps is None and p.pct_of_copy is None and k.pct_of_copy is None
        assert k.registers is None and k.spills is None and k.num_warps is None
    else:
        assert p.timing == "cuda events"
        assert p.copy_gbps > 0 and k.pct_of_copy == pytest.approx(100 * k.gbps / p.copy_gbps)
        assert k.registers > 0 and k.spills >= 0 and k.num_warps >= 1


def test_profile_of_a_cached_execute_keeps_the_compile_time():
    fd, inputs = gelu_fd(), gelu_inputs()
    fd.execute(inputs)
    fd.execute(inputs, profile=True)
    (k,) = fd.profile().kernels
    assert k.compile_ms > 0


def test_outputs_that_alias_inputs_move_no_bytes():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.reshape(x, [-1]))
        fd.add_output(x)
        fd.add_output(fd.ops.neg(x))
    x = torch.randn(3, 5, device=device())
    outs = fd.execute([x], profile=True)
    p = fd.profile()
    assert p.input_bytes == x.nbytes
    assert p.output_bytes == outs[2].nbytes


def test_table_says_what_the_times_are():
    fd, inputs = bert_fd(), bert_inputs()
    fd.execute(inputs, profile=True)
    text = str(fd.profile())
    lines = text.splitlines()
    assert lines[0].startswith(f"Fusion {fd.id} profile ({device()}; times: ")
    header = lines[2].split()
    for col in ("kernel", "scheduler", "GB/s", "spills"):
        assert col in header
    assert lines[3].split()[:2] == [f"pyfuser_f{fd.id}_k1", "inner_normalization"]
    if device() == "cpu":
        assert "wall time of Triton-interpreter launches on CPU (not GPU times)" in lines[0]


def test_prof_print_prints_the_table_every_execute(monkeypatch, capsys):
    monkeypatch.setenv("PYFUSER_PROF", "print")
    monkeypatch.delenv("PYFUSER_DUMP", raising=False)
    fd, inputs = gelu_fd(), gelu_inputs()
    for _ in range(2):
        fd.execute(inputs)
        out = capsys.readouterr().out
        assert out.startswith(f"Fusion {fd.id} profile (") and f"pyfuser_f{fd.id}_k1" in out
    assert fd.profile() is not None


def test_prof_rejects_unknown_values(monkeypatch):
    monkeypatch.setenv("PYFUSER_PROF", "yes")
    with pytest.raises(ValueError, match="PYFUSER_PROF: unknown value 'yes'; valid: print"):
        gelu_fd().execute(gelu_inputs())


def test_2022_fusion_forwards_profile():
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        build_bert_softmax_dropout(fd, *BERT_SIZES)
    fs.execute(bert_inputs(), profile=True)
    assert fs.profile().kernels[0].scheduler == "inner_normalization"


def test_copy_bandwidth_is_none_on_cpu():
    assert profiler.copy_bandwidth(torch.device("cpu")) is None


@pytest.mark.gpu
def test_copy_bandwidth_is_measured_once():
    dev = torch.device("cuda")
    first = profiler.copy_bandwidth(dev)
    assert first > 100 and profiler.copy_bandwidth(dev) == first


def test_general_path_is_profiled_host_segments_included():
    """Two reductions over different dims in one output: today no scheduler takes it,
    so it runs as a host segment next to a kernel (the general path)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        a = fd.ops.broadcast_in_dim(fd.ops.sum(x, dims=[0]), shape=[3, 4], broadcast_dims=[1])
        b = fd.ops.broadcast_in_dim(fd.ops.sum(x, dims=[1]), shape=[3, 4], broadcast_dims=[0])
        fd.add_output(fd.ops.add(a, b))
        fd.add_output(fd.ops.neg(x))
    x = torch.randn(3, 4, device=device())
    for _ in range(2):
        outs = fd.execute([x], profile=True)
        p = fd.profile()
        assert p.input_bytes == x.nbytes and p.output_bytes == sum(o.nbytes for o in outs)
        assert p.kernels and p.time_ms == pytest.approx(sum(k.time_ms for k in p.kernels))
        for k in p.kernels:
            assert (k.scheduler == "host") == k.name.startswith("host")
    fd.validate([x])
