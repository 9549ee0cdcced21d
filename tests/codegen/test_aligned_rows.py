"""Rows of a strided input that start 16-byte aligned (logits [tokens, 30522] read
from a [tokens, 30528] GEMM result): peeled from each row's start, only the tail
apart (``ReductionTile.aligned_rows``).  Checked against the reference executor."""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import Choices
from pyfuser.schedulers.reduction import strided_rows_dominate

from .common import DataType, check, define_input, fusion, gen_for, make_tensor


def _padded(rows, cols, pad, dtype=torch.float16):
    base = make_tensor((rows, cols + pad), dtype, gen_for("aligned_rows", rows, cols, pad))
    return base[:, :cols]


def _log_softmax_stats_and_output(x, with_output):
    def build(fd):
        t = fd.ops.cast(define_input(fd, x, contiguous=x.is_contiguous()), DataType.Float)
        m = fd.ops.max(t, dims=[1], keepdim=True)
        s = fd.ops.sum(fd.ops.exp(fd.ops.sub(t, m)), dims=[1], keepdim=True)
        lse = fd.ops.add(fd.ops.log(s), m)
        fd.add_output(lse)
        if with_output:
            fd.add_output(fd.ops.cast(fd.ops.sub(t, lse), DataType.Half))

    return fusion(build)


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("cols,pad", [(61, 3), (100, 4), (37, 3)])
@pytest.mark.parametrize("with_output", [False, True])
def test_strided_rows_peeled_from_their_start(cols, pad, persistent, with_output):
    x = _padded(9, cols, pad)
    assert not x.is_contiguous() and x.stride(0) % 8 == 0
    fd = _log_softmax_stats_and_output(x, with_output)
    chunk = dict(block_j=128) if persistent else dict(block_j=16)
    with Choices(block_k=1, align=8, aligned_rows=True, persistent=persistent, **chunk):
        for _ in range(2):
            check(fd, [x], n_launches=1, aligned_rows=True, align=8)


def _segment(x, with_output):
    from pyfuser.ir.concretize import bind

    fd = _log_softmax_stats_and_output(x, with_output)
    fd.execute([x])
    (plan,) = fd._runtime.plans.values()
    seg = fd._runtime.segment(bind(fd.ir, [x], None), plan.steps[0].outputs)
    return seg, seg.reductions()[0].inputs[0]


def test_the_mode_follows_the_bytes_streamed():
    x = _padded(9, 61, 3)
    seg, ref = _segment(x, with_output=False)
    assert seg.inputs_info[seg.loads()[0]]["rows_aligned"]
    assert strided_rows_dominate(seg, ref)  # a strided fp16 input, statistics out
    assert strided_rows_dominate(*_segment(x, with_output=True))  # 2 bytes in, 2 bytes out: a tie
    assert not strided_rows_dominate(*_segment(x.contiguous(), with_output=True))
    odd = _padded(9, 61, 2)  # stride 63: rows do not start aligned
    seg, ref = _segment(odd, with_output=False)
    assert not seg.inputs_info[seg.loads()[0]]["rows_aligned"] and not strided_rows_dominate(seg, ref)
