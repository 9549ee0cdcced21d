"""Gathers of floating-point tensors inside kernels (index_select, gather,
take_along_axis): the input is read at the index's coordinates, also when it is a
value the same kernel computes.  Checked against the reference executor (torch)."""
import pytest
import torch

import pyfuser
from pyfuser import DataType, FusionDefinition

DTS = [DataType.Float, DataType.BFloat16]


def tensor(fd, rank, dtype):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def steps(fd):
    plan = list(fd._runtime.plans.values())[-1]
    return [s.scheduler.NAME if s.scheduler else "host" for s in plan.steps]


def run_twice(fd, inputs):
    """Execute, then execute again on the cached path; both must match the reference."""
    want = fd.reference(list(inputs))
    for _ in range(2):
        before = pyfuser.cache_info()["launches"]
        got = fd.execute(list(inputs))
        n = pyfuser.cache_info()["launches"] - before
        for g, w in zip(got, want):
            tol = (1.6e-2, 1e-2) if g.dtype == torch.bfloat16 else (1e-5, 1e-5)
            torch.testing.assert_close(g, w, rtol=tol[0], atol=tol[1])
    return got, n


def data(shape, dt, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 2).to(dt.torch)


@pytest.mark.parametrize("dt", DTS)
def test_cross_entropy_reads_the_target_in_the_log_softmax_kernel(dt):
    x = data((9, 37), dt, 1)
    t = torch.randint(0, 37, (9,), generator=torch.Generator().manual_seed(2))
    with FusionDefinition() as fd:
        tx, tt = tensor(fd, 2, dt), tensor(fd, 1, DataType.Int)
        xf = fd.ops.cast(tx, DataType.Float)
        sh = fd.ops.sub(xf, fd.ops.max(xf, dims=[1], keepdim=True))
        logp = fd.ops.sub(sh, fd.ops.log(fd.ops.sum(fd.ops.exp(sh), dims=[1], keepdim=True)))
        picked = fd.ops.take_along_axis(logp, fd.ops.broadcast_in_dim(tt, shape=[9, 1], broadcast_dims=[0]), 1)
        fd.add_output(fd.ops.neg(fd.ops.squeeze(picked, [1])))  # per-row losses
    (loss,), n = run_twice(fd, [x, t])
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(x.float(), t, reduction="none"))
    assert n == 1 and steps(fd) == ["inner_reduction"]


@pytest.mark.parametrize("dt", DTS)
def test_gather_with_a_smaller_index_in_a_pointwise_kernel(dt):
    x = data((6, 10), dt, 3)
    idx = torch.randint(0, 10, (4, 3), generator=torch.Generator().manual_seed(4))
    with FusionDefinition() as fd:
        tx, ti = tensor(fd, 2, dt), tensor(fd, 2, DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.gather(fd.ops.exp(tx), ti, 1), 2.0))
    (out,), n = run_twice(fd, [x, idx])
    assert n == 1 and steps(fd) == ["pointwise"]


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dt", DTS)
def test_index_select_along_any_dim(dim, dt):
    x = data((7, 5), dt, 5)
    idx = torch.tensor([4, 0, 2, 2, 1])
    with FusionDefinition() as fd:
        tx, ti = tensor(fd, 2, dt), tensor(fd, 1, DataType.Int)
        fd.add_output(fd.ops.add(fd.ops.index_select(tx, ti, dim), 1.0))
    run_twice(fd, [x, idx])
    assert steps(fd) == ["pointwise"]


def test_take_along_axis_of_an_input_beside_a_reduction():
    x = data((8, 16), DataType.Float, 6)
    idx = torch.randint(0, 16, (8, 1), generator=torch.Generator().manual_seed(7))
    with FusionDefinition() as fd:
        tx, ti = tensor(fd, 2, DataType.Float), tensor(fd, 2, DataType.Int)
        fd.add_output(fd.ops.sub(fd.ops.take_along_axis(tx, ti, 1), fd.ops.sum(tx, dims=[1], keepdim=True)))
    (out,), n = run_twice(fd, [x, idx])
    assert n == 1


def test_an_index_out_of_range_gives_nan_not_another_element():
    x = data((4, 6), DataType.Float, 8)
    idx = torch.tensor([[1], [6], [-1], [0]])
    with FusionDefinition() as fd:
        tx, ti = tensor(fd, 2, DataType.Float), tensor(fd, 2, DataType.Int)
        fd.add_output(fd.ops.take_along_axis(tx, ti, 1))
    (out,) = fd.execute([x, idx])
    assert out[1].isnan().all() and out[2].isnan().all()
    torch.testing.assert_close(out[[0, 3]], torch.take_along_dim(x[[0, 3]], idx[[0, 3]], 1))


def test_integer_gathers_stay_on_the_host():
    x = torch.arange(24).reshape(4, 6)
    idx = torch.tensor([[5], [0], [3], [2]])
    with FusionDefinition() as fd:
        tx, ti = tensor(fd, 2, DataType.Int), tensor(fd, 2, DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.take_along_axis(tx, ti, 1), 3))
    (out,) = fd.execute([x, idx])
    torch.testing.assert_close(out, torch.take_along_dim(x, idx, 1) * 3)
    assert "host" in steps(fd)
