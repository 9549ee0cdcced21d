"""The backend's settings: ``torch.compile(..., options={...})``, the errors for an
unknown option or a misspelt dump name, compile progress, the accuracy summary and
the program ``explain`` shows."""
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
import torch

import pyfuser.dynamo as pd
from pyfuser import SettingError
from pyfuser.dynamo.report import accuracy, logs


def softmax_sum(x, y):
    return torch.softmax(x * 2 + y, -1).sum(-1)


def inputs():
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(4, 8)


def test_options_apply_to_their_model_only(capsys, monkeypatch):
    monkeypatch.delenv("PYFUSER_DUMP", raising=False)
    x, y = inputs()
    dumped = torch.compile(softmax_sum, backend="pyfuser", options={"dump": "cache"})
    torch.testing.assert_close(dumped(x, y), softmax_sum(x, y))
    out = capsys.readouterr().out
    assert "pyfuser.dynamo: inference" in out and re.search(r"cache fusion\d+: miss", out)

    def other(x, y):
        return torch.softmax(x - y, -1).sum(-1)

    torch.testing.assert_close(torch.compile(other, backend="pyfuser")(x, y), other(x, y))
    assert capsys.readouterr().out == ""
    dumped(x, y)  # the option stays with its model's later calls
    assert re.search(r"cache fusion\d+: hit", capsys.readouterr().out)


def test_the_check_option_checks_that_model():
    x, y = inputs()
    accuracy.reset_summary()
    got = torch.compile(softmax_sum, backend="pyfuser", options={"check": "1"})(x, y)
    torch.testing.assert_close(got, softmax_sum(x, y))
    s = pd.check_summary()
    assert pd.stats()["checked_region_calls"] == 1 and s.calls == 2  # the region and the graph
    assert len(s.regions) == 1 and len(s.graphs) == 1
    assert 0.0 <= s.share < 1.0 and s.where.startswith("region ")
    assert "every output within tolerance; largest difference" in str(s)


def _compile_error(options):
    x, y = inputs()
    with pytest.raises(Exception) as info:
        torch.compile(softmax_sum, backend="pyfuser", options=options)(x, y)
    err = info.value
    while not isinstance(err, SettingError) and err.__cause__ is not None:
        err = err.__cause__
    return getattr(info.value, "inner_exception", err), str(info.value)


@pytest.mark.parametrize("options, message", [
    ({"cuda_graph": False}, r"unknown option 'cuda_graph'; options: dump, prof, check, cuda_graphs"),
    ({"cache_dir": "/tmp/x"}, r"'cache_dir' is a process-wide setting: set PYFUSER_CACHE_DIR"),
    ({"dump": "kernel_tme"}, r"dump \(PYFUSER_DUMP\): unknown option\(s\) kernel_tme; valid options:"),
    ({"check": "perhaps"}, r"check \(PYFUSER_CHECK\): expected 1 or 0"),
])
def test_a_bad_option_is_an_error_at_compile_time(options, message):
    err, text = _compile_error(options)
    assert isinstance(err, SettingError), text
    assert re.search(message, str(err)), str(err)


def test_a_misspelt_dump_in_the_environment_fails_the_compile(monkeypatch):
    monkeypatch.setenv("PYFUSER_DUMP", "kernel_tme")
    err, text = _compile_error(None)
    assert isinstance(err, SettingError) and "PYFUSER_DUMP: unknown option(s) kernel_tme" in str(err), text
    assert pd.stats().get("regions", 0) == 0  # nothing ran unfused behind the user's back


def test_the_log_option_logs_the_program(capfd):
    x, y = inputs()
    torch.compile(softmax_sum, backend="pyfuser", options={"log": "debug"})(x, y)
    err = capfd.readouterr().err
    assert "1 regions" in err and "def nvfuser_fusion(fd : FusionDefinition)" in err
    torch.compile(lambda a, b: (a * b).exp().sum(-1), backend="pyfuser")(x, y)
    assert "regions" not in capfd.readouterr().err  # the other model logs nothing


def test_a_long_compile_says_so(capfd, monkeypatch):
    monkeypatch.setattr(logs, "HEARTBEAT_S", 0.05)
    monkeypatch.setenv("PYFUSER_PROGRESS", "0.01")
    with logs.progress("compiling a test graph"):
        time.sleep(0.2)
    err = capfd.readouterr().err
    assert "pyfuser: still compiling a test graph after 0 s:" in err and "PYFUSER_PROGRESS=0" in err
    monkeypatch.setenv("PYFUSER_PROGRESS", "0")
    with logs.progress("compiling quietly"):
        time.sleep(0.1)
    assert "still" not in capfd.readouterr().err


def test_explain_shows_each_regions_definition_and_kernels():
    x, y = inputs()
    e = pd.explain(softmax_sum, x, y)
    (name, texts), = e.definitions().items()
    assert texts and texts[0].startswith("def nvfuser_fusion(fd : FusionDefinition) -> None :")
    assert "fd.ops.exp(" in texts[0]
    kernels = e.kernels(name)[name]
    assert kernels and all("@triton.jit" in k.source for k in kernels)
    program = e.program()
    assert f"# region {name}" in program and texts[0].strip() in program and kernels[0].source.strip() in program
    with pytest.raises(KeyError, match="no region 'nope'"):
        e.program("nope")


def test_the_accuracy_mode_says_at_exit_what_it_checked(tmp_path):
    code = ("import torch, pyfuser.dynamo\n"
            "f = torch.compile(lambda x: torch.softmax(x * 2, -1), backend='pyfuser')\n"
            "f(torch.randn(4, 8))\n")
    env = dict(os.environ, PYFUSER_CHECK="1", PYFUSER_CACHE_DIR=str(tmp_path),
               PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2] / "src"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr
    assert re.search(r"pyfuser accuracy check: 1 regions and 1 graphs checked over 2 calls .*every output within "
                     r"tolerance; largest difference", out.stderr), out.stderr[-2000:]
