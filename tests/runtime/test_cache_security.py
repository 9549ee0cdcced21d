"""The kernel cache directory is private and nothing found in it runs: a planted
kernel file is never executed, a directory someone else owns or may write is refused
(the default one replaced by a fresh private one), and processes writing the same
kernels at once all get correct results."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections import OrderedDict

import pytest
import torch

from pyfuser import CacheDirError, DataType, FusionDefinition
from pyfuser.runtime import cache, repro

from .conftest import device

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def scaled_fd(k: float, id=None) -> FusionDefinition:
    with FusionDefinition(id=id) as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.mul(x, fd.define_scalar(k)), fd.define_scalar(1.0)))
    return fd


def kernel_files(d):
    return sorted(n for n in os.listdir(d) if n.startswith("pyfuser_kernel_") and n.endswith(".py"))


def run_once(k: float, n: int = 11, id=None):
    x = torch.randn(n, device=device())
    (out,) = scaled_fd(k, id).execute([x])
    torch.testing.assert_close(out, x * k + 1)


@pytest.fixture
def fresh_modules(monkeypatch):
    """As in a new process: no kernel module imported yet."""
    monkeypatch.setattr(cache, "_modules", OrderedDict())


def test_new_directories_are_private(tmp_path, monkeypatch):
    d = tmp_path / "a" / "kernels"
    monkeypatch.setenv("PYFUSER_CACHE_DIR", str(d))
    monkeypatch.delenv("PYFUSER_REPRO_DIR", raising=False)
    run_once(1.5)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(repro.repro_dir()).st_mode) == 0o700
    for name in kernel_files(d):
        assert stat.S_IMODE(os.stat(d / name).st_mode) & 0o022 == 0


def test_a_planted_kernel_file_never_runs(tmp_path, monkeypatch, fresh_modules):
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("PYFUSER_CACHE_DIR", str(first))
    run_once(2.5, id=777)  # the same id: the same kernel source, as in the next process
    (name,) = kernel_files(first)
    generated = (first / name).read_bytes()
    marker = tmp_path / "pwned"
    second.mkdir(mode=0o700)
    (second / name).write_bytes(f"open({str(marker)!r}, 'w').close()\n".encode() + generated)
    monkeypatch.setenv("PYFUSER_CACHE_DIR", str(second))
    cache._modules.clear()
    run_once(2.5, id=777)
    assert not marker.exists()
    assert (second / name).read_bytes() == generated  # replaced by the generated text
    # the planted line is not what inspect or a traceback would show either
    (mod,) = cache._modules.values()
    import inspect

    assert "pwned" not in inspect.getsource(mod)


@pytest.mark.parametrize("problem", ["foreign", "world_writable", "group_writable", "symlink", "file"])
def test_an_unsafe_named_directory_is_refused(tmp_path, monkeypatch, fresh_modules, problem):
    d = tmp_path / "kernels"
    if problem == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        d.symlink_to(tmp_path / "elsewhere")
    elif problem == "file":
        d.write_text("")
    else:
        d.mkdir(mode=0o700)
    if problem == "world_writable":
        os.chmod(d, 0o777)
    if problem == "group_writable":
        os.chmod(d, 0o770)
    if problem == "foreign":  # as seen by a user who is not the owner
        real = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real + 1)
    monkeypatch.setenv("PYFUSER_CACHE_DIR", str(d))
    expected = {"foreign": "is owned by uid", "world_writable": "is writable by others", "group_writable":
                "is writable by others", "symlink": "is a symbolic link", "file": "exists and is not a directory"}[problem]
    with pytest.raises(CacheDirError, match=f"PYFUSER_CACHE_DIR {d} {expected}"):
        run_once(3.5)


def test_an_unsafe_repro_directory_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "repro"
    d.mkdir()
    os.chmod(d, 0o777)
    monkeypatch.setenv("PYFUSER_REPRO_DIR", str(d))
    with pytest.raises(CacheDirError, match="writable by others"):
        repro.repro_dir()


def test_an_unsafe_default_directory_is_replaced(tmp_path, monkeypatch, fresh_modules):
    taken = tmp_path / "pyfuser-taken"
    taken.mkdir()
    os.chmod(taken, 0o777)  # someone made the predictable name first
    monkeypatch.delenv("PYFUSER_CACHE_DIR", raising=False)
    monkeypatch.setattr(cache, "_default_dir", lambda: str(taken))
    monkeypatch.setattr(cache, "_fallback_dirs", {})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.warns(UserWarning, match="is writable by others .*; using a fresh private directory"):
        run_once(4.5)
    assert kernel_files(taken) == []
    (own,) = cache._fallback_dirs.values()
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o700 and len(kernel_files(own)) == 1
    run_once(5.5)  # the same fresh directory from then on
    assert len(kernel_files(own)) == 2


WORKER = textwrap.dedent("""
    import sys, torch
    from pyfuser import DataType, FusionDefinition
    for k in range(8):
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
            fd.add_output(fd.ops.add(fd.ops.mul(x, fd.define_scalar(k + 0.75)), fd.define_scalar(1.0)))
        x = torch.randn(13)
        (out,) = fd.execute([x])
        torch.testing.assert_close(out, x * (k + 0.75) + 1)
    print("ok")
""")


def test_processes_writing_the_same_kernels(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC), PYFUSER_CACHE_DIR=str(tmp_path / "shared"),
               PYFUSER_CACHE_FILES="5")  # pruning races with the writes too
    env.pop("PYFUSER_DUMP", None)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    assert len(kernel_files(tmp_path / "shared")) == 5
    assert not [n for n in os.listdir(tmp_path / "shared") if n.endswith(".tmp")]
