"""``fd.explain(inputs)``: per segment the scheduler chosen, its params and every
rejection (scheduler, code, message); the scheduler_params dump prints the same
object; a segment that runs as torch ops for lack of a scheduler warns once."""
import warnings

import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import EagerFallbackWarning
from pyfuser.segment import planner as planner_mod

FL, INT = DataType.Float, DataType.Int


def tensor(fd, rank, dtype=FL):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def fusion(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


def test_pointwise():
    fd = fusion(lambda fd: fd.add_output(fd.ops.exp(tensor(fd, 2))))
    ex = fd.explain([torch.randn(4, 8)])
    [seg] = ex.segments
    assert seg.scheduler == "pointwise" and seg.params is not None and seg.params.block >= 32
    assert set(seg.codes.values()) == {"no_reduction"}
    assert all(r.scheduler == name for name, r in seg.verdicts)


def test_reduction():
    fd = fusion(lambda fd: fd.add_output(fd.ops.sum(tensor(fd, 2), [1])))
    [seg] = fd.explain([torch.randn(4, 8)]).segments
    assert seg.scheduler == "inner_reduction"
    assert seg.codes == {"pointwise": "has_reduction", "inner_normalization": "pure_reduction",
                         "outer_reduction": "inner_axes", "inner_outer": "one_direction"}


def test_segmented_fusion_with_a_host_op():
    def build(fd):
        a, w = tensor(fd, 2), tensor(fd, 2)
        h = fd.ops.matmul(fd.ops.mul(a, 0.5), w)
        fd.add_output(fd.ops.sum(fd.ops.exp(h), [1]))
    fd = fusion(build)
    xs = [torch.randn(4, 8), torch.randn(8, 3)]
    ex = fd.explain(xs)
    assert [s.scheduler for s in ex.segments] == ["pointwise", None, "inner_reduction"]
    assert ex.segments[1].host == "host op matmul" and ex.segments[1].rejections == ()
    assert ex.segments[2].codes["pointwise"] == "has_reduction"
    torch.testing.assert_close(fd.execute(xs)[0], torch.exp(xs[0] * 0.5 @ xs[1]).sum(1))


def _int_pow(fd):
    a, b = tensor(fd, 2, INT), tensor(fd, 2, INT)
    fd.add_output(fd.ops.add(fd.ops.pow(a, b), a))


def test_eager_fallback_is_explained_by_code():
    fd = fusion(_int_pow)
    xs = [torch.randint(0, 4, (4, 8)), torch.randint(0, 4, (4, 8))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EagerFallbackWarning)
        ex = fd.explain(xs)
    [seg] = ex.segments
    assert seg.scheduler is None and seg.host == "no scheduler accepted" and seg.params is None
    assert seg.codes["pointwise"] == "op_form"  # integer pow with a tensor exponent
    assert {r.code for r in ex.rejections()} == {"op_form", "no_reduction"}


def test_eager_fallback_warns_once_per_cause(monkeypatch):
    monkeypatch.setattr(planner_mod, "_WARNED", set())
    xs = [torch.randint(0, 4, (4, 8)), torch.randint(0, 4, (4, 8))]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):  # two fusions, the same cause: one warning
            fd = fusion(_int_pow)
            torch.testing.assert_close(fd.execute(xs)[0], xs[0] ** xs[1] + xs[0])
        fd.execute([x[:2] for x in xs])  # a new plan, same cause
    eager = [w for w in seen if issubclass(w.category, EagerFallbackWarning)]
    assert len(eager) == 1 and "fd.explain" in str(eager[0].message)


def test_host_ops_do_not_warn(monkeypatch):
    monkeypatch.setattr(planner_mod, "_WARNED", set())
    fd = fusion(lambda fd: fd.add_output(fd.ops.matmul(tensor(fd, 2), tensor(fd, 2))))
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerFallbackWarning)
        fd.execute([torch.randn(4, 8), torch.randn(8, 3)])


def test_dump_formats_the_explanation(monkeypatch, capsys):
    fd = fusion(lambda fd: fd.add_output(fd.ops.sum(tensor(fd, 2), [1])))
    xs = [torch.randn(4, 8)]
    text = str(fd.explain(xs))
    monkeypatch.setenv("PYFUSER_DUMP", "scheduler_params")
    fd.execute(xs)
    assert text in capsys.readouterr().out
    assert text.splitlines()[1] == "  segment 0 (outputs T1): inner_reduction"


def test_every_rejection_is_structured():
    fd = fusion(lambda fd: fd.add_output(fd.ops.sum(tensor(fd, 2), [1])))
    rejs = fd.explain([torch.randn(4, 8)]).rejections()
    assert len(rejs) == 4
    for r in rejs:
        assert r.scheduler and r.code.isidentifier() and r.message and str(r) == f"{r.code}: {r.message}"
