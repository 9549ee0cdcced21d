"""The scheduler contract (``schedulers.base.Scheduler``): every registered scheduler
implements it, the runtime calls it without probing for optional members, the
segment's analyses are computed once, and a segment whose checks pass always emits."""
import ast
import pathlib

import torch

import pyfuser.runtime
from pyfuser import DataType, FusionDefinition
from pyfuser.ir.concretize import bind
from pyfuser.schedulers import SCHEDULERS, Scheduler, Segment, inner_outer, reduction

FL = DataType.Float
MEMBERS = ("can_schedule", "can_schedule_runtime", "heuristics", "emit", "grid", "fallbacks", "max_registers")


def tensor(fd, rank, dtype=FL):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def segment(build, inputs):
    with FusionDefinition() as fd:
        build(fd)
    b = bind(fd.ir, inputs)
    info = {v: {"contiguous": True, "rows_aligned": False, "unit_dim": None} for v in fd.ir.inputs}
    return Segment(list(fd.ir.outputs), b.shapes, info, "cpu")


def softmax(fd):
    x = tensor(fd, 2)
    m = fd.ops.broadcast_in_dim(fd.ops.max(x, [1]), [4, 8], [0])
    e = fd.ops.exp(fd.ops.sub(x, m))
    fd.add_output(fd.ops.div(e, fd.ops.broadcast_in_dim(fd.ops.sum(e, [1]), [4, 8], [0])))


def test_every_registered_scheduler_implements_the_protocol():
    assert [s.NAME for s in SCHEDULERS] == ["pointwise", "inner_normalization", "inner_reduction",
                                          "outer_reduction", "inner_outer"]  # the priority order
    for sched in SCHEDULERS:
        assert isinstance(sched, Scheduler), sched.NAME
        assert all(callable(getattr(sched, m)) for m in MEMBERS), sched.NAME


def test_the_runtime_does_not_probe_schedulers_for_members():
    """No ``getattr(sched, ...)`` or ``hasattr(sched, ...)`` in the runtime: every
    member is part of the contract."""
    root = pathlib.Path(pyfuser.runtime.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr"):
                first = node.args[0]
                assert not (isinstance(first, ast.Name) and "sched" in first.id), f"{path.name}:{node.lineno}"


def test_segment_analysis_is_computed_once():
    seg = segment(softmax, [torch.randn(4, 8)])
    assert seg.analysis is seg.analysis
    assert seg.analysis.exprs is seg.exprs() and seg.analysis.reductions is seg.reductions()
    assert len(seg.analysis.levels) == 2 and len(seg.analysis.online_pairs) == 1
    assert reduction.analyse(seg) is reduction.analyse(seg)


def test_accepted_segments_emit():
    """For each scheduler whose checks accept the softmax segment, emit succeeds."""
    seg = segment(softmax, [torch.randn(4, 8)])
    accepted = []
    for sched in SCHEDULERS:
        if sched.can_schedule(seg) is not None:
            continue
        params = sched.heuristics(seg)
        if sched.can_schedule_runtime(seg, params) is None:
            src = sched.emit(seg, params, "k_test")
            assert "def k_test(" in src.source and "pending" not in src.source
            accepted.append(sched.NAME)
    assert accepted == ["inner_normalization"]


def test_runtime_check_rejects_params_emit_cannot_take():
    def layer_norm_grads(fd):
        dy, x = tensor(fd, 2), tensor(fd, 2)
        p = fd.ops.mul(dy, x)
        fd.add_output(fd.ops.sum(p, [1]))
        fd.add_output(fd.ops.sum(p, [0]))
    seg = segment(layer_norm_grads, [torch.randn(8, 64), torch.randn(8, 64)])
    assert inner_outer.can_schedule(seg) is None
    params = inner_outer.heuristics(seg)
    assert inner_outer.can_schedule_runtime(seg, params) is None
    from dataclasses import replace

    rej = inner_outer.can_schedule_runtime(seg, replace(params, block_j=16))
    assert (rej.scheduler, rej.code) == ("inner_outer", "rows_fit_block")


def test_a_refusal_that_needs_no_walk_generates_no_source(monkeypatch):
    """An output neither full-size, a row result nor a column result is refused by
    ``codegen.emit.check_outputs`` before the walk; ``emit_kernel`` refuses it the same
    way, so the check and the emitter cannot disagree."""
    import pytest

    from pyfuser.codegen.emit import emit_kernel
    from pyfuser.errors import Unsupported

    def grads_and_a_window(fd):
        dy, x = tensor(fd, 2), tensor(fd, 2)
        p = fd.ops.mul(dy, x)
        fd.add_output(fd.ops.sum(p, [1]))
        fd.add_output(fd.ops.sum(p, [0]))
        fd.add_output(fd.ops.slice(p, [0, 0], [2, 64]))
    seg = segment(grads_and_a_window, [torch.randn(8, 64), torch.randn(8, 64)])
    assert inner_outer.can_schedule(seg) is None
    params = inner_outer.heuristics(seg)
    with monkeypatch.context() as m:
        m.setattr(inner_outer, "emit_kernel", lambda *a, **k: pytest.fail("the run-time check generated source"))
        rej = inner_outer.can_schedule_runtime(seg, params)
    assert (rej.scheduler, rej.code) == ("inner_outer", "row_output_shape")
    with pytest.raises(Unsupported) as err:
        emit_kernel("k", seg.outputs, seg.shapes, seg.inputs_info, inner_outer.build_tile(seg, params), [])
    assert err.value.code == "row_output_shape"
