"""Random ops (rand_like, randn_like, uniform, normal): statistics, determinism under
explicit rng_seed/rng_offset, and reproducibility under ``torch.manual_seed``.

Eager cannot be the oracle for the values (its generator is not ours), so values are
checked against statistics, and bit for bit against pyfuser's Philox definition
(``pyfuser.rng``), which every backend must reproduce."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.ir.dtypes import from_torch
from pyfuser.rng import reference_random

SHAPE = (64, 96)  # 6144 values: the mean of U(0,1) is within 0.02 of 0.5 with overwhelming odds


def _like(op, dtype=torch.float32, seeded=False, shape=SHAPE):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1] * len(shape), contiguity=[True] * len(shape), dtype=from_torch(dtype))
        if seeded:
            seed, offset = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
            fd.add_output(getattr(fd.ops, op)(t, rng_seed=seed, rng_offset=offset))
        else:
            fd.add_output(getattr(fd.ops, op)(t))
    return fd


def _x(dtype=torch.float32, shape=SHAPE):
    return torch.ones(shape, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_rand_like_statistics(dtype):
    (u,) = _like("rand_like", dtype).execute([_x(dtype)])
    assert u.dtype == dtype and u.shape == SHAPE
    u = u.float()
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.02
    assert abs(u.std().item() - 12 ** -0.5) < 0.02
    assert u.unique().numel() > 100  # not a constant or a short cycle


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_randn_like_statistics(dtype):
    (z,) = _like("randn_like", dtype).execute([_x(dtype)])
    assert z.dtype == dtype and z.shape == SHAPE
    z = z.float()
    assert torch.isfinite(z).all()
    assert abs(z.mean().item()) < 0.06
    assert abs(z.std().item() - 1.0) < 0.05
    assert abs((z.abs() < 1.0).float().mean().item() - 0.6827) < 0.03  # the one-sigma mass


def test_uniform_and_normal_with_parameters():
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.uniform(-2.0, 3.0, shape=list(SHAPE), dtype=DataType.Float))
        fd.add_output(fd.ops.normal(10.0, 0.5, shape=list(SHAPE), dtype=DataType.Float))
        fd.add_output(fd.ops.uniform(0.0, 1.0, shape=[7, 5], dtype=DataType.BFloat16))
    u, n, small = fd.execute([])
    assert -2.0 <= u.min().item() and u.max().item() < 3.0
    assert abs(u.mean().item() - 0.5) < 0.1
    assert abs(n.mean().item() - 10.0) < 0.03 and abs(n.std().item() - 0.5) < 0.03
    assert small.dtype == torch.bfloat16 and small.shape == (7, 5)


def test_uniform_with_runtime_bounds():
    with FusionDefinition() as fd:
        lo, hi = fd.define_scalar(dtype=DataType.Double), fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.uniform(lo, hi, shape=[1000], dtype=DataType.Float))
    (u,) = fd.execute([5.0, 6.0])
    assert 5.0 <= u.min().item() and u.max().item() < 6.0


@pytest.mark.parametrize("op", ["rand_like", "randn_like"])
def test_same_seed_and_offset_give_identical_values(op):
    fd = _like(op, seeded=True)
    a = fd.execute([_x(), 1234, 0])[0]
    b = fd.execute([_x(), 1234, 0])[0]
    c = _like(op, seeded=True).execute([_x(), 1234, 0])[0]
    assert torch.equal(a, b) and torch.equal(a, c)
    assert not torch.equal(a, fd.execute([_x(), 1234, 4])[0]), "a different offset must give different values"
    assert not torch.equal(a, fd.execute([_x(), 1235, 0])[0]), "a different seed must give different values"


def test_constant_seed_and_offset():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.rand_like(t, rng_seed=7, rng_offset=8))
    a, = fd.execute([_x()])
    b, = fd.execute([_x()])
    assert torch.equal(a, b)


@pytest.mark.parametrize("shape", [(5, 7), (3, 1, 9), (1000,)], ids=str)
@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_values_follow_the_philox_definition(dist, shape):
    """Element i is word i % 4 of Philox(seed, (i // 4, offset)), whatever the kernel's tiling."""
    seed, offset = 0x1234_5678_9ABC, 12
    fd = _like("rand_like" if dist == "uniform" else "randn_like", seeded=True, shape=shape)
    (got,) = fd.execute([_x(shape=shape), seed, offset])
    want = reference_random(dist, shape, 0.0, 1.0, seed, offset, torch.float32, "cpu")
    if dist == "uniform":
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_manual_seed_reproduces_unseeded_draws():
    fd = _like("rand_like")
    torch.manual_seed(2024)
    a = fd.execute([_x()])[0]
    b = fd.execute([_x()])[0]
    torch.manual_seed(2024)
    c = fd.execute([_x()])[0]
    assert not torch.equal(a, b), "consecutive executes must draw new numbers"
    assert torch.equal(a, c), "torch.manual_seed must replay the same numbers"


def test_two_random_ops_in_one_fusion_are_independent():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.rand_like(t))
        fd.add_output(fd.ops.rand_like(t))
    a, b = fd.execute([_x()])
    assert not torch.equal(a, b)
    assert abs(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].item()) < 0.1


def test_dropout_pattern():
    """The report's dropout: keep = rand > 0.1, out = keep * x * 1.11111."""
    x = torch.randn(32, 48, generator=torch.Generator().manual_seed(5))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        keep = fd.ops.gt(fd.ops.rand_like(t), 0.1)
        fd.add_output(keep)
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.mul(fd.ops.cast(keep, DataType.Float), t), 1.11111), DataType.Half))
    keep, out = fd.execute([x])
    assert keep.dtype == torch.bool and 0.85 < keep.float().mean().item() < 0.95
    torch.testing.assert_close(out, (keep.float() * x * 1.11111).half(), rtol=2e-3, atol=1e-5)
