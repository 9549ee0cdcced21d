"""The online (one-pass max + rescaled sum) variant of multi-pass normalization,
against the reference, with rows that are all -inf, hold a NaN, or hold +inf."""
import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.schedulers import Choices


def _softmax_fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        m = fd.ops.max(x, dims=[1])
        e = fd.ops.exp(fd.ops.sub(x, fd.ops.broadcast_in_dim(m, shape=[-1, 1], broadcast_dims=[0])))
        s = fd.ops.sum(e, dims=[1])
        fd.add_output(fd.ops.div(e, fd.ops.broadcast_in_dim(s, shape=[-1, 1], broadcast_dims=[0])))
        fd.add_output(s)
        fd.add_output(m)
    return fd


@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("block_k", [1, 2])
def test_online_softmax_matches_reference(online, block_k):
    fd = _softmax_fd()
    x = torch.randn(6, 77) * 5
    x[1] = float("-inf")
    x[2, 5] = float("nan")
    x[3, 7] = float("inf")
    x[4, :40] = float("-inf")
    want = fd.reference([x])
    with Choices(persistent=False, block_j=16, block_k=block_k, online=online):
        got = fd.execute([x])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("align", [1, 8])
@pytest.mark.parametrize("block_j", [16, 64])
def test_online_statistics_of_fp16_rows(align, block_j):
    """The report's log(sum(exp(x - max))) (statistics only, an inner reduction) on
    fp16 rows of 1001, online, with and without the peeled misaligned head and tail."""
    from pyfuser.bench.seeds import SEEDS

    case = SEEDS["log_softmax_logsum"]
    with FusionDefinition() as fd:
        case.build(fd, 5, 1001)
    (x,) = case.make_inputs((5, 1001), "cpu", torch.Generator().manual_seed(3))
    x[1, 7] = float("nan")
    x[2, :500] = float("-inf")
    want = fd.reference([x])
    with Choices(persistent=False, block_j=block_j, block_k=1, online=True, align=align):
        got = fd.execute([x])
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6, equal_nan=True)
    assert fd._runtime.kernels and all(key.params.online for key in fd._runtime.kernels)


@pytest.mark.parametrize("align", [1, 8])
@pytest.mark.parametrize("block_j", [16, 64])
@pytest.mark.parametrize("out_reversed", [False, True])
def test_online_log_softmax_of_fp16_rows(align, block_j, out_reversed):
    """The report's log-softmax (fp16 rows of 1001 -> fp32), online: the statistics pass
    walks each row forwards, the output pass forwards or backwards (the chunks read
    last first), with and without the peeled head and tail; every element is written."""
    from pyfuser.bench.seeds import SEEDS

    case = SEEDS["log_softmax_sub"]
    with FusionDefinition() as fd:
        case.build(fd, 5, 1001)
    (x,) = case.make_inputs((5, 1001), "cpu", torch.Generator().manual_seed(4))
    x[1, 9] = float("nan")
    x[3, 600:] = float("-inf")
    want = fd.reference([x])
    with Choices(persistent=False, block_j=block_j, block_k=1, online=True, align=align, out_reversed=out_reversed):
        got = fd.execute([x])
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5, equal_nan=True)
    (src, _), = fd._runtime.kernels.values()
    assert ("for i0 in range(0, nb" in src.source) == out_reversed  # the output pass, backwards


@pytest.mark.parametrize("spelling", ["broadcast_in_dim", "expand"])
def test_online_pair_found_through_any_broadcast(spelling):
    """sum(exp(x - max)) is an online pair whether the max is broadcast back in one
    broadcast_in_dim or unsqueezed then expanded (a same-rank broadcast_in_dim is
    recorded as an expand)."""
    from pyfuser.ir.analysis import online_softmax_pairs
    from pyfuser.ir.ops import OPS, REDUCTION_KINDS

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        m = fd.ops.max(x, dims=[1])
        if spelling == "broadcast_in_dim":
            mb = fd.ops.broadcast_in_dim(m, shape=[-1, -1], broadcast_dims=[0])
        else:
            mb = fd.ops.expand(fd.ops.broadcast_in_dim(m, shape=[-1, 1], broadcast_dims=[0]), x.shape())
        fd.add_output(fd.ops.sum(fd.ops.exp(fd.ops.sub(x, mb)), dims=[1]))
    reductions = {e: 0 for e in fd.ir.program if OPS[e.op].kind in REDUCTION_KINDS}
    pairs = online_softmax_pairs(reductions)
    assert [s.op for s in pairs] == ["sum"]
