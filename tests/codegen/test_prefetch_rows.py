"""Rows walked by one program per SM with the next row's body loaded ahead
(``PrefetchRows``, ``codegen.tiles.rows`` docstring).  The kernels are checked
against the reference executor on CPU (more rows than programs, so programs walk
several rows, and fewer); the CUDA heuristics and the registers of the chosen kernels
offline on the bench cases (meta tensors, Triton's ptxas for sm_90)."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from pyfuser.bench import seeds, training as T
from pyfuser.bench.cases import build_softmax
from pyfuser.errors import Unsupported
from pyfuser.codegen.tiles.reduction import ReductionTile
from pyfuser.schedulers import Choices
from pyfuser.schedulers.device_model import current_model

from .common import DataType, check, fusion, gen_for, make_tensor, need_ptxas, regcheck

# J = 101 is odd: rows start misaligned and are peeled (``reduction._peel_pays``), as the tile needs.
PREFETCH = dict(prefetch=True, persistent=True, block_k=1, block_j=128, num_warps=4, online=False,
                out_reversed=False)


@pytest.fixture(scope="module")
def rc():
    return regcheck()


@pytest.mark.parametrize("rows", [current_model().sms * 2 + 5, 3])
def test_log_softmax_rows_match_the_reference(rows):
    gen = gen_for(f"prefetch_{rows}")
    x = make_tensor((rows, 101), torch.float16, gen)
    fd = fusion(lambda fd: seeds.build_log_softmax_full(fd, rows, 1, 101))
    with Choices(**PREFETCH):
        check(fd, [x], n_launches=1, prefetch=True, align=8)
    fd = fusion(lambda fd: seeds.build_log_softmax_sub(fd, rows, 101))
    with Choices(**PREFETCH):
        check(fd, [x], n_launches=1, prefetch=True)


def test_nan_and_inf_rows_match_the_reference():
    gen = gen_for("prefetch_special")
    x = make_tensor((current_model().sms + 3, 101), torch.float16, gen, special=True)
    fd = fusion(lambda fd: seeds.build_log_softmax_sub(fd, current_model().sms + 3, 101))
    with Choices(**PREFETCH):
        check(fd, [x], n_launches=1, prefetch=True)


def test_softmax_and_layer_norm_rows_match_the_reference():
    """A bf16 softmax (its output pass recomputes the exponentials) and a layer norm
    (kept mean and rstd, weights loaded per row, not carried)."""
    gen = gen_for("prefetch_norms")
    rows = current_model().sms + 7
    y = make_tensor((rows, 101), torch.bfloat16, gen)
    fd = fusion(lambda fd: build_softmax(fd, (rows, 101, T.BF), False))
    with Choices(**PREFETCH):
        check(fd, [y], n_launches=1, prefetch=True)
    x, w, b = (make_tensor(s, torch.float16, gen) for s in ((rows, 101), (101,), (101,)))
    fd = fusion(lambda fd: T.build_layer_norm(fd, (rows, 101, T.H)))
    with Choices(**PREFETCH):
        check(fd, [x, w, b], n_launches=1, prefetch=True)


def test_the_kernel_walks_rows_and_carries_the_body():
    from pyfuser.schedulers import reduction as RD

    gen = gen_for("prefetch_src")
    x = make_tensor((5, 101), torch.float16, gen)
    fd = fusion(lambda fd: seeds.build_log_softmax_sub(fd, 5, 101))
    seen = []
    real = RD.emit_kernel

    def spy(*a, **kw):
        src = real(*a, **kw)
        seen.append(src.source)
        return src

    RD.emit_kernel = spy
    try:
        with Choices(**PREFETCH):
            check(fd, [x], n_launches=1, prefetch=True)
    finally:
        RD.emit_kernel = real
    [src] = seen
    assert "for r in range(pid, K, G):" in src
    # the head and tail, then the body, each carried into the next iteration
    assert "nc0 = tl.load(T0_ptr + le_n, mask=mask_e_n)" in src and "c0 = nc0" in src
    assert "nc1 = tl.load(T0_ptr + lb_n, mask=mask_b_n)" in src and "c1 = nc1" in src
    assert "tl.load(T0_ptr + le, mask=mask_e)" in src.split("for r in")[0]  # the first row, before the loop
    assert "tl.load(T0_ptr + le," not in src.split("for r in")[1]  # nothing of this row loaded in the loop
    assert "inline_asm" not in src  # the interpreter cannot run PTX


def test_only_a_peeled_persistent_row_prefetches():
    fd = fusion(lambda fd: seeds.build_log_softmax_sub(fd, 4, 96))  # rows aligned: nothing peeled
    with pytest.raises(Unsupported) as err:
        ReductionTile(fd.ir.outputs[0], (1,), True, True, 1, 128, False, align=1, prefetch=True)
    assert err.value.code == "prefetch_tile"


def _cuda_plan(rc, name):
    case = rc.select(name)[0]
    sizes = case.sizes(1.0)
    rt, b, plan = rc.plan_offline(case.define(sizes), rc.meta_inputs(case, sizes))
    [step] = plan.steps
    seg = rt.segment(b, step.outputs)
    return step.scheduler, seg, step.scheduler.heuristics(seg)


@pytest.mark.parametrize("name,prefetch", [
    ("log_softmax_full", True), ("log_softmax_sub", True), ("softmax_30522_bf16", True),
    ("log_softmax_backward_bf16", False),  # dy and y: two rows of 4 bytes an element do not fit
    ("log_softmax_50257_bf16", False),  # wider than 32768
    ("log_softmax_32000_bf16", False),  # rows start aligned: nothing peeled
    ("softmax_12000_fp16", False),
])
def test_cuda_heuristics(rc, name, prefetch):
    sched, seg, p = _cuda_plan(rc, name)
    assert p.prefetch is prefetch, p
    if prefetch:
        fp16 = "bf16" not in name  # a bf16 row is not widened again (tiles.rows._WIDEN)
        assert (p.persistent, p.block_k, p.block_j, p.num_warps, p.rewiden) == (True, 1, 32768, 16, int(fp16))
        forms = sched.fallbacks(seg, p)
        if fp16:  # the sum pass widening for itself too, then no pass
            assert forms[:2] == [replace(p, rewiden=2), replace(p, rewiden=0)]
            forms = forms[2:]
        assert not forms[0].prefetch and forms[0].align == p.align


def test_bf16_rows_are_not_widened_again():
    """Even when asked to (an override), a carried bf16 row is read as it is in the
    output pass: cvt.f32.bf16 measured slower than reusing the fp32 row."""
    from pyfuser.schedulers import INNER_NORMALIZATION
    from .test_register_budget import cuda_segment

    def build(fd):
        x = T.tensor(fd, 2, T.BF)
        xf = fd.ops.cast(x, DataType.Float)
        d = fd.ops.sub(xf, T.bcast_rows(fd, fd.ops.max(xf, dims=[1]), (6144, 30001)))
        y = fd.ops.sub(d, T.bcast_rows(fd, fd.ops.log(fd.ops.sum(fd.ops.exp(d), dims=[1])), (6144, 30001)))
        fd.add_output(fd.ops.cast(y, T.BF))
    seg = cuda_segment(build, [((6144, 30001), torch.bfloat16)])
    p = INNER_NORMALIZATION.heuristics(seg)
    assert p.prefetch and p.rewiden == 0
    src = INNER_NORMALIZATION.emit(seg, replace(p, rewiden=2), "k").source
    assert "c1 = nc1" in src and "inline_asm" not in src
    fp16 = cuda_segment(lambda fd: seeds.build_log_softmax_sub(fd, 4096, 32767), [((4096, 32767), torch.float16)])
    p = INNER_NORMALIZATION.heuristics(fp16)
    assert p.prefetch and p.rewiden == 1
    # three passes (max, sum, output): the last ``rewiden`` widen for themselves, one PTX text each
    for k, tags in ((0, []), (1, [2]), (2, [1, 2]), (3, [1, 2])):
        src = INNER_NORMALIZATION.emit(fp16, replace(p, rewiden=k), "k").source
        assert sorted({int(t) for t in re.findall(r'"cvt\.f32\.f16 \$0, \$1;  // pass (\d)"', src)}) == tags, k


def test_the_spill_check_picks_the_form(rc):
    """Offline sm_90, as measured on the H200 (``reduction.prefetch_pays``): the
    log-softmax to fp32 (libdevice's expf, for its fp32 output) and the log-softmax to
    fp16 + fp32 fit with their sum and output passes widening the row for themselves,
    the bf16 softmax with every pass reusing the first one's fp32 row."""
    need_ptxas()
    names = ("log_softmax_full", "log_softmax_sub", "softmax_30522_bf16")
    rows = {r["case"]: r for n in names for r in rc.check_case(rc.select(n)[0], log=lambda *a: None)}
    chosen = {n: rows[n]["chosen"] for n in names}
    assert chosen["log_softmax_sub"].prefetch and chosen["log_softmax_sub"].rewiden == 2
    assert chosen["log_softmax_full"].prefetch and chosen["log_softmax_full"].rewiden == 2
    assert chosen["softmax_30522_bf16"].prefetch and chosen["softmax_30522_bf16"].rewiden == 0
    for n in names:
        assert dict(rows[n]["tried"])[chosen[n]].spills == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: compiled kernels only (inline PTX, bf16 max)")
@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_compiled_rows_match_the_reference(dt):
    """On the GPU: the output pass's inline-PTX widening, on rows of 20001 that pad to
    32768."""
    gen = gen_for("prefetch_gpu")
    rows = current_model().sms * 2 + 3
    x = make_tensor((rows, 20001), dt, gen).cuda()
    tdt = T.H if dt is torch.float16 else T.BF
    for build in (lambda fd: build_softmax(fd, (rows, 20001, tdt), False),
                  lambda fd: build_softmax(fd, (rows, 20001, tdt), True)):
        fd = fusion(build)
        with Choices(**dict(PREFETCH, block_j=32768, num_warps=16)):
            check(fd, [x], n_launches=1, prefetch=True)
