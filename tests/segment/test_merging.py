"""The segmenter's refinements after ``split``: greedy merging of kernel steps (fewer
launches, fewer stored intermediates, never a cycle) and 16-bit storage of upcasts
one kernel stores for another.  Each fusion is checked against the reference
executor or torch, and its launch count against the plan without merging."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings

import pyfuser
from pyfuser import DataType, FusionDefinition
from pyfuser.ir.concretize import bind
from pyfuser.ir.values import TensorVal
from pyfuser.runtime import dump
from pyfuser.runtime.plan import ExecutorCache
from pyfuser.segment import refine as refine_mod
from pyfuser.segment.aliases import broadcast_chain
from pyfuser.segment.split import split
from pyfuser.segment.steps import Plan, step_reads

from ..helpers import without_scheduler
from .fuzz_fusions import build, check, fusions


@pytest.fixture(autouse=True)
def _two_kernel_plans(request):
    """Merging is about plans of several kernels: the row-and-column fusions below run as
    an inner normalization and an outer reduction, as they do where the inner-outer
    tile declines (a column max, a row too wide).  ``test_row_and_column_sums_are_one_
    kernel_with_the_inner_outer_tile`` plans them with it."""
    if request.node.originalname == "test_row_and_column_sums_are_one_kernel_with_the_inner_outer_tile":
        yield
        return
    with without_scheduler("inner_outer"):
        yield

FL = DataType.Float
N, H, K = 6, 16, 5


def tensor(fd, rank, dtype=FL):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def rows(fd, t, shape=(N, H)):  # [N] -> shape
    return fd.ops.broadcast_in_dim(t, shape=list(shape), broadcast_dims=[0])


def cols(fd, t):  # [H] -> [N, H]
    return fd.ops.broadcast_in_dim(t, shape=[N, H], broadcast_dims=[1])


def data(*shapes, dt=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dt) for s in shapes]


def last_plan(fd) -> Plan:
    return list(fd._runtime.plans.values())[-1]


def kinds(fd):
    return [s.scheduler.NAME if s.scheduler else "host" for s in last_plan(fd).steps]


def launches(fd, inputs):
    """Outputs of a cached execute and the kernels it launched."""
    fd.execute(list(inputs))
    before = pyfuser.cache_info()["launches"]
    out = fd.execute(list(inputs))
    return out, pyfuser.cache_info()["launches"] - before


def check_plan(fd):
    """Steps in a topological order, and nothing stored that no one reads."""
    ir = fd.ir
    made, read = set(), set()
    for step in last_plan(fd).steps:
        for v in step_reads(step):
            if isinstance(v, TensorVal) and v.definition is not None and v not in ir.inputs:
                assert v in made, f"{v.name} read before a step stores it"
                read.add(v)
        made |= set(step.outputs)
    returned = set(ir.outputs) | {broadcast_chain(ir.outputs[pos])[0]
                                  for pos, kind in last_plan(fd).aliases.items() if kind == "expand"}
    useless = [v.name for v in made - read - returned
               if not any(step.is_host and v in step.outputs for step in last_plan(fd).steps)]
    assert not useless, f"stored but never read: {useless}"


def unmerged_launches(build, inputs):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(refine_mod, "merge", lambda schedule, b, steps, base, keep: steps)
        fd = build()
        return launches(fd, inputs)[1]


def assert_matches_reference(fd, inputs, got, **tol):
    for g, w in zip(got, fd.reference(list(inputs))):
        torch.testing.assert_close(g, w, **(tol or dict(rtol=1e-5, atol=1e-5)))


# -- merges that save kernels --------------------------------------------------------------
def side_outputs():
    """A pointwise output and row sums (one normalization kernel) beside column sums."""
    with FusionDefinition() as fd:
        x = tensor(fd, 2)
        fd.add_output(fd.ops.exp(x))
        fd.add_output(fd.ops.sum(x, dims=[1]))
        fd.add_output(fd.ops.sum(x, dims=[0]))
    return fd


def test_shape_groups_one_scheduler_takes_share_a_kernel():
    (x,) = data((N, H), seed=1)
    assert unmerged_launches(side_outputs, [x]) == 3
    fd = side_outputs()
    (e, r, c), n = launches(fd, [x])
    assert n == 2 and kinds(fd) == ["inner_normalization", "outer_reduction"]
    torch.testing.assert_close(e, x.exp())
    torch.testing.assert_close(r, x.sum(1))
    torch.testing.assert_close(c, x.sum(0))
    assert_matches_reference(fd, [x], [e, r, c])
    assert fd._runtime.programs, "kernels on fusion inputs only keep the cached fast path"
    check_plan(fd)


def layer_norm_backward(dt=DataType.Half):
    """Statistics recomputed inside: the row statistics kernel joins dx's, the two
    column sums (dw, db) share one outer reduction."""
    with FusionDefinition() as fd:
        x, dy, w = tensor(fd, 2, dt), tensor(fd, 2, dt), tensor(fd, 1)
        xf, dyf = fd.ops.cast(x, dtype=FL), fd.ops.cast(dy, dtype=FL)
        var, mean = fd.ops.var_mean(xf, dims=[1], correction=0)
        rstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
        xhat = fd.ops.mul(fd.ops.sub(xf, rows(fd, mean)), rows(fd, rstd))
        g = fd.ops.mul(dyf, cols(fd, w))
        a = fd.ops.div(fd.ops.sum(g, dims=[1]), H)
        b = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), dims=[1]), H)
        dx = fd.ops.mul(rows(fd, rstd), fd.ops.sub(fd.ops.sub(g, rows(fd, a)), fd.ops.mul(xhat, rows(fd, b))))
        fd.add_output(fd.ops.cast(dx, dtype=dt))
        fd.add_output(fd.ops.sum(fd.ops.mul(dyf, xhat), dims=[0]))
        fd.add_output(fd.ops.sum(dyf, dims=[0]))
    return fd


def test_layer_norm_backward_needs_two_kernels():
    x, dy = data((N, H), (N, H), dt=torch.half, seed=2)
    (w,) = data((H,), seed=3)
    assert unmerged_launches(layer_norm_backward, [x, dy, w]) == 4
    fd = layer_norm_backward()
    (dx, dw, db), n = launches(fd, [x, dy, w])
    assert n == 2 and kinds(fd) == ["inner_normalization", "outer_reduction"]
    first, second = last_plan(fd).steps
    stored = [v for v in first.outputs if v not in fd.ir.outputs]
    # var and mean: reduction results stay fp32
    assert [v.definition.op for v in stored] == ["var_mean"] * 2 and all(v.dtype is FL for v in stored)
    assert set(second.outputs) == set(fd.ir.outputs[1:])

    xr = x.float().requires_grad_()
    wr = w.clone().requires_grad_()
    br = torch.zeros(H, requires_grad=True)
    torch.nn.functional.layer_norm(xr, [H], wr, br, eps=1e-5).backward(dy.float())
    torch.testing.assert_close(dx, xr.grad.half(), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(dw, wr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(db, br.grad, rtol=1e-4, atol=1e-4)
    assert_matches_reference(fd, [x, dy, w], [dx, dw, db], rtol=2e-3, atol=2e-3)
    check_plan(fd)


def softmax_matmul():
    """Stage 0 stores softmax(x) for the matmul; stage 1 needs sum(softmax(x) * x),
    which ``split`` cuts into three kernels there (max, sum of exp, the weighted
    sum) before the pointwise product."""
    with FusionDefinition() as fd:
        x, w = tensor(fd, 2), tensor(fd, 2)
        e = fd.ops.exp(fd.ops.sub(x, rows(fd, fd.ops.max(x, dims=[1]))))
        p = fd.ops.div(e, rows(fd, fd.ops.sum(e, dims=[1])))
        s = fd.ops.sum(fd.ops.mul(p, x), dims=[1])
        fd.add_output(fd.ops.mul(fd.ops.matmul(p, w), rows(fd, s, (N, K))))
    return fd


def test_producers_and_consumers_merge_across_a_host_op():
    x, w = data((N, H), (H, K), seed=4)
    assert unmerged_launches(softmax_matmul, [x, w]) == 5
    fd = softmax_matmul()
    (out,), n = launches(fd, [x, w])
    assert n == 2 and kinds(fd) == ["inner_normalization", "host", "pointwise"]
    first = last_plan(fd).steps[0]
    # The softmax for the matmul and the row sums for the product, from one read of x;
    # the max and the sum of exp are no longer stored.
    assert sorted(o.definition.op for o in first.outputs) == ["div", "sum"]
    assert [v.name for v in step_reads(first)] == [fd.ir.inputs[0].name]
    p = torch.softmax(x, 1)
    torch.testing.assert_close(out, (p @ w) * (p * x).sum(1, keepdim=True))
    assert_matches_reference(fd, [x, w], [out])
    check_plan(fd)


# -- merges that are refused -------------------------------------------------------------------
def chain():
    """r = row sums; c = column sums of x * r; d = row sums of x * c.  ``split`` makes
    three kernels, r -> c -> d: r and d (row sums both) fit one kernel, but that
    kernel would feed c and read it."""
    with FusionDefinition() as fd:
        x = tensor(fd, 2)
        r = fd.ops.sum(x, dims=[1])
        c = fd.ops.sum(fd.ops.mul(x, rows(fd, r)), dims=[0])
        fd.add_output(fd.ops.sum(fd.ops.mul(x, cols(fd, c)), dims=[1]))
    return fd


def test_a_merge_that_makes_a_cycle_is_refused(monkeypatch):
    tried = []
    try_schedule = ExecutorCache.try_schedule

    def spy(self, b, sig, outputs, cuts=None, base=None):
        tried.append({o.name for o in outputs})
        return try_schedule(self, b, sig, outputs, cuts, base)

    monkeypatch.setattr(ExecutorCache, "try_schedule", spy)
    (x,) = data((N, H), seed=5)
    fd = chain()
    (d,), n = launches(fd, [x])
    assert n == 3 and kinds(fd) == ["inner_reduction", "outer_reduction", "inner_reduction"]
    r_step, c_step, d_step = last_plan(fd).steps
    (r,), (c,), (d_val,) = r_step.outputs, c_step.outputs, d_step.outputs
    assert {r.name, d_val.name} not in tried, "the cycle is refused before any kernel is built"

    # Schedulable all the same: one inner reduction takes r and d when c is loaded.
    b = bind(fd.ir, [x], None)
    base = frozenset(fd.ir.inputs)
    merged, _ = fd._runtime.try_schedule(b, last_plan(fd).signature, [r, d_val], base | {c}, base)
    assert merged is not None and merged.scheduler.NAME == "inner_reduction"

    c_ref = (x * x.sum(1, keepdim=True)).sum(0)
    torch.testing.assert_close(d, (x * c_ref).sum(1), rtol=1e-5, atol=1e-4)
    assert_matches_reference(fd, [x], [d], rtol=1e-5, atol=1e-4)
    check_plan(fd)


def test_merging_stops_after_merge_losses_refusals(monkeypatch):
    refusals = []
    merge = refine_mod.merge
    try_schedule = ExecutorCache.try_schedule
    merging = []

    def counting_merge(schedule, b, steps, base, keep):
        merging.append(True)
        try:
            return merge(schedule, b, steps, base, keep)
        finally:
            merging.pop()

    def spy(self, b, sig, outputs, cuts=None, base=None):
        step, reasons = try_schedule(self, b, sig, outputs, cuts, base)
        if merging and step is None:
            refusals.append(outputs)
        return step, reasons

    monkeypatch.setattr(refine_mod, "merge", counting_merge)
    monkeypatch.setattr(ExecutorCache, "try_schedule", spy)
    monkeypatch.setattr(refine_mod, "MERGE_LOSSES", 1)
    (x,) = data((N, H), seed=6)
    fd = side_outputs()
    (e, r, c), n = launches(fd, [x])
    assert len(refusals) == 1
    assert n == 2  # the successful merge comes first: exp with the row sums
    torch.testing.assert_close(c, x.sum(0))


def test_merge_decisions_are_cached_in_the_plan(monkeypatch):
    x, dy = data((N, H), (N, H), dt=torch.half, seed=7)
    (w,) = data((H,), seed=8)
    fd = layer_norm_backward()
    fd.execute([x, dy, w])
    assert last_plan(fd).general, "the second kernel reads the stored var and mean"
    calls = []
    monkeypatch.setattr(refine_mod, "merge", lambda *a: calls.append(a) or a[2])
    before = pyfuser.cache_info()["kernels_compiled"]
    x2, dy2 = data((N, H), (N, H), dt=torch.half, seed=9)
    dx, dw, db = fd.execute([x2, dy2, w])
    assert not calls and len(fd._runtime.plans) == 1
    assert pyfuser.cache_info()["kernels_compiled"] == before
    torch.testing.assert_close(db, dy2.float().sum(0), rtol=1e-4, atol=1e-4)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fusions())
def test_merged_plans_of_random_fusions_are_ordered_and_store_nothing_unread(recipe):
    check(recipe)  # against the reference executor
    fd, inputs = build(recipe)
    fd.execute(inputs)
    check_plan(fd)


# -- 16-bit storage of upcasts between kernels -----------------------------------------------
UPCAST_INPUTS = [data((N, H), seed=10)[0].half(), data((N, H), seed=11)[0]]


def upcast_fusion(upcast_is_output=False):
    with FusionDefinition() as fd:
        x, y = tensor(fd, 2, DataType.Half), tensor(fd, 2)
        h = fd.ops.mul(x, x)  # fp16, rounded
        hf = fd.ops.cast(h, dtype=FL)
        fd.add_output(fd.ops.mul(hf, y))
        fd.add_output(fd.ops.sum(fd.ops.add(hf, y), dims=[1]))
        if upcast_is_output:
            fd.add_output(hf)
    return fd


def upcast_cut(fd):
    """Steps storing ``hf`` (an fp32 upcast) in one kernel for the next: a cut between
    kernels that ``split`` does not make itself (it cuts at reductions)."""
    fd.execute(UPCAST_INPUTS)
    rt = fd._runtime
    b = bind(fd.ir, UPCAST_INPUTS, None)
    base = frozenset(fd.ir.inputs)
    hf = fd.ir.outputs[0].definition.inputs[0]
    schedule = rt.scheduling(list(rt.plans)[-1])
    steps = split(schedule, b, [hf], base, base) + split(schedule, b, fd.ir.outputs[:2], base | {hf}, base)
    return rt, b, base, hf, steps


def run_steps(fd, steps):
    rt = fd._runtime
    sig = list(rt.plans)[-1]
    rt.plans[sig] = Plan({}, steps, signature=sig)
    rt.programs.clear()
    return fd.execute(UPCAST_INPUTS)


def test_upcast_stored_between_kernels_is_stored_at_16_bits():
    fd = upcast_fusion()
    rt, b, base, hf, steps = upcast_cut(fd)
    assert len(steps) == 2 and steps[0].outputs == [hf] and hf.dtype is FL
    wide = run_steps(fd, steps)

    narrow = refine_mod.narrow(rt.scheduling(list(rt.plans)[-1]), b, steps, base, set(fd.ir.outputs))
    h = hf.definition.inputs[0]
    assert len(narrow) == 2 and narrow[0].outputs == [h] and h.dtype is DataType.Half
    sub = narrow[1].sub
    assert h in step_reads(narrow[1]) and hf not in step_reads(narrow[1])
    assert any(e.op == "cast" and sub.orig[e.inputs[0]] is h for e in sub.ir.exprs), "the reader recomputes the upcast"
    text = dump.segmented_fusion(fd.id, Plan({}, narrow), fd.ir, b.shapes)
    assert f"outputs: {h.name} __half[{N}, {H}]" in text and f"inputs: {h.name} __half" in text

    got = run_steps(fd, narrow)
    ref = fd.reference(UPCAST_INPUTS)
    # The upcast is exact: the same bits as storing it at 32 bits.
    assert all(torch.equal(g, w) for g, w in zip(got, wide))
    assert torch.equal(got[0], ref[0])
    torch.testing.assert_close(got[1], ref[1])


def test_upcast_that_is_a_fusion_output_stays_32_bits():
    fd = upcast_fusion(upcast_is_output=True)
    rt, b, base, hf, steps = upcast_cut(fd)
    assert refine_mod.narrow(rt.scheduling(list(rt.plans)[-1]), b, steps, base, set(fd.ir.outputs)) == steps
    got = run_steps(fd, steps)
    ref = fd.reference(UPCAST_INPUTS)
    assert got[2].dtype == torch.float32 and torch.equal(got[2], ref[2]) and torch.equal(got[0], ref[0])
    torch.testing.assert_close(got[1], ref[1])


@pytest.mark.parametrize("which", ["side_outputs", "layer_norm_backward"])
def test_row_and_column_sums_are_one_kernel_with_the_inner_outer_tile(which):
    x, dy = data((N, H), (N, H), dt=torch.half, seed=14)
    (w,) = data((H,), seed=15)
    make, inputs = (side_outputs, [x.float()]) if which == "side_outputs" else (layer_norm_backward, [x, dy, w])
    fd = make()
    got, n = launches(fd, inputs)
    assert n == 1 and kinds(fd) == ["inner_outer"]
    assert not last_plan(fd).general
    assert_matches_reference(fd, inputs, got, rtol=2e-3, atol=2e-3)


def test_reduction_results_stored_between_kernels_stay_32_bits():
    """Reductions of upcast values are fp32 accumulators, not upcasts."""
    x, dy = data((N, H), (N, H), dt=torch.bfloat16, seed=12)
    (w,) = data((H,), seed=13)
    fd = layer_norm_backward(DataType.BFloat16)
    fd.execute([x, dy, w])
    stored = {v for s in last_plan(fd).steps for v in s.outputs} - set(fd.ir.outputs)
    assert stored and all(v.dtype is FL for v in stored)
