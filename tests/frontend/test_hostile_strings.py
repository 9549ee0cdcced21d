"""Text given wherever the API takes a value never reaches generated source: the
kernels and the printed definition are made of the IR's own names, dtypes and
numbers.  Each hostile string here is rejected with pyfuser's error."""
from __future__ import annotations

import os

import pytest
import torch

from pyfuser import DataType, FusionDefinition, PyfuserError
from pyfuser.runtime import plan as plan_mod

MARK = "/tmp/pyfuser_hostile_string_ran"
HOSTILE = [
    f"x'); import os; os.system('touch {MARK}') #",
    f"0(x):\n    pass\nimport os; os.system('touch {MARK}')\ndef f",
    f'"""\nimport os; os.system("touch {MARK}")\n"""',
    "Float\n",
]


@pytest.fixture(autouse=True)
def sources(monkeypatch):
    """Every kernel source generated during the test."""
    seen = []
    original = plan_mod.load_kernel
    monkeypatch.setattr(plan_mod, "load_kernel", lambda n, s, d: (seen.append(s), original(n, s, d))[1])
    if os.path.exists(MARK):
        os.unlink(MARK)
    yield seen
    assert not os.path.exists(MARK)
    for s in seen:
        assert "touch" not in s and "import os" not in s


def fusion(build):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        build(fd, x)
    return fd


def rejected(call):
    with pytest.raises(PyfuserError):
        call()


DEFINITION_ARGS = {
    "id": lambda s: FusionDefinition(id=s),
    "define_tensor dtype": lambda s: fusion(lambda fd, x: fd.define_tensor(shape=[-1], dtype=s)),
    "define_tensor shape": lambda s: fusion(lambda fd, x: fd.define_tensor(shape=[s])),
    "define_tensor contiguity": lambda s: fusion(lambda fd, x: fd.define_tensor(shape=[-1], contiguity=[s])),
    "define_tensor stride_order": lambda s: fusion(lambda fd, x: fd.define_tensor(shape=[-1, -1], stride_order=[s, 0])),
    "define_scalar value": lambda s: fusion(lambda fd, x: fd.define_scalar(s)),
    "define_scalar dtype": lambda s: fusion(lambda fd, x: fd.define_scalar(dtype=s)),
    "define_constant": lambda s: fusion(lambda fd, x: fd.define_constant(s)),
    "add operand": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.add(x, s))),
    "cast dtype": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.cast(x, dtype=s))),
    "sum dims": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.sum(x, dims=[s]))),
    "sum dtype": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.sum(x, dims=[1], dtype=s))),
    "reshape new_shape": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.reshape(x, new_shape=[s]))),
    "broadcast_in_dim shape": lambda s: fusion(
        lambda fd, x: fd.add_output(fd.ops.broadcast_in_dim(x, shape=[s, -1], broadcast_dims=[0, 1]))),
    "permute dims": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.permute(x, dims=[s, 0]))),
    "full fill_value": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.full([2], s, DataType.Float))),
    "full dtype": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.full([2], 1.0, s))),
    "pad widths": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.pad(x, [s, 0]))),
    "pad value": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.pad(x, [1, 0], s))),
    "rand_like rng_seed": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.rand_like(x, rng_seed=s))),
    "var correction": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.var(x, dims=[1], correction=s))),
    "clamp min": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.clamp(x, min=s))),
    "slice starts": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.slice(x, [s, 0], [1, 1]))),
    "iota length": lambda s: fusion(lambda fd, x: fd.add_output(fd.ops.iota(s))),
}


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("where", sorted(DEFINITION_ARGS))
def test_definition_arguments_reject_text(where, text):
    rejected(lambda: DEFINITION_ARGS[where](text))


def pointwise_fd():
    return fusion(lambda fd, x: fd.add_output(fd.ops.mul(x, fd.define_scalar(2.0))))


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_execute_arguments_reject_text(text):
    fd = pointwise_fd()
    rejected(lambda: fd.execute([text]))
    rejected(lambda: fd.execute(text))
    with pytest.raises((PyfuserError, RuntimeError)):  # torch's own check of a device name
        fd.execute([torch.randn(2, 3)], device=text)


def test_a_fusion_that_runs_is_spelled_from_the_ir(sources):
    fd = pointwise_fd()
    x = torch.randn(2, 3)
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x * 2)
    assert sources and all("def pyfuser_f" in s for s in sources)
    assert "def nvfuser_fusion(fd : FusionDefinition) -> None :" in repr(fd)
