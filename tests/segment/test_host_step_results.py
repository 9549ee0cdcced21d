"""A host step in the middle of a fusion hands every value later steps read to
them, not only the fusion's outputs: a kernel before it, a kernel after it that
reads its result (returned or not), its result reduced, and its size-1 result
broadcast.  Each op that runs in torch between kernels is here: the host ops
(matmul, linear, embedding, gathers of integer tensors) and the code generator's
fallbacks (integer pow with a tensor exponent or one outside 0..8).  Every case
runs three times: the first execute, a cached re-execute, and new values."""
import pytest
import torch
import torch.nn.functional as F

from pyfuser import DataType, FusionDefinition

FL, INT = DataType.Float, DataType.Int


def tensor(fd, rank, dtype):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def _ints(g, shape, hi):
    return torch.randint(0, hi, shape, generator=g)


# name -> (input specs [(rank, dtype)], inputs(g, n), fusion(fd, ts) -> host result, torch(xs))
# n is the leading extent: 1 for the size-1 (broadcast) cases.
CASES = {
    "matmul": ([(2, FL), (2, FL)],
               lambda g, n: [torch.randn(n, 4, generator=g), torch.randn(4, 3, generator=g)],
               lambda fd, t: fd.ops.matmul(fd.ops.mul(t[0], 0.5), t[1]),
               lambda x: (x[0] * 0.5) @ x[1]),
    "linear": ([(2, FL), (2, FL)],
               lambda g, n: [torch.randn(n, 4, generator=g), torch.randn(3, 4, generator=g)],
               lambda fd, t: fd.ops.linear(fd.ops.neg(t[0]), t[1]),
               lambda x: F.linear(-x[0], x[1])),
    "embedding_fwd": ([(2, INT), (2, FL)],
                      lambda g, n: [_ints(g, (n, 2), 5), torch.randn(5, 3, generator=g)],
                      lambda fd, t: fd.ops.embedding_fwd(t[0], fd.ops.mul(t[1], 2.0)),
                      lambda x: F.embedding(x[0], x[1] * 2)),
    "index_select": ([(2, INT), (1, INT)],
                     lambda g, n: [_ints(g, (5, 3), 100), _ints(g, (n,), 5)],
                     lambda fd, t: fd.ops.index_select(fd.ops.add(t[0], 1), t[1], 0),
                     lambda x: torch.index_select(x[0] + 1, 0, x[1])),
    "gather": ([(2, INT), (2, INT)],
               lambda g, n: [_ints(g, (n, 3), 100), _ints(g, (n, 2), 3)],
               lambda fd, t: fd.ops.gather(fd.ops.add(t[0], 1), t[1], 1),
               lambda x: torch.gather(x[0] + 1, 1, x[1])),
    "take_along_axis": ([(2, INT), (2, INT)],
                        lambda g, n: [_ints(g, (n, 3), 100), _ints(g, (n, 2), 3)],
                        lambda fd, t: fd.ops.take_along_axis(fd.ops.add(t[0], 1), t[1], 1),
                        lambda x: torch.take_along_dim(x[0] + 1, x[1], 1)),
    "pow_int_tensor_exponent": ([(2, INT), (2, INT)],
                                lambda g, n: [_ints(g, (n, 3), 5), _ints(g, (n, 3), 4)],
                                lambda fd, t: fd.ops.pow(fd.ops.add(t[0], 1), t[1]),
                                lambda x: torch.pow(x[0] + 1, x[1])),
    "pow_int_exponent_9": ([(2, INT)],
                           lambda g, n: [_ints(g, (n, 3), 4)],
                           lambda fd, t: fd.ops.pow(fd.ops.add(t[0], 1), 9),
                           lambda x: torch.pow(x[0] + 1, 9)),
}


def _after(fd, h):
    return fd.ops.add(fd.ops.mul(h, 2), 1)


def _widen(fd, h):
    """``h`` (leading extent 1) broadcast to leading extent 4."""
    rank = len(h.shape)
    shape = [4] + [fd.ops.size(h, d) for d in range(1, rank)]
    return fd.ops.broadcast_in_dim(h, shape=shape, broadcast_dims=list(range(rank)))


# mode -> (n, add the outputs of host result h, torch's outputs of host result r)
MODES = {
    # only a kernel's result of the host result is returned: the host result is an intermediate
    "intermediate": (3, lambda fd, h: [_after(fd, h)], lambda r: [r * 2 + 1]),
    "returned_too": (3, lambda fd, h: [h, _after(fd, h)], lambda r: [r, r * 2 + 1]),
    # the host result reduced to one element (a reduction kernel reads it), then reshaped
    "reduced": (3, lambda fd, h: [fd.ops.reshape(fd.ops.sum(h, dims=list(range(len(h.shape))), keepdim=True), [1])],
                lambda r: [r.sum().reshape(1)]),
    # size-1 inputs: the host result (size-1 leading dim) broadcast, as it is and after a kernel
    "broadcast": (1, lambda fd, h: [_widen(fd, h), _widen(fd, _after(fd, h))],
                  lambda r: [r.expand(4, *r.shape[1:]), (r * 2 + 1).expand(4, *r.shape[1:])]),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("op", list(CASES))
def test_host_step_in_the_middle(op, mode, device):
    specs, make, host, eager = CASES[op]
    n, outputs, eager_outputs = MODES[mode]
    with FusionDefinition() as fd:
        ts = [tensor(fd, rank, dt) for rank, dt in specs]
        for o in outputs(fd, host(fd, ts)):
            fd.add_output(o)
    g = torch.Generator().manual_seed(7)
    first, second = ([x.to(device) for x in make(g, n)] for _ in range(2))
    for xs in (first, first, second):
        outs = fd.execute(xs)
        want = eager_outputs(eager(xs))
        assert len(outs) == len(want)
        for got, ref in zip(outs, want):
            torch.testing.assert_close(got, ref, check_stride=False)
    plan = list(fd._runtime.plans.values())[-1]
    assert any(s.scheduler is None for s in plan.steps), "the op no longer runs in torch: the case tests nothing"
