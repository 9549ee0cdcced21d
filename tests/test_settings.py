"""One table of settings (``pyfuser.settings``), ``pyfuser.config``, ``python -m pyfuser``
and the warning when kernels run under the interpreter."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import warnings

import pytest
import torch

import pyfuser
from pyfuser import DataType, FusionDefinition, InterpreterWarning, SettingError, config
from pyfuser.runtime import dump, interpreter, profiler
from pyfuser.settings import SETTINGS, document

ROOT = pathlib.Path(__file__).resolve().parents[1]
TYPO = "PYFUSER_" + "PREPARD_SIZES"  # a misspelt variable (spelt in two parts: no file names it whole)


def test_the_settings_page_is_current():
    page = (ROOT / "docs" / "SETTINGS.md").read_text()
    assert page == document(), "docs/SETTINGS.md is stale: python -m pyfuser.settings docs/SETTINGS.md"


def _mentioned_variables() -> set:
    found = set()
    files = [ROOT / "Makefile", ROOT / "README.md"] + list((ROOT / "docs").glob("*.md"))
    for folder in ("src", "tests", "benchmarks", "scripts"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md")]
    for path in files:
        found.update(re.findall(r"\bPYFUSER_[A-Z][A-Z_]*[A-Z]\b", path.read_text(errors="replace")))
    return found


def test_every_variable_the_project_names_is_in_the_table():
    known = {s.env for s in SETTINGS}
    assert _mentioned_variables() - known == set()
    assert len({s.name for s in SETTINGS}) == len(SETTINGS) == len(known)


def test_config_reads_the_environment_and_names_a_bad_value(monkeypatch):
    monkeypatch.setenv("PYFUSER_DUMP", "cache, kernel_code")
    monkeypatch.setenv("PYFUSER_CACHE_FILES", "12")
    monkeypatch.setenv("PYFUSER_CUDA_GRAPHS", "off")
    assert config.dump == frozenset({"cache", "kernel_code"})
    assert (config.cache_files, config.cuda_graphs) == (12, False)
    assert config.source("cache_files") == "environment" and config.source("check") == "default"
    monkeypatch.setenv("PYFUSER_DUMP", "kernel_tme")
    with pytest.raises(SettingError, match="PYFUSER_DUMP: unknown option.s. kernel_tme; valid options: .*kernel_time"):
        config.dump
    monkeypatch.setenv("PYFUSER_CHECK", "maybe")
    with pytest.raises(SettingError, match="PYFUSER_CHECK: expected 1 or 0 .*got 'maybe'"):
        config.check
    with pytest.raises(AttributeError, match="no setting 'dumps'; settings: dump, prof"):
        config.dumps


def test_overrides_come_before_the_environment(monkeypatch):
    monkeypatch.setenv("PYFUSER_PROF", "print")
    monkeypatch.delenv("PYFUSER_DUMP", raising=False)
    config.prof = ""
    try:
        assert config.prof == "" and not profiler.printing() and config.source("prof") == "override"
        with config.patch(dump="cache", prof="print"):
            assert dump.enabled_dumps() == frozenset({"cache"}) and profiler.printing()
            with config.patch(dump=["kernel_code"]):
                assert config.dump == frozenset({"kernel_code"})
            assert config.dump == frozenset({"cache"})
        assert config.prof == "" and dump.enabled_dumps() == frozenset()
    finally:
        del config.prof
    assert config.prof == "print" and profiler.printing()
    with pytest.raises(SettingError, match=r"pyfuser.config: cache_files \(PYFUSER_CACHE_FILES\): expected a "
                                           r"positive integer, got -3"):
        config.cache_files = -3
    with pytest.raises(SettingError, match="unknown setting 'nope'"):
        with config.patch(nope=1):
            pass


def test_python_m_pyfuser_reports_what_a_bug_report_needs(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "PYFUSER_CACHE_DIR": str(tmp_path / "c"),
           "PYFUSER_DUMP": "cache", TYPO: "3", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "pyfuser"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"pyfuser {pyfuser.__version__}" in text
    assert f"torch {torch.__version__}" in text and "triton " in text and "numpy " in text
    assert "device:" in text and "interpreter (CPU tensors):" in text
    for s in SETTINGS:
        if s.scope == "user":
            assert s.env in text, s.env
    assert re.search(r"PYFUSER_DUMP\s+dump\s+= cache  \(environment\)", text)
    assert f"{TYPO}: set, but no setting reads it" in text
    assert f"kernel cache: {tmp_path / 'c'}" in text


def _fusion():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.exp(t), t))
    return fd


def test_cpu_kernels_warn_once_at_the_callers_line(monkeypatch):
    monkeypatch.setattr(interpreter, "_warned_cpu", [False])
    x = torch.randn(16)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _fusion().execute([x])
        _fusion().execute([x * 2])
    mine = [w for w in seen if issubclass(w.category, InterpreterWarning)]
    assert len(mine) == 1
    assert "CPU tensors under Triton's interpreter" in str(mine[0].message)
    assert mine[0].filename == __file__  # the user's line, not pyfuser's
