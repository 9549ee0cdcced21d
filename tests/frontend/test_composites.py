"""``fd.ops.select``, ``triu`` and ``threshold``: values against eager, the printer's
round trip (``repr(fd)`` rebuilds the same fusion), and their errors."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition, PyfuserError
from pyfuser.ir.dtypes import from_torch

from ..helpers import assert_matches, make_tensor


def _input(fd, x):
    return fd.define_tensor(shape=[-1] * x.dim(), contiguity=[True] * x.dim(), dtype=from_torch(x.dtype))


def _round_trip(fd, inputs):
    """``repr(fd)`` run again: the same text and the same results."""
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), namespace)
    (build,) = [v for k, v in namespace.items() if k == "nvfuser_fusion"]
    with FusionDefinition() as again:
        build(again)
    assert repr(again).split("\n", 1)[1] == repr(fd).split("\n", 1)[1]
    for a, b in zip(fd.execute(inputs), again.execute(inputs)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("diagonal", [0, 1, -1, 3, -3, 1024, -1024])
def test_triu(diagonal):
    x = make_tensor((2, 5, 7), torch.float32, torch.Generator().manual_seed(1))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.triu(_input(fd, x), diagonal))
    assert_matches(fd.execute([x])[0], torch.triu(x, diagonal))
    _round_trip(fd, [x])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool],
                         ids=lambda d: str(d)[6:])
def test_triu_keeps_the_dtype(dtype):
    x = make_tensor((4, 6), dtype, torch.Generator().manual_seed(2))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.triu(_input(fd, x), diagonal=-1))
    assert_matches(fd.execute([x])[0], torch.triu(x, -1))


@pytest.mark.parametrize("shape", [[], [4]])
def test_triu_needs_two_dims(shape):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1] * len(shape), contiguity=[True] * len(shape), dtype=DataType.Float)
        with pytest.raises(PyfuserError, match=f"triu must have 2 or more dims, but got {len(shape)} dims"):
            fd.ops.triu(t)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("index", [0, 2, -1, -4])
def test_select_constant_index(index, dim):
    x = make_tensor((4, 5, 6), torch.float32, torch.Generator().manual_seed(3))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.select(_input(fd, x), index, dim))
    assert_matches(fd.execute([x])[0], torch.select(x, dim, index))
    _round_trip(fd, [x])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("dim", [0, 1])
def test_select_runtime_index(dim, dtype):
    """nvFuser's test_select: the index a runtime Int scalar; negative counts from the end."""
    x = make_tensor((8, 16), dtype, torch.Generator().manual_seed(4))
    with FusionDefinition() as fd:
        t = _input(fd, x)
        fd.add_output(fd.ops.select(t, fd.define_scalar(dtype=DataType.Int), dim))
    for index in (2, 0, -1, -3):
        assert_matches(fd.execute([x, index])[0], torch.select(x, dim, index), what=f"select {index}")
    _round_trip(fd, [x, 5])


def test_select_errors():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[4, 5], contiguity=[True, True], dtype=DataType.Float)
        with pytest.raises(PyfuserError, match="index 4 is out of range for dim 0 of extent 4"):
            fd.ops.select(t, 4, 0)
        with pytest.raises(PyfuserError, match="dim"):
            fd.ops.select(t, 0, 2)
        with pytest.raises(PyfuserError, match="index must be an int or an Int scalar"):
            fd.ops.select(t, fd.define_scalar(dtype=DataType.Double), 0)


def test_threshold_round_trip_and_scalar_bounds():
    x = make_tensor((3, 7), torch.float32, torch.Generator().manual_seed(5), special=True)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.threshold(_input(fd, x), 0.5, fd.define_scalar(-1.0)))
    assert_matches(fd.execute([x])[0], torch.threshold(x, 0.5, -1.0))
    _round_trip(fd, [x])
    with FusionDefinition() as fd:
        t = _input(fd, x)
        with pytest.raises(PyfuserError, match="threshold: threshold must be a scalar"):
            fd.ops.threshold(t, t, 0.0)
