"""Repro scripts: fd.repro_script(inputs) runs standalone; a kernel that fails to build
or run raises CompileError naming a written repro."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from pyfuser import CompileError, DataType, FusionDefinition
from pyfuser.codegen.emit import KernelSource
from pyfuser.runtime.repro import input_expr
from pyfuser.schedulers import Choices, pointwise

from .conftest import bert_fd, bert_inputs, device

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def run_script(path):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC))
    env.pop("PYFUSER_DUMP", None)
    return subprocess.run([sys.executable, path], capture_output=True, text=True, env=env, timeout=300)


def strided_fd():
    """Non-contiguous fp32 input, a bool input, an int64 input."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Float)
        m = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Bool)
        i = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        t = fd.ops.where(m, fd.ops.exp(x), fd.ops.cast(fd.ops.broadcast_in_dim(i, shape=[-1, -1], broadcast_dims=[1]),
                                                       dtype=DataType.Float))
        fd.add_output(t)
        fd.add_output(fd.ops.sum(t, dims=[1]))
    return fd


def strided_inputs():
    base = torch.randn(6, 10, device=device())
    x = base.t()[1:8:2]  # [4, 6], strides (2, 10): non-contiguous, storage offset 1
    return [x, torch.rand(4, 6, device=device()) > 0.5, torch.randint(-5, 5, (6,), device=device())]


def test_script_rebuilds_the_layouts():
    fd, inputs = strided_fd(), strided_inputs()
    text = fd.repro_script(inputs)
    assert "def nvfuser_fusion(fd : FusionDefinition) -> None :" in text
    assert "make_input(torch.float32, [4, 6], [2, 10], storage_offset=1),  # T0" in text
    assert "make_input(torch.bool, [4, 6]),  # T1" in text
    assert "make_input(torch.int64, [6]),  # T2" in text
    assert "fd.execute(inputs)" in text and "fd.validate(inputs)" in text
    compile(text, "repro", "exec")


def test_scalar_inputs_are_written_as_values():
    with FusionDefinition() as fd:
        s = fd.define_scalar(dtype=DataType.Double)
    assert input_expr(s, 0.25) == "0.25,  # S0, scalar input"


def test_script_runs_in_a_subprocess_and_passes(tmp_path):
    fd, inputs = strided_fd(), strided_inputs()
    path = tmp_path / "repro.py"
    path.write_text(fd.repro_script(inputs))
    r = run_script(str(path))
    assert r.returncode == 0, r.stderr
    assert "repro: fusion ran and matches the reference executor" in r.stdout


def test_report_fusion_script_runs(tmp_path):
    path = tmp_path / "bert.py"
    path.write_text(bert_fd().repro_script(bert_inputs()))
    r = run_script(str(path))
    assert r.returncode == 0, r.stderr


def test_choices_in_force_are_replayed():
    fd, inputs = strided_fd(), strided_inputs()
    with Choices(persistent=False, block_j=2):
        text = fd.repro_script(inputs)
    assert "with Choices(block_j=2, persistent=False):" in text


def _broken_emit(monkeypatch, old: str, new: str):
    original = pointwise.emit

    def emit(seg, params, name):
        src = original(seg, params, name)
        assert old in src.source
        return KernelSource(src.name, src.source.replace(old, new), src.args, src.constexprs, src.outputs, src.tile)

    monkeypatch.setattr(pointwise, "emit", emit)


def _pointwise_fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(x))
    return fd


@pytest.mark.parametrize("old, new, stage", [("@triton.jit", "@triton.jit\ndef (", "failed to load"),
                                             ("tl.store(", "tl.stroe(", "failed to compile or run")])
def test_injected_codegen_failure_writes_a_repro(monkeypatch, tmp_path, old, new, stage):
    monkeypatch.setenv("PYFUSER_REPRO_DIR", str(tmp_path))
    _broken_emit(monkeypatch, old, new)
    fd = _pointwise_fd()
    x = torch.randn(3, 5, device=device())
    with pytest.raises(CompileError) as info:
        fd.execute([x])
    err = info.value
    assert stage in str(err)
    assert err.repro_path and os.path.dirname(err.repro_path) == str(tmp_path)
    assert f"repro script written to {err.repro_path}" in str(err)
    assert err.__cause__ is not None and not isinstance(err.__cause__, CompileError)
    text = open(err.repro_path).read()
    assert "# It failed with:" in text and "make_input(torch.float32, [3, 5])" in text
    if stage == "failed to load":  # a fresh process has the real emit: the script passes there
        r = run_script(err.repro_path)
        assert r.returncode == 0, r.stderr


def test_a_scheduler_that_raises_while_emitting_is_a_compile_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PYFUSER_REPRO_DIR", str(tmp_path))

    def emit(seg, params, name):
        raise KeyError("lost a tensor")

    monkeypatch.setattr(pointwise, "emit", emit)
    with pytest.raises(CompileError, match=r"pointwise failed to generate kernel pyfuser_f\d+_k1 with "
                                           r"FlatParams\(.*KeyError: 'lost a tensor'") as info:
        _pointwise_fd().execute([torch.randn(2, 2, device=device())])
    assert isinstance(info.value.__cause__, KeyError)
    assert os.path.exists(info.value.repro_path)


def test_input_errors_are_not_wrapped(tmp_path, monkeypatch):
    from pyfuser import InputError

    monkeypatch.setenv("PYFUSER_REPRO_DIR", str(tmp_path))
    with pytest.raises(InputError):
        _pointwise_fd().execute([torch.randn(2, 2, 2, device=device())])
    assert not os.listdir(tmp_path)
