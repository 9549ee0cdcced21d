"""python -m pyfuser.bench writes only where --out and --docs say: run from any
directory (an installed package has no source tree), it never touches docs/ or
benchmarks/ there, and its --help speaks to users."""
import json
import os

from pyfuser.bench.__main__ import default_out, main, parse


def _tree(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, files in os.walk(path) for f in files)


def test_a_run_without_flags_writes_nothing_in_the_current_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["--dry-run", "--cases", "host"]) == 0
    assert _tree(tmp_path) == []
    out = tmp_path / "run"
    assert main(["--dry-run", "--cases", "host", "--out", str(out)]) == 0
    saved, = out.glob("*.json")
    capsys.readouterr()
    assert main(["--from-json", str(saved)]) == 0  # the table only
    assert "host_overhead_pointwise" in capsys.readouterr().out
    assert _tree(tmp_path) == [f"run/{saved.name}"]
    docs, copy = tmp_path / "notes" / "BENCH.md", tmp_path / "copy"
    os.makedirs(docs.parent)
    assert main(["--from-json", str(saved), "--out", str(copy), "--docs", str(docs)]) == 0
    assert json.load(open(copy / saved.name))["rows"] and "<!-- bench-run:" in docs.read_text()
    assert not (tmp_path / "docs").exists() and not (tmp_path / "benchmarks").exists()


def test_the_default_folder_is_new_and_named_for_the_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    header = {"date": "2026-12-07", "gpu": "NVIDIA H200"}
    first = default_out(header)
    assert os.path.dirname(first) == str(tmp_path) and os.path.basename(first).startswith("pyfuser-bench-2026-12-07-")
    os.makedirs(first)
    assert default_out(header) == first + "-2"


def test_help_speaks_to_users(capsys):
    try:
        parse(["--help"])
    except SystemExit:
        pass
    text = capsys.readouterr().out
    assert "--out" in text and "--docs" in text and "pyfuser-bench-<date>-<gpu>" in text
    assert "PYTHONPATH" not in text and "PYFUSER_COMMIT" not in text and "lent" not in text
