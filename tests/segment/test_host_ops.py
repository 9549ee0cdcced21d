"""Host ops (matmul, linear, embedding, gathers of integer tensors) inside fusions:
torch runs them between the generated kernels, which store their inputs and load
their results.  Gathers of floating-point tensors run inside kernels
(test_kernel_gathers.py); here they are checked for results only."""
import pytest
import torch
import torch.nn.functional as F

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import DefinitionError, DefinitionTypeError

FL = DataType.Float


def tensor(fd, rank, dtype=FL):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def kinds(fd):
    plan = list(fd._runtime.plans.values())[-1]
    return [s.scheduler.NAME if s.scheduler else ("host" if s.is_host else "reference") for s in plan.steps]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_gelu_linear_times_y():
    g = gen(1)
    x, w, b, y = (torch.randn(s, generator=g) for s in [(5, 8), (6, 8), (6,), (5, 6)])
    with FusionDefinition() as fd:
        tx, tw, tb, ty = tensor(fd, 2), tensor(fd, 2), tensor(fd, 1), tensor(fd, 2)
        l = fd.ops.linear(fd.ops.mul(tx, 0.5), tw, tb)
        inner = fd.ops.mul(l, 0.7071067811865476)
        gelu = fd.ops.mul(fd.ops.mul(l, 0.5), fd.ops.add(fd.ops.erf(inner), 1.0))
        fd.add_output(fd.ops.mul(gelu, ty))
    (out,) = fd.execute([x, w, b, y])
    torch.testing.assert_close(out, F.gelu(F.linear(x * 0.5, w, b)) * y)
    assert kinds(fd) == ["pointwise", "host", "pointwise"]


@pytest.mark.parametrize("dt", [DataType.Half, DataType.BFloat16])
def test_matmul_half_with_upcast_input(dt):
    """The host op reads an fp32 upcast of a 16-bit value: the kernel stores the
    16-bit value and the cast is replayed in torch."""
    g = gen(2)
    tdt = dt.torch
    a = torch.randn(3, 4, 8, generator=g).to(tdt)
    bm = torch.randn(8, 5, generator=g)
    with FusionDefinition() as fd:
        ta, tb = tensor(fd, 3, dt), tensor(fd, 2)
        neg = fd.ops.neg(ta)
        m = fd.ops.matmul(fd.ops.cast(neg, dtype=FL), tb)
        fd.add_output(fd.ops.cast(fd.ops.relu(m), dtype=dt))
        fd.add_output(m)
    out, m = fd.execute([a, bm])
    ref_m = torch.matmul((-a).float(), bm)
    torch.testing.assert_close(m, ref_m)
    torch.testing.assert_close(out, torch.relu(ref_m).to(tdt))
    plan = list(fd._runtime.plans.values())[-1]
    stored = plan.steps[0].outputs
    assert [v.dtype for v in stored] == [dt]


def test_matmul_of_matmul_shapes():
    g = gen(3)
    a, b, c = torch.randn(4, 6, generator=g), torch.randn(6, 3, generator=g), torch.randn(3, generator=g)
    with FusionDefinition() as fd:
        ta, tb, tc = tensor(fd, 2), tensor(fd, 2), tensor(fd, 1)
        fd.add_output(fd.ops.exp(fd.ops.matmul(fd.ops.matmul(ta, tb), tc)))
    (out,) = fd.execute([a, b, c])
    torch.testing.assert_close(out, torch.exp(a @ b @ c))


def test_index_select_and_embedding():
    g = gen(4)
    x = torch.randn(7, 5, generator=g)
    idx = torch.tensor([6, 0, 3, 3])
    with FusionDefinition() as fd:
        tx, ti = tensor(fd, 2), tensor(fd, 1, DataType.Int)
        s = fd.ops.index_select(fd.ops.sin(tx), ti, 0)
        fd.add_output(fd.ops.add(s, 1.0))
        e = fd.ops.embedding_fwd(ti, tx)
        fd.add_output(fd.ops.mul(e, e))
    s, e = fd.execute([x, idx])
    torch.testing.assert_close(s, torch.sin(x)[idx] + 1)
    torch.testing.assert_close(e, x[idx] * x[idx])


def test_cross_entropy_log_softmax_take_along_axis_mean():
    g = gen(5)
    logits = torch.randn(6, 11, generator=g)
    target = torch.randint(0, 11, (6,), generator=g)
    with FusionDefinition() as fd:
        tl_, tt = tensor(fd, 2), tensor(fd, 1, DataType.Int)
        mx = fd.ops.max(tl_, dims=[1], keepdim=True)
        sh = fd.ops.sub(tl_, mx)
        lse = fd.ops.log(fd.ops.sum(fd.ops.exp(sh), dims=[1], keepdim=True))
        logp = fd.ops.sub(sh, lse)
        picked = fd.ops.take_along_axis(logp, fd.ops.broadcast_in_dim(tt, shape=[6, 1], broadcast_dims=[0]), 1)
        loss = fd.ops.div(fd.ops.neg(fd.ops.sum(picked, dims=[0, 1])), 6.0)
        fd.add_output(loss)
    (loss,) = fd.execute([logits, target])
    torch.testing.assert_close(loss, F.cross_entropy(logits, target))
    assert "reference" not in kinds(fd)


def test_gather():
    g = gen(6)
    x = torch.randn(4, 6, generator=g)
    idx = torch.randint(0, 6, (4, 3), generator=g)
    with FusionDefinition() as fd:
        tx, ti = tensor(fd, 2), tensor(fd, 2, DataType.Int)
        fd.add_output(fd.ops.abs(fd.ops.gather(fd.ops.neg(tx), ti, -1)))
    (out,) = fd.execute([x, idx])
    torch.testing.assert_close(out, torch.gather(-x, 1, idx).abs())


def test_host_op_definition_errors():
    with FusionDefinition() as fd:
        a, b = tensor(fd, 2), tensor(fd, 1)
        with pytest.raises(DefinitionTypeError, match="index_select: index must be an Int"):
            fd.ops.index_select(a, b, 0)
        with pytest.raises(DefinitionError, match="gather: dim 2 is out of range"):
            fd.ops.gather(a, fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int), 2)


def test_printer_round_trip_linear():
    with FusionDefinition() as fd:
        x, w = tensor(fd, 2), tensor(fd, 2)
        fd.add_output(fd.ops.linear(x, w))
    assert "fd.ops.linear(tv0, tv1)" in repr(fd)
