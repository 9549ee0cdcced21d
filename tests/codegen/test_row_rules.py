"""Three rules of the inner reduction scheduler: persistent rows padded by a fifth or
more take half the warps (``reduction._padded_warps``), a misaligned row is peeled only
where its unpeeled loads would be narrower than 8 bytes (``reduction._peel_pays``),
and a persistent unpeeled row's row-sized loads ask L2 to keep their lines
(``ReductionTile.load_hint``).  The CUDA heuristics are checked on meta segments, the
hint in the generated source, and the kernels against the reference executor on CPU."""
from __future__ import annotations

import pytest
import torch

from pyfuser.bench import training as T
from pyfuser.bench.cases import build_softmax
from pyfuser.schedulers import INNER_NORMALIZATION, Choices
from pyfuser.schedulers.reduction import PADDED_ROW_SHARE, PAIRED_ROW_PEEL, _peel_pays

from .common import DataType, check, fusion, gen_for, make_tensor, sources_of
from .test_register_budget import cuda_segment

H, BF, F = DataType.Half, DataType.BFloat16, DataType.Float


def _softmax(R, W, dt, log=False):
    """The CUDA params of a softmax (or log-softmax) over [R, W] rows of ``dt``."""
    seg = cuda_segment(lambda fd: build_softmax(fd, (R, W, dt), log), [((R, W), dt.torch)])
    return INNER_NORMALIZATION.heuristics(seg)


def test_padded_persistent_rows_take_half_the_warps():
    assert PADDED_ROW_SHARE == 0.2
    # 257 of 512 lanes: half masked; 512 of 512: none.  Two rows per program either way.
    padded, full = _softmax(262144, 257, H, log=True), _softmax(262144, 512, H, log=True)
    assert (padded.block_k, padded.block_j) == (full.block_k, full.block_j) == (2, 512)
    assert (full.num_warps, padded.num_warps) == (2, 1)
    # 777 of 1024 lanes (24% masked) against 1024 of 1024.
    padded, full = _softmax(65536, 777, BF), _softmax(65536, 1024, BF)
    assert (full.num_warps, padded.num_warps) == (2, 1)
    # 900 of 1024 (12% masked) keeps the warps of a full row.
    assert _softmax(65536, 900, BF).num_warps == 2


def test_short_padded_rows_take_one_warp():
    """Padded rows whose tile holds at most 32 lanes per thread of one warp take one
    warp, which reduces them without a round trip through shared memory: ViT's
    attention softmax, rows of 197 in 256 lanes, 4 a program (2 warps before); a
    [R, 100] softmax, 8 rows of 128.  Unpadded rows keep their warps."""
    vit, full = _softmax(64 * 12 * 197, 197, BF), _softmax(64 * 12 * 197, 256, BF)
    assert (vit.block_k, vit.block_j, vit.num_warps) == (4, 256, 1)
    assert (full.block_k, full.num_warps) == (4, 4)
    short = _softmax(524288, 100, H)
    assert (short.block_k, short.block_j, short.num_warps) == (8, 128, 1)
    assert _softmax(524288, 128, H).num_warps == 4


@pytest.mark.parametrize("J,itemsize,peel", [
    (1028, 2, False), (3004, 2, False), (30524, 2, False),  # 16-bit, a multiple of 4: 8-byte loads unpeeled
    (1002, 4, False),  # fp32 pairs: 8 bytes
    (1538, 2, False), (PAIRED_ROW_PEEL - 2, 2, False),  # 16-bit pairs up to 4096
    (PAIRED_ROW_PEEL + 2, 2, True), (30522, 2, True),  # ... and beyond it
    (777, 2, True), (1001, 4, True), (7001, 2, True),  # single elements
])
def test_peel_pays(J, itemsize, peel):
    assert _peel_pays(J, itemsize) is peel


@pytest.mark.parametrize("W,dt,align", [(1028, H, 1), (1538, H, 1), (4098, H, 8), (30522, BF, 8),
                                        (777, BF, 8), (1001, F, 4), (1002, F, 1)])
def test_the_plan_peels_where_it_pays(W, dt, align):
    assert _softmax(8192, W, dt).align == align


@pytest.mark.parametrize("W", [1028, 1538])
def test_unpeeled_even_rows_match_the_reference(W):
    """Rows the peel rule now leaves unpeeled, loaded 4 or 2 elements at a time."""
    gen = gen_for(f"unpeeled_{W}")
    x = make_tensor((6, W), torch.float16, gen)
    fd = fusion(lambda fd: build_softmax(fd, (6, W, H), True))
    with Choices(persistent=True, block_k=1, block_j=2048, num_warps=2):
        check(fd, [x], n_launches=1, align=1)


def test_persistent_rows_keep_their_lines_in_l2():
    """The row-sized loads of a persistent unpeeled row carry ``evict_last``; the
    weight and bias (one row for all) do not, nor do a peeled row's loads."""
    gen = gen_for("rows_evict_last")
    rows, W = 5, 256
    x, w, b = (make_tensor(s, torch.float16, gen) for s in ((rows, W), (W,), (W,)))
    fd = fusion(lambda fd: T.build_layer_norm(fd, (rows, W, H)))
    with Choices(persistent=True, block_k=2, block_j=W, num_warps=2):
        check(fd, [x, w, b], n_launches=1, persistent=True)
    [src] = sources_of(fd)
    loads = [line.strip() for line in src.splitlines() if "tl.load(" in line]
    row = [ld for ld in loads if "(k * J + j)" in ld]
    per_column = [ld for ld in loads if "+ j," in ld and "k *" not in ld]
    assert row and per_column, loads
    assert all("eviction_policy='evict_last'" in ld for ld in row), row
    assert not any("eviction_policy" in ld for ld in per_column), per_column

    W = 101  # odd: peeled
    x, w, b = (make_tensor(s, torch.float16, gen) for s in ((rows, W), (W,), (W,)))
    fd = fusion(lambda fd: T.build_layer_norm(fd, (rows, W, H)))
    with Choices(persistent=True, block_k=1, block_j=128, num_warps=2):
        check(fd, [x, w, b], n_launches=1, align=8)
    [src] = sources_of(fd)
    assert "eviction_policy" not in src
