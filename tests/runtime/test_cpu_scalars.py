"""nvFuser's CPU scalars: a 0-dim CPU tensor (``from_pytorch`` of one, or
``define_tensor(shape=[], is_cpu=True)``) may be given beside tensors on a GPU; the
fusion reads it as a number.  A CPU tensor of any other rank beside GPU tensors is an
input on the wrong device, named in the error."""
import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import InputError
from pyfuser.ir.concretize import bind, cpu_scalars_on_device
from pyfuser.ir.dtypes import from_torch


def _scalar_plus_vector(scalar_shape=(), dtype=torch.float32):
    with FusionDefinition() as fd:
        s = fd.define_tensor(shape=[-1] * len(scalar_shape), contiguity=[True] * len(scalar_shape),
                             dtype=from_torch(dtype), is_cpu=not scalar_shape)
        v = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(s, v))
    return fd


@pytest.mark.parametrize("dtype, value", [(torch.float32, 2.5), (torch.float64, 1 / 3), (torch.int64, 2 ** 40 + 1),
                                          (torch.bool, True)])
def test_a_cpu_scalar_takes_the_device_of_the_other_tensors(dtype, value):
    # the meta device stands in for a GPU: the scalar moves, its value and dtype kept
    fd = _scalar_plus_vector(dtype=dtype)
    s, v = torch.tensor(value, dtype=dtype), torch.empty(3, device="meta")
    moved = cpu_scalars_on_device(fd.ir, [s, v])
    assert moved[1] is v and moved[0].device.type == "meta" and moved[0].dtype == dtype and moved[0].dim() == 0
    assert bind(fd.ir, [s, v]).device.type == "meta"  # explain, validate and the reference bind so too
    s_cpu = cpu_scalars_on_device(fd.ir, [s, torch.empty(3)])[0]
    assert s_cpu is s  # beside CPU tensors nothing moves


def test_a_cpu_tensor_of_rank_one_beside_a_gpu_tensor_is_named():
    fd = _scalar_plus_vector(scalar_shape=(4,))
    with pytest.raises(InputError, match=r"one device, got \['cpu', 'meta'\]; only 0-dim CPU tensors \(scalars\) "
                                         r"may join tensors on a GPU, got CPU tensor\(s\) T0 \[4\]"):
        fd.execute([torch.ones(4), torch.empty(4, device="meta")])


@pytest.mark.gpu
def test_cpu_scalar_plus_cuda_tensor():
    fd = _scalar_plus_vector()
    s, v = torch.tensor(2.0), torch.randn(5, device="cuda")
    for _ in range(2):  # the first execute plans, the second takes the cached path
        (out,) = fd.execute([s, v])
        assert out.device == v.device
        torch.testing.assert_close(out, v + 2.0)
    with FusionDefinition() as fd2:
        t0 = fd2.from_pytorch(s)
        fd2.add_output(fd2.ops.mul(t0, fd2.from_pytorch(v)))
    torch.testing.assert_close(fd2.execute([s, v])[0], v * 2.0)
    fd2.validate([s, v])  # the reference executor takes the scalar too
    torch.testing.assert_close(fd2.reference([s, v])[0], v * 2.0)
