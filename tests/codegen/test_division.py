"""fp32 division by a value uniform along a tile axis (a row's sum, a runtime scalar, a
constant) is emitted as a product with its reciprocal (``ops._div_uniform``):
within one ulp of IEEE division for every divisor, zeros, infinities, NaN, subnormals
and values near the fp32 limits included."""
from __future__ import annotations

import math

import pytest
import torch

from pyfuser.runtime import plan as plan_mod

from .common import DataType, define_input, fusion, gen_for

# Divisors that stress the reciprocal: signed zeros, infinities, NaN, subnormals, values
# whose reciprocal is subnormal or overflows, and ordinary ones.
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -3e-42, 1e-39, 5e-31, 1e-30, 2.0 ** -100,
           2.0 ** 100, 1e30, 3e38, -3.4e38, 1.0, -7.0, 3.0, 0.1]


@pytest.fixture
def sources(monkeypatch):
    seen = []
    original = plan_mod.load_kernel

    def load(name, source, device_type):
        seen.append(source)
        return original(name, source, device_type)

    monkeypatch.setattr(plan_mod, "load_kernel", load)
    return seen


def ulps_apart(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Distance in units in the last place (fp32 bit patterns, sign-magnitude ordered)."""
    def ordered(t):
        i = t.contiguous().view(torch.int32).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)
    return (ordered(got) - ordered(want)).abs()


def assert_within_one_ulp(got, want, what):
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"{what}: NaN where IEEE division gives {want[torch.isnan(got) != nan]}"
    d = ulps_apart(got[~nan], want[~nan])
    worst = int(d.max()) if d.numel() else 0
    assert worst <= 1, f"{what}: {worst} ulps from IEEE division"


def _row_divide(fd, x, y, R, N):
    yb = fd.ops.broadcast_in_dim(y, shape=[R, N], broadcast_dims=[0])
    fd.add_output(fd.ops.div(x, yb))
    fd.add_output(fd.ops.sum(x, dims=[1]))  # a reduction: the row tile, y uniform along it


def test_row_divisor_special_values(sources):
    g = gen_for("cpu", 7)
    R, N = len(SPECIAL), 37
    x = torch.randn(R, N, generator=g) * torch.logspace(-30, 30, N)
    x[:, 0], x[:, 1], x[:, 2], x[:, 3] = 0.0, math.inf, math.nan, 1e-44
    y = torch.tensor(SPECIAL, dtype=torch.float32)

    def build(fd):
        _row_divide(fd, define_input(fd, x), define_input(fd, y), R, N)

    got = fusion(build).execute([x, y])[0]
    assert any("tl.div_rn(1.0" in s for s in sources), "the row divisor was not inverted once"
    assert_within_one_ulp(got, x / y[:, None], "x / row value")


@pytest.mark.parametrize("divisor", [8.0, 3.0, 0.1, -2.0 ** -60])
def test_constant_divisor(divisor, sources):
    x = torch.randn(5, 300, generator=gen_for("cpu", 3)) * 1e3

    def build(fd):
        t = define_input(fd, x)
        fd.add_output(fd.ops.div(t, fd.define_scalar(divisor, dtype=DataType.Double)))
        fd.add_output(fd.ops.sum(t, dims=[1]))

    got = fusion(build).execute([x])[0]
    want = x / torch.tensor(divisor, dtype=torch.float32)
    assert_within_one_ulp(got, want, f"x / {divisor}")
    if math.log2(abs(divisor)).is_integer():  # a power of two: an exact multiply
        assert torch.equal(got, want)
    assert not any("tl.div_rn(" in s for s in sources), "a constant divisor still divides per element"


@pytest.mark.parametrize("value", [3.0, 1e-40, 0.0, math.inf])
def test_runtime_scalar_divisor(value):
    x = torch.randn(3, 64, generator=gen_for("cpu", 5))

    def build(fd):
        t = define_input(fd, x)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.div(t, s))
        fd.add_output(fd.ops.sum(t, dims=[1]))

    got = fusion(build).execute([x, value])[0]
    assert_within_one_ulp(got, x / torch.tensor(value, dtype=torch.float32), f"x / scalar {value}")


def test_elementwise_divisor_stays_ieee(sources):
    """A divisor that varies with the quotient is divided per element (correctly rounded)."""
    g = gen_for("cpu", 9)
    x, y = torch.randn(4, 50, generator=g), torch.randn(4, 50, generator=g)

    def build(fd):
        a, b = define_input(fd, x), define_input(fd, y)
        fd.add_output(fd.ops.div(a, b))
        fd.add_output(fd.ops.sum(a, dims=[1]))

    got = fusion(build).execute([x, y])[0]
    assert torch.equal(got, x / y)
    assert any("tl.div_rn(x" in s or "tl.div_rn(t" in s for s in sources)
