"""``runtime.toolchain``: pyfuser compiles with Triton's ptxas even where torch's
Inductor pointed ``TRITON_PTXAS_PATH`` at torch's own; a user's other choice stays."""
from __future__ import annotations

import os

import torch

from pyfuser.runtime import executor, toolchain

from ..codegen.common import fusion, gen_for, make_tensor


def _torch_ptxas():
    return os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas")


def test_torch_ptxas_is_set_aside_while_compiling_and_restored(monkeypatch):
    monkeypatch.setenv("TRITON_PTXAS_PATH", _torch_ptxas())
    seen = []
    real = executor._execute_slow

    def spy(*a, **kw):
        seen.append(os.environ.get("TRITON_PTXAS_PATH"))
        return real(*a, **kw)

    monkeypatch.setattr(executor, "_execute_slow", spy)
    x = make_tensor((4, 8), torch.float32, gen_for("toolchain"))
    fd = fusion(lambda fd: fd.add_output(fd.ops.exp(fd.define_tensor(shape=[-1, -1], contiguity=[True, True]))))
    out, = fd.execute([x])
    torch.testing.assert_close(out, torch.exp(x))
    assert seen == [None]  # planned and compiled without it
    assert os.environ["TRITON_PTXAS_PATH"] == _torch_ptxas()  # and given back


def test_another_ptxas_is_kept(monkeypatch):
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/opt/my-cuda/bin/ptxas")
    with toolchain.triton_ptxas():
        assert os.environ["TRITON_PTXAS_PATH"] == "/opt/my-cuda/bin/ptxas"
    monkeypatch.delenv("TRITON_PTXAS_PATH")
    with toolchain.triton_ptxas():
        assert "TRITON_PTXAS_PATH" not in os.environ
    assert "TRITON_PTXAS_PATH" not in os.environ


def test_restored_when_compiling_fails(monkeypatch):
    monkeypatch.setenv("TRITON_PTXAS_PATH", _torch_ptxas())
    try:
        with toolchain.triton_ptxas():
            assert "TRITON_PTXAS_PATH" not in os.environ
            raise RuntimeError("a kernel failed to compile")
    except RuntimeError:
        pass
    assert os.environ["TRITON_PTXAS_PATH"] == _torch_ptxas()


def test_threads_share_one_setting_aside(monkeypatch):
    """Two threads compile at once: torch's ptxas stays set aside until both are done."""
    import threading

    monkeypatch.setenv("TRITON_PTXAS_PATH", _torch_ptxas())
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen, errors = {}, []

    def first():
        with toolchain.triton_ptxas():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        try:
            with toolchain.triton_ptxas():
                second_in.set()
                first_out.wait(10)
                seen["while the second compiles"] = os.environ.get("TRITON_PTXAS_PATH")
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
            second_in.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert errors == [] and seen == {"while the second compiles": None}
    assert os.environ["TRITON_PTXAS_PATH"] == _torch_ptxas()
