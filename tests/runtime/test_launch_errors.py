"""What a failed kernel launch raises: a CompileError naming the kernel, caused by the
error, except running out of memory, which stays torch's ``OutOfMemoryError`` (a
caller that shrinks its batch, and the backend's capture fallback, catch that type)."""
import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import CompileError
from pyfuser.runtime.executor import program_for


class _Failing:
    """A kernel whose launch raises ``err``."""

    def __init__(self, err):
        self.err = err

    def __getitem__(self, grid):
        def launch(*args, **kw):
            raise self.err
        return launch


def _program_failing_with(err):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(fd.ops.mul(t, t)))
    x = torch.randn(40)
    torch.testing.assert_close(fd.execute([x])[0], torch.exp(x * x))
    prog = program_for(fd, [x])
    prog.launches = [(src, _Failing(err), *rest) for src, _, *rest in prog.launches]
    prog.direct = {}
    return prog, x


@pytest.mark.parametrize("err", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                 RuntimeError("CUDA error: out of memory")], ids=["allocator", "driver"])
def test_running_out_of_memory_in_a_launch_stays_torchs_error(err):
    prog, x = _program_failing_with(err)
    with pytest.raises(type(err)) as info:
        prog.run([x])
    assert info.value is err and not isinstance(info.value, CompileError)


def test_another_launch_error_names_the_kernel():
    err = ValueError("bad launch")
    prog, x = _program_failing_with(err)
    with pytest.raises(CompileError, match=r"kernel pyfuser_f\d+_k\d+ failed to compile or run: ValueError: bad launch") as info:
        prog.run([x])
    assert info.value.__cause__ is err
