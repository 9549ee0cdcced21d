"""Row lengths that are a multiple of 8 (or 4, 2) elements but not of 16: rows of 1000
fp16 elements start 16-byte aligned, and the kernel says so (``J = J // 8 * 8``;
``schedulers.base.contiguous_multiple``) because Triton specializes integer
arguments on divisibility by 16 only.  Each tile that indexes rows by their length
is checked against the reference executor at widths with each multiple, and the
hint is checked to reach the compiled code (16-byte vector loads, offline sm_90)."""
from __future__ import annotations

import re

import pytest
import torch

from pyfuser.bench import training as T
from pyfuser.schedulers import Choices
from pyfuser.schedulers.base import contiguous_multiple

from .common import DataType, check, define_input, fusion, gen_for, make_tensor, need_ptxas, regcheck, sources_of

WIDTHS = {1000: 8, 1004: 4, 1002: 2, 1001: 1, 1024: 1}


def test_contiguous_multiple():
    assert {n: contiguous_multiple(n) for n in WIDTHS} == WIDTHS
    assert contiguous_multiple(24) == 8 and contiguous_multiple(48) == 1 and contiguous_multiple(7) == 1


def _hinted(fd, name, m):
    said = [bool(re.search(rf"^\s+{name} = {name} // {m} \* {m}$", s, re.M)) for s in sources_of(fd)]
    return all(said) if m > 1 else not any(re.search(r"// \d+ \* \d+$", s, re.M) for s in sources_of(fd))


@pytest.mark.parametrize("width", list(WIDTHS))
def test_inner_rows(width):
    """Softmax backward and a layer norm forward.  A persistent row narrower than its
    block has a constant length (``ReductionTile.constant_row``), which tells the
    compiler its multiples itself; a chunked row says them."""
    gen = gen_for("contig_inner", width)
    sizes = (6, width, T.BF)
    grad, y = (make_tensor((6, width), torch.bfloat16, gen) for _ in range(2))
    fd = fusion(lambda fd: T.build_softmax_backward(fd, sizes))
    check(fd, [grad, y], n_launches=1, scheduler="inner_normalization", contig_multiple=WIDTHS[width])
    [src] = sources_of(fd)
    constant = "\n    J: tl.constexpr," in src
    assert _hinted(fd, "J", 1 if constant else WIDTHS[width])
    assert constant == (width != 1024)  # the one row that fills its block
    with Choices(persistent=False, block_j=256):
        fd = fusion(lambda fd: T.build_softmax_backward(fd, sizes))
        check(fd, [grad, y], n_launches=1, persistent=False, contig_multiple=WIDTHS[width])
    assert _hinted(fd, "J", WIDTHS[width])
    x, w, b = (make_tensor(s, torch.float16, gen) for s in ((6, width), (width,), (width,)))
    fd = fusion(lambda fd: T.build_layer_norm(fd, (6, width, T.H)))
    check(fd, [x, w, b], n_launches=1, contig_multiple=WIDTHS[width])


@pytest.mark.parametrize("width", [1000, 1004, 1001])
def test_column_sums(width):
    """An outer reduction: the kept columns are the contiguous axis (K)."""
    x = make_tensor((40, width), torch.float16, gen_for("contig_outer", width))

    def build(fd):
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(define_input(fd, x), DataType.Float), dims=[0]),
                                  DataType.Half))
    fd = fusion(build)
    check(fd, [x], n_launches=1, scheduler="outer_reduction", contig_multiple=WIDTHS[width], atol_scale=40)
    assert _hinted(fd, "K", WIDTHS[width])


@pytest.mark.parametrize("width", [1000, 1002])
def test_inner_outer_rows(width):
    """Layer-norm backward in one kernel: rows and column sums of the same [R, width]
    (its row length stays a runtime size: a constant gained nothing there,
    ``ReductionTile.constant_row``)."""
    gen = gen_for("contig_inner_outer", width)
    sizes = (8, width, T.BF)
    inputs = T.layer_norm_backward_inputs(sizes, "cpu", gen)
    fd = fusion(lambda fd: T.build_layer_norm_backward(fd, sizes))
    check(fd, inputs, n_launches=1, scheduler="inner_outer", contig_multiple=WIDTHS[width], atol_scale=8)
    assert _hinted(fd, "J", WIDTHS[width])


@pytest.mark.parametrize("width", [1000, 1001])
def test_broadcast_tile_rows(width):
    """A pointwise tile of [BLOCK_K, BLOCK_J] rows: sin of a per-column angle shared
    by the rows."""
    gen = gen_for("contig_broadcast", width)
    x, theta = make_tensor((8, width), torch.float32, gen), make_tensor((width,), torch.float32, gen)

    def build(fd):
        tx, tt = define_input(fd, x), define_input(fd, theta)
        fd.add_output(fd.ops.mul(tx, fd.ops.broadcast_in_dim(fd.ops.sin(tt), shape=[8, width], broadcast_dims=[1])))
    fd = fusion(build)
    check(fd, [x, theta], n_launches=1, scheduler="pointwise", outer=(0,), contig_multiple=WIDTHS[width])
    assert _hinted(fd, "J", WIDTHS[width])


def test_the_hint_gives_16_byte_loads_on_sm90():
    """The held-out bench case softmax_backward_1000_bf16 at full size, planned with the
    CUDA heuristics on meta tensors and compiled offline: in chunks of 512, 16-byte
    vector loads with the hint, 2-byte loads without it; as the persistent row it
    runs (a constant length), 16-byte loads either way."""
    from pyfuser.runtime.spills import compiled_offline

    need_ptxas()
    rc = regcheck()
    case = rc.select("softmax_backward_1000_bf16")[0]
    sizes = case.sizes(1.0)

    def loads(**ov):
        with Choices(**ov):
            rt, b, plan = rc.plan_offline(case.define(sizes), rc.meta_inputs(case, sizes))
            [step] = plan.steps
            seg = rt.segment(b, step.outputs)
            p = step.scheduler.heuristics(seg)
            src, fn = rt.build(seg, step.scheduler, p, plan.signature)
            args, kw = rc.offline_args(src, step.scheduler, seg, p, b, rc.MetaEnv(b))
            ptx = compiled_offline(fn, args, kw).asm["ptx"]
            return p.contig_multiple, {re.search(r"(v\d\.)?b\d+$", ld).group(0)
                                       for ld in re.findall(r"ld\.global[\w.:]*", ptx)}

    chunks = dict(persistent=False, block_k=1, block_j=512)
    assert loads(**chunks) == (8, {"v4.b32"})
    assert loads(**chunks, contig_multiple=1) == (1, {"b16"})
    assert loads(contig_multiple=1) == (1, {"v4.b32"})
