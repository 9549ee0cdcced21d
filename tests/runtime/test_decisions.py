"""The store of answers kept for later processes (``runtime/decisions.py``) and its first
user, ptxas's register report (``spills.ptxas_usage``)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from pyfuser.runtime import ahead, decisions, spills, workers

from ..codegen.common import need_ptxas


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh cache directory for this test (and the processes it starts)."""
    monkeypatch.setenv("PYFUSER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYFUSER_DECISIONS", raising=False)
    return tmp_path / "cache" / "decisions"


def _files(where) -> list:
    return sorted(p for p in os.listdir(where) if p.endswith(".json")) if os.path.isdir(where) else []


def test_an_answer_kept_is_found_and_another_key_is_not(store):
    decisions.keep("k", {"a": [1, 2]}, [3, 4])
    assert decisions.lookup("k", {"a": [1, 2]}) == [3, 4]
    assert decisions.lookup("k", {"a": [1, 3]}) is None
    assert decisions.lookup("other", {"a": [1, 2]}) is None
    assert len(_files(store)) == 1


def test_a_new_version_of_pyfuser_triton_or_torch_misses(store, monkeypatch):
    decisions.keep("k", "key", 1)
    versions = decisions._versions()
    for package in versions:
        monkeypatch.setattr(decisions, "_versions", lambda p=package: dict(versions, **{p: "0.0.0-other"}))
        assert decisions.lookup("k", "key") is None, package
    monkeypatch.setattr(decisions, "_versions", lambda: versions)
    assert decisions.lookup("k", "key") == 1


@pytest.mark.parametrize("damage", ["truncated", "not json", "another key", "empty"])
def test_a_damaged_entry_is_a_miss_and_is_removed(store, damage):
    decisions.keep("k", "key", {"regs": 40})
    (name,) = _files(store)
    path = store / name
    data = path.read_bytes()
    path.write_bytes({"truncated": data[:len(data) // 2], "not json": b"\x00\xff garbage",
                      "another key": data.replace(b'"key"', b'"kez"'), "empty": b""}[damage])
    assert decisions.lookup("k", "key") is None
    assert not path.exists()
    decisions.keep("k", "key", {"regs": 40})  # and the next answer is kept again
    assert decisions.lookup("k", "key") == {"regs": 40}


def test_the_store_keeps_the_most_recently_used_within_its_bound(store, monkeypatch):
    monkeypatch.setenv("PYFUSER_DECISIONS", "3")
    for i in range(3):
        decisions.keep("k", i, i)
    names = {i: decisions._entry("k", i)[0] for i in range(3)}
    for age, i in enumerate((1, 2, 0)):  # 0 used last
        os.utime(store / names[i], ns=(age * 10**9, age * 10**9))
    decisions.keep("k", 3, 3)
    assert len(_files(store)) == 3
    assert decisions.lookup("k", 1) is None  # the least recently used went
    assert [decisions.lookup("k", i) for i in (0, 2, 3)] == [0, 2, 3]


def test_off_keeps_and_reads_nothing(store, monkeypatch):
    decisions.keep("k", "key", 1)
    monkeypatch.setenv("PYFUSER_DECISIONS", "0")
    assert decisions.lookup("k", "key") is None
    decisions.keep("k", "other", 2)
    assert len(_files(store)) == 1


_WRITER = """
import sys
from pyfuser.runtime import decisions
me = int(sys.argv[1])
for i in range(40):
    decisions.keep("k", i % 10, {"i": i % 10, "padding": "x" * 2000})  # the same keys from every writer
    decisions.keep("mine", [me, i], me)
"""


def test_concurrent_writers_leave_only_whole_entries_within_the_bound(store, monkeypatch):
    monkeypatch.setenv("PYFUSER_DECISIONS", "30")
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(w)], env=dict(os.environ)) for w in range(4)]
    assert [w.wait(timeout=300) for w in writers] == [0] * 4
    left = _files(store)
    assert 0 < len(left) <= 30 + 4  # each writer prunes after its own write; a prune may race one
    for name in left:
        entry = json.loads((store / name).read_bytes())  # whole files only
        assert decisions.lookup(entry["kind"], entry["key"]) == entry["value"]
    assert not [p for p in os.listdir(store) if not p.endswith(".json")]  # no temp files left behind
    for i in range(10):
        assert decisions.lookup("k", i) in (None, {"i": i, "padding": "x" * 2000})


def test_a_workers_ptxas_report_is_found_by_this_process_without_ptxas(store, tmp_path, monkeypatch):
    """The compile worker reports every candidate it checks; the process that then loads
    the kernel asks for the same report and gets it from the store."""
    need_ptxas()
    from pyfuser.compat import compile_offline
    from pyfuser.runtime.cache import load_kernel

    from .test_compile_ahead import _softmax

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    fd = _softmax()
    job = ahead.plan_ahead(fd, [torch.empty(64, 4096, dtype=torch.float16, device="meta")], "cuda:0")[0]
    name, source, specs, kw, _ = job[0]
    starved = (name, source, specs, kw, 1)  # rejected by its budget: the worker's walk reports it
    p = workers.Pool(1, workers.worker_env({"PYFUSER_CACHE_DIR": str(store.parent),
                                            "TRITON_CACHE_DIR": str(tmp_path / "triton")}))
    try:
        assert p.submit("pyfuser.runtime.ahead.compile_step", 90, (starved, job[0])).result(timeout=300) == 2
    finally:
        p.close()
    assert _files(store)
    ck = compile_offline(load_kernel(name, source, "cuda"), [ahead.meta_arg(s) for s in specs], kw, 90)

    def no_ptxas(*args, **kwargs):
        raise AssertionError("ptxas ran again")

    monkeypatch.setattr(spills.subprocess, "run", no_ptxas)
    usage = spills.ptxas_usage(ck)
    assert usage.regs > 0 and usage.spills == 0
    monkeypatch.setenv("PYFUSER_DECISIONS", "0")  # off: ptxas runs
    with pytest.raises(AssertionError, match="ptxas ran again"):
        spills.ptxas_usage(ck)


def test_a_store_directory_not_to_be_trusted_is_neither_read_nor_written(store, tmp_path):
    """A ``decisions`` that is a link elsewhere (``cache.private_dir`` refuses it): the
    answers are worked out again, nothing is written there, nothing raises."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, store)
    decisions.keep("k", "key", 1)
    assert decisions.lookup("k", "key") is None
    assert os.listdir(elsewhere) == []
