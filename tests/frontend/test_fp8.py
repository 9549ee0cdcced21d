"""fp8 tensors (Hopper's e4m3fn and e5m2): inputs, outputs and casts.  A cast to fp8
rounds to nearest even through fp32, as torch converts (from fp64 and ints too):
subnormals kept, e4m3fn saturating at 448; fp8 -> wider dtypes is exact.  Ops torch
does not define on fp8 are rejected at definition time, naming the op."""
import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import DefinitionError
from pyfuser.ir.dtypes import from_torch

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]

# ordinary values, both zeros, values that round to fp8 subnormals, halfway cases,
# values past e4m3fn's largest (448, saturating in torch's conversion)
_EDGES = [0.0, -0.0, 1e-9, 2.0 ** -8, 0.0019, -0.0137, 1.0625, 3.25, 17.0, 300.0, 464.0, -500.0, 240.0]


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("src", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_cast_to_fp8_and_back_matches_torch(src, fp8):
    torch.manual_seed(0)
    x = torch.cat([torch.randn(50) * 4, torch.tensor(_EDGES)]).to(src)
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        t1 = fd.ops.cast(t0, dtype=from_torch(fp8))
        fd.add_output(t1)
        fd.add_output(fd.ops.cast(t1, dtype=from_torch(src)))
        fd.add_output(fd.ops.cast(t1, dtype=DataType.Float))
    q, back, wide = fd.execute([x])
    want = x.to(fp8)
    assert q.dtype == fp8 and torch.equal(q.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(back, want.to(src)) and torch.equal(wide, want.float())


@pytest.mark.parametrize("fp8", FP8)
def test_fp8_input_to_int_and_between_fp8s(fp8):
    x = (torch.randn(40) * 9).to(fp8)
    other = FP8[1 - FP8.index(fp8)]
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.cast(t0, dtype=DataType.Int))
        fd.add_output(fd.ops.cast(t0, dtype=from_torch(other)))
        fd.add_output(fd.ops.cast(fd.ops.cast(t0, dtype=DataType.Int), dtype=from_torch(fp8)))
    ints, swapped, again = fd.execute([x])
    assert torch.equal(ints, x.to(torch.int64))
    assert torch.equal(swapped.view(torch.uint8), x.float().to(other).view(torch.uint8))
    assert torch.equal(again.view(torch.uint8), x.to(torch.int64).float().to(fp8).view(torch.uint8))


def test_arithmetic_on_fp8_is_rejected_with_the_op():
    with pytest.raises(DefinitionError, match=r"add: not defined for inputs of dtype DataType.Float8_e4m3fn"):
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[-1], dtype=DataType.Float8_e4m3fn)
            fd.ops.add(t, t)
