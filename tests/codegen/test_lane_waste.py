"""Rows whose padding would leave more than a quarter of the tile's lanes masked
(``reduction.MAX_LANE_WASTE``): a 16- or 32-warp persistent row becomes chunks of
1024 on 2 warps, a wide row's chunk is halved until it fits.  The CUDA heuristics are
checked on the bench cases planned offline (meta tensors), the chunked kernels against
the reference executor on CPU."""
from __future__ import annotations

import pytest
import torch

from pyfuser.bench import training as T
from pyfuser.schedulers import Choices
from pyfuser.schedulers.reduction import MAX_LANE_WASTE, _fit_chunks

from .common import check, fusion, gen_for, make_tensor, regcheck

@pytest.fixture(scope="module")
def rc():
    return regcheck()


def _cuda_params(rc, name):
    case = rc.select(name)[0]
    assert case.name == name
    sizes = case.sizes(1.0)
    rt, b, plan = rc.plan_offline(case.define(sizes), rc.meta_inputs(case, sizes))
    [step] = plan.steps
    seg = rt.segment(b, step.outputs)
    p = step.scheduler.heuristics(seg)
    # Rows walked with the next one loaded ahead are test_prefetch_rows' business: here
    # the tile they replace, which the lane-waste rule shapes.
    return next(q for q in step.scheduler.fallbacks(seg, p) if not q.prefetch) if p.prefetch else p


def test_fit_chunks():
    assert MAX_LANE_WASTE == 0.25
    assert _fit_chunks(12000, 8192, 16) == (4096, 8)  # 16384 lanes for 12000: 27% masked
    assert _fit_chunks(50257, 16384, 16) == (16384, 16)  # 65536 for 50257: 23%, measured best as it is
    assert _fit_chunks(30522, 8192, 16) == (8192, 16)
    assert _fit_chunks(2100, 2048, 4) == (2048, 4)  # never below 2048


@pytest.mark.parametrize("name,persistent,block_j,warps,online", [
    ("layer_norm_5120_bf16", False, 1024, 2, False),  # 8192 lanes for 5120: chunks
    ("softmax_12000_fp16", False, 4096, 8, True),  # wide: chunks of 8192 halved
    ("rms_norm_8192_bf16", True, 8192, 16, False),  # no padding: stays persistent
    ("layer_norm_4096_fp16", True, 4096, 8, False),
    ("softmax_30522_bf16", False, 8192, 16, True),  # 7% masked: as measured best
    ("log_softmax_sub", False, 16384, 16, True),
    ("log_softmax_full", True, 32768, 32, False),
])
def test_cuda_heuristics(rc, name, persistent, block_j, warps, online):
    p = _cuda_params(rc, name)
    assert (p.persistent, p.block_j, p.num_warps, p.online) == (persistent, block_j, warps, online), p


def test_chunked_rows_match_the_reference():
    """The two chunked forms on CPU: a layer norm's two passes over 1024-wide chunks of
    5120, and a softmax's online pass over 4096-wide chunks of 12000."""
    gen = gen_for("lane_waste")
    x, w, b = (make_tensor(s, torch.bfloat16, gen) for s in ((4, 5120), (5120,), (5120,)))
    fd = fusion(lambda fd: T.build_layer_norm(fd, (4, 5120, T.BF)))
    with Choices(persistent=False, block_j=1024, num_warps=2):
        check(fd, [x, w, b], n_launches=1, persistent=False, block_j=1024)
    from pyfuser.bench.cases import build_softmax

    y = make_tensor((3, 12000), torch.float16, gen)
    fd = fusion(lambda fd: build_softmax(fd, (3, 12000, T.H), False))
    with Choices(persistent=False, block_j=4096, num_warps=8, online=True):
        check(fd, [y], n_launches=1, persistent=False, block_j=4096, online=True)
