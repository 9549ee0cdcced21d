"""Register budgets of the CUDA heuristics, checked on CPU: the outer-reduction tile's
arithmetic, the spill fallbacks, reading ptxas's report, and one offline sm_90 compile
(``spills.offline_usage``, the machinery of benchmarks/regcheck.py)."""
from __future__ import annotations

import pytest
import torch

from pyfuser.bench import training as T
from pyfuser.ir.concretize import bind
from pyfuser.runtime import spills
from pyfuser.schedulers import Segment, OUTER_REDUCTION, Choices, pointwise
from pyfuser.schedulers.reduction import OUTER_VALUES_PER_THREAD, outer_values, reduction_fallbacks

from .common import DataType, fusion, need_ptxas, regcheck

BF = DataType.BFloat16


def cuda_segment(build, shapes_dtypes):
    """The segment of every output of ``build``, as the CUDA heuristics see it, from
    meta tensors (sizes only, nothing allocated)."""
    fd = fusion(build)
    inputs = [torch.empty(s, dtype=d, device="meta") for s, d in shapes_dtypes]
    b = bind(fd.ir, inputs)
    info = {v: {"contiguous": True} for v in fd.ir.inputs}
    return Segment(list(fd.ir.outputs), b.shapes, info, "cuda")


def column_sums(n_products):
    """dy, x [R, N] bf16, mean, rstd [R] fp32 -> the first ``n_products`` of layer norm
    backward's column sums: dw = sum(dy * xhat), db = sum(dy)."""
    def build(fd):
        R, N = 16384, 1024
        dy, x = T.tensor(fd, 2, BF), T.tensor(fd, 2, BF)
        mean, rstd = T.tensor(fd, 1), T.tensor(fd, 1)
        dyf = fd.ops.cast(dy, DataType.Float)
        xhat = fd.ops.mul(fd.ops.sub(fd.ops.cast(x, DataType.Float), T.bcast_rows(fd, mean, (R, N))),
                          T.bcast_rows(fd, rstd, (R, N)))
        outs = [fd.ops.sum(fd.ops.mul(dyf, xhat), dims=[0]), fd.ops.sum(dyf, dims=[0])]
        for o in outs[:n_products]:
            fd.add_output(fd.ops.cast(o, BF))
    return cuda_segment(build, [((16384, 1024), torch.bfloat16)] * 2 + [((16384,), torch.float32)] * 2)


def bias_grad(shape=(16384, 4096)):
    def build(fd):
        x = T.tensor(fd, 2, DataType.Half)
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[0]), DataType.Half))
    return cuda_segment(build, [(shape, torch.float16)])


def per_thread(p):
    return p.block_k * p.block_j // (32 * p.num_warps)


def test_outer_tile_fits_the_register_budget():
    """Layer-norm backward's dw and db stream dy and x and keep two accumulators: 4
    values per element, so the 64-byte strip of 32 bf16 columns walks 32 rows at a
    time with 2 warps (16 elements per thread).  RMS norm's dw (3 values) fits 64 rows;
    the bias gradient (one tensor, one accumulator) takes 64 rows of 32 columns, and
    widens to 64 columns (32 rows, 128 bytes of a row) while 64 strips x split 16
    still make 1024 programs, its chunk loop pipelined 3 deep.  A hidden size of 768
    keeps 32-column strips (24 x 16 = 384 programs)."""
    seg = column_sums(2)
    assert outer_values(seg, seg.reductions()[0].inputs[0]) == 4
    p = OUTER_REDUCTION.heuristics(seg)
    assert (p.block_k, p.block_j, p.num_warps, p.persistent) == (32, 32, 2, False)
    assert per_thread(p) * 4 <= OUTER_VALUES_PER_THREAD

    seg = column_sums(1)  # RMS norm backward's dw: dy, x and one accumulator
    assert outer_values(seg, seg.reductions()[0].inputs[0]) == 3
    assert (OUTER_REDUCTION.heuristics(seg).block_j, OUTER_REDUCTION.heuristics(seg).num_warps) == (64, 2)

    seg = bias_grad()
    assert outer_values(seg, seg.reductions()[0].inputs[0]) == 2
    p = OUTER_REDUCTION.heuristics(seg)
    assert (p.block_k, p.block_j, p.num_warps, p.split, p.stages) == (64, 32, 2, 16, 3)
    assert per_thread(p) * 2 <= OUTER_VALUES_PER_THREAD

    p = OUTER_REDUCTION.heuristics(bias_grad((8192, 768)))
    assert (p.block_k, p.block_j, p.split) == (32, 64, 16)


@pytest.mark.parametrize("shape", [(8192, 768), (16384, 4096)])
def test_outer_split_halves_only_for_sums_alone(shape):
    """A kernel storing only its column sums splits at most 16 ways; one that also
    writes a tensor per element (BERT's bias gradients with the gradient itself: a
    copy of it, GELU's backward) keeps up to 32 (``reduction.MAX_SPLIT_SUMS_ONLY``)."""
    def build(fd):
        x = T.tensor(fd, 2, DataType.Half)
        fd.add_output(fd.ops.set(x))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[0]), DataType.Half))
    with_copy = OUTER_REDUCTION.heuristics(cuda_segment(build, [(shape, torch.float16)]))
    alone = OUTER_REDUCTION.heuristics(bias_grad(shape))
    assert (alone.split, with_copy.split) == (16, 32)


def _many_column_sums(n_tensors, n_sums, n_max):
    def build(fd):
        ts = [T.tensor(fd, 2) for _ in range(n_tensors)]
        for i in range(n_sums):
            fd.add_output(fd.ops.sum(fd.ops.mul(ts[i % n_tensors], ts[(i + 1) % n_tensors]), dims=[0]))
        for i in range(n_max):
            fd.add_output(fd.ops.max(fd.ops.add(ts[i % n_tensors], ts[(i + 2) % n_tensors]), dims=[0]))
    return cuda_segment(build, [((8192, 2048), torch.float32)] * n_tensors)


@pytest.mark.parametrize("n_tensors,n_sums,values,warps,block_k", [(4, 4, 12, 2, 32), (8, 8, 20, 2, 16),
                                                                   (8, 16, 28, 4, 16)])
def test_outer_tile_shrinks_its_rows_before_adding_warps(n_tensors, n_sums, values, warps, block_k):
    """fp32 column sums of products and four column maxima: 12 values per element
    (4 tensors, 8 accumulators) and 20 shrink the chunk of rows to 16 at 2 warps (12
    values widen the strip to 128 bytes); 28 values need 4 warps even at 16 rows."""
    seg = _many_column_sums(n_tensors, n_sums, 4)
    assert outer_values(seg, seg.reductions()[0].inputs[0]) == values
    p = OUTER_REDUCTION.heuristics(seg)
    assert (p.num_warps, p.block_k, p.block_j) == (warps, block_k, 16)
    assert per_thread(p) * values <= OUTER_VALUES_PER_THREAD


def test_outer_fallbacks_halve_the_rows():
    seg = column_sums(2)
    p = OUTER_REDUCTION.heuristics(seg)
    fb = reduction_fallbacks(seg, p)
    assert [q.block_j for q in fb] == [16, 8]
    assert all((q.block_k, q.num_warps, q.persistent) == (32, 2, False) for q in fb)
    assert per_thread(fb[-1]) >= 4


def test_pointwise_fallbacks_halve_the_elements_per_thread_on_4_warps():
    """RoPE on a flat tile: bf16 x, fp32 angles: 8 then 4 elements per thread (a
    16-byte fp32 access) on 4 warps; its 16 per thread have a register budget, 8 have
    none."""
    def build(fd):
        T.build_rope(fd, (16384, 8, 128, BF))
    seg = cuda_segment(build, [((16384, 8, 128), torch.bfloat16), ((16384, 64), torch.float32)])
    with Choices(outer=()):
        p = pointwise.heuristics(seg)
    assert (p.block, p.num_warps) == (2048, 4)
    fb = pointwise.fallbacks(seg, p)
    assert [(q.block, q.num_warps) for q in fb] == [(1024, 4), (512, 4)]
    assert pointwise.max_registers(seg, p) == pointwise.MAX_REGISTERS_WIDE
    assert pointwise.max_registers(seg, fb[0]) is None

    def build16(fd):
        fd.add_output(fd.ops.neg(T.tensor(fd, 2, BF)))
    seg = cuda_segment(build16, [((16384, 4096), torch.bfloat16)])
    assert [q.block for q in pointwise.fallbacks(seg, pointwise.heuristics(seg))] == [1024]  # 8 bf16 = 16 bytes


def test_rope_walks_a_broadcast_tile_without_a_register_budget():
    """RoPE's cos and sin are shared by the 8 heads: the heads go on the tile's k axis
    (8 rows of 256), and the tile keeps only the spill check."""
    def build(fd):
        T.build_rope(fd, (16384, 8, 128, BF))
    seg = cuda_segment(build, [((16384, 8, 128), torch.bfloat16), ((16384, 64), torch.float32)])
    p = pointwise.heuristics(seg)
    assert (p.outer, p.block_outer, p.block, p.num_warps) == ((1,), 8, 2048, 4)
    assert pointwise.grid(seg, p) == (16384 * 128 // 256, 1)
    assert pointwise.max_registers(seg, p) is None
    assert [(q.block, q.block_outer) for q in pointwise.fallbacks(seg, p)] == [(1024, 8), (512, 8)]


@pytest.mark.parametrize("rows, length, want", [
    (8192, 50257, (1, 1024)),  # GPT-2's loss backward: one row of 1024 a program
    (8192, 2048, (1, 1024)),
    (8192, 768, (8, 2048)),  # short rows: 8 rows of 256
    (100_000, 4096, (8, 2048)),  # more rows than the grid's k axis holds: 8 rows of 256
])
def test_a_row_tile_over_long_rows_takes_one_row_a_program(rows, length, want):
    """A row tile (here the cross-entropy backward's exp(x - lse)): rows at least a
    broadcast block long take one row of 1024 a program, since every thread holding a
    row's elements computes that row's values, unless the grid's k axis cannot hold
    one program a row."""
    def build(fd):
        lg, lse = T.tensor(fd, 2, BF), T.tensor(fd, 1)
        diff = fd.ops.sub(fd.ops.cast(lg, DataType.Float), T.bcast_rows(fd, lse, (rows, length)))
        fd.add_output(fd.ops.cast(fd.ops.exp(diff), BF))
    seg = cuda_segment(build, [((rows, length), torch.bfloat16), ((rows,), torch.float32)])
    p = pointwise.heuristics(seg)
    assert (p.outer, p.block_outer, p.block) == ((0,), *want)
    assert pointwise.grid(seg, p)[1] <= seg.model.max_grid_y


def test_a_candidate_over_its_register_budget_is_rejected():
    """RoPE (flat tile) at 16 elements per thread compiled to 128 registers on sm_90 (no spills):
    over the pointwise budget, so the walk moves to 8 per thread; bias + GELU's 40
    stays.  Spills reject whatever the budget."""
    def build(fd):
        T.build_rope(fd, (16384, 8, 128, BF))
    seg = cuda_segment(build, [((16384, 8, 128), torch.bfloat16), ((16384, 64), torch.float32)])
    with Choices(outer=()):
        p = pointwise.heuristics(seg)
    assert spills.rejection(pointwise, seg, p, 128, 0).code == "register_budget"
    assert spills.rejection(pointwise, seg, p, 40, 0) is None
    assert spills.rejection(pointwise, seg, p, None, 0) is None  # unknown: accepted
    fb = pointwise.fallbacks(seg, p)[0]
    assert spills.rejection(pointwise, seg, fb, 128, 0) is None
    assert spills.rejection(pointwise, seg, fb, 40, 2).code == "spills"
    walk = {p: spills.rejection(pointwise, seg, p, 128, 0), fb: spills.rejection(pointwise, seg, fb, 38, 0)}
    assert spills.first_fit([p, fb, pointwise.fallbacks(seg, p)[1]], walk.get) == fb


def test_first_fit_walks_past_spilling_candidates():
    counts = {"a": 3, "b": None, "c": 0, "d": 5}
    heard = []
    assert spills.first_fit(list("abcd"), counts.get, lambda p, n: heard.append((p, n))) == "b"  # None: unknown
    assert heard == [("a", 3)]
    assert spills.first_fit(list("ad"), counts.get) == "d"  # the last one is not checked
    assert spills.first_fit(["a"], counts.get) == "a"


def test_ptxas_log_separates_spills_from_local_arrays():
    """RoPE on the H200 reported 8 spills: its stack frame, libdevice's sin/cos table."""
    log = ("ptxas info    : Function properties for k\n"
           "    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 128 registers, used 0 barriers, 32 bytes cumulative stack size\n")
    assert spills.parse_ptxas_log(log) == spills.Usage(regs=128, spills=0, local=8)
    log = log.replace("32 bytes stack frame, 0 bytes spill stores", "8 bytes stack frame, 4 bytes spill stores")
    assert spills.parse_ptxas_log(log) == spills.Usage(regs=128, spills=1, local=2)


def test_offline_compile_of_a_bench_case():
    """benchmarks/regcheck.py on the bias gradient at full size: planned with the CUDA
    heuristics on meta tensors and compiled for sm_90 with Triton's ptxas."""
    need_ptxas()
    rc = regcheck()
    [row] = rc.check_case(rc.select("bias_grad")[0], log=lambda s: None)
    assert row["scheduler"] == "outer_reduction" and row["path"] == "fast"
    usage = dict(row["tried"])[row["chosen"]]
    assert 0 < usage.regs <= 96 and usage.spills == 0 and usage.local == 0
    assert "| bias_grad_sum_dim0_fp16 |" in rc.table([row])


def test_cos_has_local_memory_but_no_spills():
    """What the driver calls 8 spills in any kernel using cos is a local array."""
    need_ptxas()
    rc = regcheck()

    def build(fd):
        fd.add_output(fd.ops.cos(T.tensor(fd, 1)))
    fd = fusion(build)
    rt, b, plan = rc.plan_offline(fd, [torch.empty(1 << 22, device="meta")])
    [step] = plan.steps
    seg = rt.segment(b, step.outputs)
    p = step.scheduler.heuristics(seg)
    src, fn = rt.build(seg, step.scheduler, p, plan.signature)
    args, kw = rc.offline_args(src, step.scheduler, seg, p, b, rc.MetaEnv(b))
    usage = spills.offline_usage(fn, args, kw)
    assert usage.spills == 0 and usage.local > 0


def _row_segment(compare: bool, V: int = 1001, rows: int = 64):
    import torch

    from pyfuser import DataType, FusionDefinition
    from pyfuser.ir.concretize import bind
    from pyfuser.schedulers.base import Segment

    # V = 1001: rows of fp16 that do not start on 16-byte boundaries
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        t = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Int)
        xf = fd.ops.cast(x, DataType.Float)
        if compare:
            iota = fd.ops.broadcast_in_dim(fd.ops.iota(V, 0, 1, dtype=DataType.Int), shape=[1, V], broadcast_dims=[1])
            xf = fd.ops.where(fd.ops.eq(iota, t), fd.ops.neg(xf), xf)
        fd.add_output(fd.ops.cast(fd.ops.sub(xf, fd.ops.sum(xf, dims=[1], keepdim=True)), DataType.Half))
    b = bind(fd.ir, [torch.empty(rows, V, dtype=torch.half, device="meta"),
                     torch.empty(rows, 1, dtype=torch.int64, device="meta")])
    return Segment(list(fd.ir.outputs), b.shapes, {v: {"contiguous": True} for v in fd.ir.inputs}, "cuda")


def test_rows_compared_as_integers_are_not_peeled():
    """A peeled row with an integer comparison along it takes Triton minutes to compile
    (see reduction.row_alignment); plain misaligned rows are still peeled."""
    from pyfuser.schedulers import INNER_NORMALIZATION

    assert INNER_NORMALIZATION.heuristics(_row_segment(False)).align == 8
    assert INNER_NORMALIZATION.heuristics(_row_segment(True)).align == 1
    # Past 8192 the row is walked in chunks, and those are peeled (they compile in 1 s).
    wide = INNER_NORMALIZATION.heuristics(_row_segment(True, V=30522, rows=8192))
    assert (wide.persistent, wide.block_j, wide.align) == (False, 8192, 8)


def _log_softmax_segment(R, V, dt, outs):
    """log-softmax of [R, V] ``dt`` rows; ``outs``: the stored dtypes of the result, or
    "stats" for log(sum(exp(x - max))) only."""
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
        xf = fd.ops.cast(x, DataType.Float)
        sh = fd.ops.sub(xf, fd.ops.max(xf, dims=[1], keepdim=True))
        lse = fd.ops.log(fd.ops.sum(fd.ops.exp(sh), dims=[1], keepdim=True))
        if outs == "stats":  # what the planner computes for the report's logsum (its [R, 1] source)
            return fd.add_output(lse)
        y = fd.ops.sub(sh, lse)
        for o in outs:
            fd.add_output(y if o is DataType.Float else fd.ops.cast(y, o))
    return build


@pytest.mark.parametrize("what,want", [
    # statistics only: online chunks of 2048 on 4 warps (147 us against 293 persistent)
    (([8192, 30522], DataType.Half, "stats"), (False, 2048, 4, True)),
    # bf16 -> bf16: stores no more than it loads twice over: online chunks
    (([8192, 30522], BF, [BF]), (False, 8192, 16, True)),
    # fp16 -> fp16 and fp32: stores 3x what it loads: the persistent row
    (([8192, 30522], DataType.Half, [DataType.Half, DataType.Float]), (True, 32768, 32, False)),
    # too wide to hold: online chunks
    (([8192, 50257], BF, [BF]), (False, 8192, 16, True)),
    # short rows: persistent, several per program
    (([65536, 1024], BF, [BF]), (True, 1024, 2, False)),
], ids=["stats", "bf16", "fp16+fp32", "50257", "1024"])
def test_wide_rows_take_the_measured_tile(what, want):
    """``reduction._wide_row_params``: which rows are chunked with the online pass."""
    from pyfuser.schedulers import INNER_NORMALIZATION, INNER_REDUCTION

    shape, dt, outs = what
    seg = cuda_segment(_log_softmax_segment(*shape, dt, outs), [(shape, dt.torch)])
    sched = INNER_REDUCTION if outs == "stats" else INNER_NORMALIZATION
    p = sched.heuristics(seg)
    # Peeled rows of 16384-32768 walked with the next loaded ahead (test_prefetch_rows)
    # replace the tile measured here, which is their fallback.
    assert p.prefetch == (outs != "stats" and shape[1] == 30522)
    if p.prefetch:
        p = next(q for q in sched.fallbacks(seg, p) if not q.prefetch)
    assert (p.persistent, p.block_j, p.num_warps, p.online) == want


def test_outer_chunks_of_many_tensors_are_not_pipelined():
    """The pipeline holds chunks of every load in shared memory: six streamed tensors
    (7.5 KB a chunk of 32 x 16; a tile like the position-embedding gradient's held 38
    KB per program at 3 stages, offline sm_90) keep a plain loop; the bias gradient's
    one tensor (4 KB) is pipelined."""
    def build(fd):
        ts = [T.tensor(fd, 3, dt) for dt in (DataType.Half,) * 3 + (DataType.Float,) * 2 + (DataType.Bool,)]
        acc = fd.ops.cast(ts[0], DataType.Float)
        for t in ts[1:]:
            acc = fd.ops.add(acc, fd.ops.cast(t, DataType.Float))
        fd.add_output(fd.ops.sum(acc, dims=[0], keepdim=True))
    seg = cuda_segment(build, [((64, 128, 768), d) for d in (torch.half,) * 3 + (torch.float,) * 2 + (torch.bool,)])
    p = OUTER_REDUCTION.heuristics(seg)
    assert not p.persistent and p.stages == 1
    assert OUTER_REDUCTION.heuristics(bias_grad()).stages == 3
