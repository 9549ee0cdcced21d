"""Reshapes lowered group by group (``shapes.reshape_groups``, ``Lowering.lower_reshape``):
each run of dims the reshape merges or splits is re-ravelled on its own.  The groups
themselves, and kernels through such reshapes (strided inputs, size-1 dims, a
reshape whose one group spans every dim) against the reference executor."""
from __future__ import annotations

import pytest
import torch

from pyfuser.ir.shapes import reshape_groups

from .common import DataType, check, define_input, fusion, gen_for, make_tensor


@pytest.mark.parametrize("src,dst,groups", [
    ((64, 128, 12, 64), (64, 128, 768), [((0,), (0,)), ((1,), (1,)), ((2, 3), (2,))]),
    ((8, 768), (8, 12, 64), [((0,), (0,)), ((1,), (1, 2))]),
    ((6, 4), (4, 6), [((0, 1), (0, 1))]),
    ((2, 1, 3), (1, 6, 1), [((0, 2), (1,))]),
    ((1, 1), (1,), []),
    ((3, 0), (0, 5), None),
])
def test_groups(src, dst, groups):
    assert reshape_groups(src, dst) == groups


def _x(shape, dtype=torch.float16, name="x"):
    return make_tensor(shape, dtype, gen_for("reshape_groups", name, shape, str(dtype)))


@pytest.mark.parametrize("shape", [(4, 6, 3, 8), (2, 5, 1, 16), (3, 1, 4, 4)], ids=str)
def test_head_merge_of_a_permuted_input_with_its_column_sum(shape):
    """BERT's Q/K/V gradient: [B, H, S, D] permuted to [B, S, H, D], merged to
    [B, S, H*D], copied contiguous and summed over (B, S) for the bias gradient."""
    B, S, H, D = shape
    base = _x((B, H, S, D))
    q = base.permute(0, 2, 1, 3)

    def build(fd):
        t = define_input(fd, q, contiguous=False)
        m = fd.ops.reshape(t, [B, S, H * D])
        fd.add_output(fd.ops.set(m))
        fd.add_output(fd.ops.sum(m, dims=[0, 1], dtype=DataType.Float))

    check(fusion(build), [q])


@pytest.mark.parametrize("src,dst", [((6, 10), (3, 2, 5, 2)), ((4, 3, 5), (12, 5)), ((6, 4), (4, 6)),
                                     ((2, 1, 3, 4), (1, 6, 4, 1))], ids=str)
def test_split_and_merged_dims_feed_a_broadcast(src, dst):
    """y = reshape(x) * w + exp(reshape(x)) with w broadcast along the first output dim."""
    x = _x(src, torch.float32)
    w = _x(dst[1:], torch.float32, "w")

    def build(fd):
        tx, tw = define_input(fd, x), define_input(fd, w)
        r = fd.ops.reshape(tx, list(dst))
        wb = fd.ops.broadcast_in_dim(tw, shape=list(dst), broadcast_dims=list(range(1, len(dst))))
        fd.add_output(fd.ops.add(fd.ops.mul(r, wb), fd.ops.exp(r)))

    check(fusion(build), [x, w], n_launches=1)
