"""nvFuser's in-place outputs: ``fd.add_output(out, alias)`` writes ``out`` into the
input ``alias`` (through its strides) and leaves it out of the returned list.

The results are those of a fusion that read every input first, then wrote: a kernel
(or a later kernel, or a host step) that reads the aliased input sees its old
values (nvFuser's test_issue2664 family).  Every path agrees: one kernel, several,
host steps, a cached re-execute, and the reference executor, which defines it.
Expected values are computed with eager PyTorch before anything runs."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import DefinitionError

from ..helpers import assert_matches, gen_for, make_tensor

F = DataType.Float


def _tensor(fd, shape, **kw):
    return fd.define_tensor(shape=[-1 if s != 1 else 1 for s in shape], dtype=F, **kw)


def _scalar_update(fd, x, s):  # nvFuser's repro1: the aliased input also feeds a broadcast
    t2 = fd.define_tensor(shape=[], contiguity=[], dtype=F)
    t4 = fd.ops.add(t2, 1.0)
    fd.add_output(t4, t2)
    fd.add_output(fd.ops.mul(x, fd.ops.broadcast_in_dim(t4, shape=x.shape, broadcast_dims=[])))


def repro1(x, s):
    return [(s + 1.0) * x], [s + 1.0]


def _sum_update(fd, x, s):  # repro2: the aliased output is a reduction of the input's broadcast
    t2 = fd.define_tensor(shape=[], contiguity=[], dtype=F)
    b = fd.ops.broadcast_in_dim(t2, shape=x.shape, broadcast_dims=[])
    fd.add_output(fd.ops.sum(b, dims=[0], keepdim=False), t2)
    fd.add_output(fd.ops.mul(x, b))
    fd.add_output(fd.ops.add(x, b))


def repro2(x, s):
    return [s * x, x + s], [s * x.shape[0]]


CASES = {"scalar_update": (_scalar_update, repro1), "sum_update": (_sum_update, repro2)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_scalar_alias_cases(case):
    build, eager = CASES[case]
    x = make_tensor((37,), torch.float32, gen_for(case, "x"))
    with FusionDefinition() as fd:
        build(fd, fd.define_tensor(shape=[37], contiguity=[True], dtype=F), None)
    for run in range(2):  # the second execute is the cached one
        s = make_tensor((), torch.float32, gen_for(case, run))
        want_out, want_in = eager(x, s.clone())
        outs = fd.execute([x, s])
        assert len(outs) == len(want_out)
        for got, want in zip(outs, want_out):
            assert_matches(got, want)
        assert_matches(s, want_in[0], what="aliased input")


def test_two_aliases_read_each_others_old_values():
    """repro3: T6 = sum(T1 + T2) goes into T3 and T7 = T3 + 1 into T2: each reads the
    other's input before it is written; nothing is returned."""
    x = make_tensor((29,), torch.float32, gen_for("two-x"))
    a, b = make_tensor((), torch.float32, gen_for("two-a")), make_tensor((), torch.float32, gen_for("two-b"))
    with FusionDefinition() as fd:
        t1 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=F)
        t2 = fd.define_tensor(shape=[], contiguity=[], dtype=F)
        t3 = fd.define_tensor(shape=[], contiguity=[], dtype=F)
        t5 = fd.ops.add(t1, fd.ops.broadcast_in_dim(t2, shape=fd.ops.shape(t1), broadcast_dims=[]))
        fd.add_output(fd.ops.sum(t5, dims=[0], keepdim=False), t3)
        fd.add_output(fd.ops.add(t3, 1.0), t2)
    want_b, want_a = (x + a).sum(), b + 1.0
    assert fd.execute([x, a, b]) == []
    assert_matches(a, want_a)
    assert_matches(b, want_b, tol=(1e-5, 1e-5))


def test_implicit_broadcast_input_updated_in_place():
    """repro4: T0 [n, 1] is broadcast against T1 [n, m] by one kernel and negated into itself."""
    t0v, t1v = (make_tensor(s, torch.float32, gen_for("bcast", s)) for s in ((13, 1), (13, 6)))
    want = [t0v + t1v, -t0v]
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=F)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=F)
        fd.add_output(fd.ops.add(t1, t0))
        fd.add_output(fd.ops.neg(t0), t0)
    (out,) = fd.execute([t0v, t1v])
    assert_matches(out, want[0])
    assert_matches(t0v, want[1])


def _transpose_add(fd, t, other):
    fd.add_output(fd.ops.add(t, fd.ops.permute(t, [1, 0])), t)  # programs read others' elements


def _minus_mean(fd, t, other):
    m = fd.ops.div(fd.ops.sum(t, dims=[1], keepdim=True), 6.0)
    fd.add_output(fd.ops.sub(t, fd.ops.broadcast_in_dim(m, shape=[6, 6], broadcast_dims=[0, 1])), t)
    fd.add_output(fd.ops.mul(t, 2.0))


def _matmul_then_add(fd, t, other):  # a host step between kernels reads the old input
    fd.add_output(fd.ops.add(fd.ops.matmul(fd.ops.mul(t, 0.5), other), t), t)
    fd.add_output(fd.ops.exp(fd.ops.permute(t, [1, 0])))


HAZARDS = {
    "transpose_add": (_transpose_add, lambda t, o: ([], t + t.T)),
    "minus_mean": (_minus_mean, lambda t, o: ([t * 2.0], t - t.sum(1, keepdim=True) / 6.0)),
    "matmul_then_add": (_matmul_then_add, lambda t, o: ([torch.exp(t.T)], (t * 0.5) @ o + t)),
}


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("case", sorted(HAZARDS))
def test_aliased_input_read_elsewhere_sees_old_values(case, layout, device="cpu"):
    build, eager = HAZARDS[case]
    gen = gen_for("hazard", case, layout)
    base = make_tensor((6, 12) if layout == "strided" else (6, 6), torch.float32, gen).to(device)
    t = base[:, ::2] if layout == "strided" else base  # a view: the write must keep its strides
    untouched = base[:, 1::2].clone() if layout == "strided" else None
    other = make_tensor((6, 6), torch.float32, gen).to(device)
    want_out, want_in = eager(t.clone(), other)
    with FusionDefinition() as fd:
        tv = fd.define_tensor(shape=[-1, -1], contiguity=[layout == "contiguous", layout == "contiguous"],
                              dtype=F)
        ov = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=F)
        build(fd, tv, ov)
    ref_t = t.clone()
    ref_outs = fd.reference([ref_t, other])
    outs = fd.execute([t, other])
    assert len(outs) == len(want_out) == len(ref_outs)
    for got, ref, want in zip(outs, ref_outs, want_out):
        assert_matches(got, want)
        assert_matches(ref, want, what="reference")
    assert_matches(t, want_in, what="aliased input")
    assert_matches(ref_t, want_in, what="aliased input (reference)")
    if untouched is not None:
        assert torch.equal(base[:, 1::2], untouched), "the write went outside the view"


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("case", sorted(HAZARDS))
def test_aliased_input_read_elsewhere_gpu(case, layout):
    test_aliased_input_read_elsewhere_sees_old_values(case, layout, device="cuda")


def test_validate_compares_the_written_input():
    x = make_tensor((5, 4), torch.float32, gen_for("validate"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=F)
        fd.add_output(fd.ops.mul(t, 3.0), t)
        fd.add_output(fd.ops.add(t, 1.0))
    want = [x + 1.0]
    outs = fd.validate([x])
    assert_matches(outs[0], want[0])


def test_printer_round_trips_the_alias():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True], dtype=F)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=F)
        fd.add_output(fd.ops.add(a, b))
        fd.add_output(fd.ops.mul(a, b), b)
    text = repr(fd)
    assert "fd.add_output(tv3, tv1)" in text.splitlines()[-1]
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    with FusionDefinition() as fd2:
        namespace["nvfuser_fusion"](fd2)
    assert repr(fd2).splitlines()[1:] == text.splitlines()[1:]
    x, y = (make_tensor((9,), torch.float32, gen_for("print", i)) for i in range(2))
    want = [x + y, x * y]
    (out,) = fd2.execute([x, y])
    assert_matches(out, want[0])
    assert_matches(y, want[1])


@pytest.mark.parametrize("bad", ["dtype", "intermediate", "twice", "rank", "scalar"])
def test_bad_aliases_raise(bad):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=F)
        h = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        s = fd.define_scalar(dtype=DataType.Double)
        t = fd.ops.add(a, 1.0)
        attempt, match = {
            "dtype": (lambda: fd.add_output(t, h), r"T\d+ has dtype DataType.Float, the input T1 .* DataType.Half"),
            "intermediate": (lambda: fd.add_output(fd.ops.mul(a, 2.0), t), "must be a tensor input"),
            "twice": (lambda: (fd.add_output(t, a), fd.add_output(fd.ops.mul(a, 2.0), a)), "already receives"),
            "rank": (lambda: fd.add_output(fd.ops.sum(t, dims=[0]), a), r"shape \[-1\], the input T0 .*\[-1, -1\]"),
            "scalar": (lambda: fd.add_output(t, s), "must be a tensor input"),
        }[bad]
        with pytest.raises(DefinitionError, match=match):
            attempt()


def test_aliased_value_also_returned_is_the_input():
    """nvFuser returns the aliased input itself for a value added both ways (and an
    input added as an output is the input): here all three outputs share its storage."""
    x = make_tensor((2, 3), torch.float32, gen_for("returned"))
    want = torch.relu(x)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=F)
        t4 = fd.ops.where(fd.ops.gt(t0, 0.0), t0, 0.0)
        fd.add_output(t4)
        fd.add_output(t4, t0)
        fd.add_output(t4)
        fd.add_output(t0)
    for run in range(2):
        outs = fd.execute([x])
        assert len(outs) == 3
        assert all(o.data_ptr() == x.data_ptr() for o in outs)
        assert_matches(x, want)


def test_aliased_input_read_by_a_later_kernel():
    """Without the normalization scheduler minus_mean is a reduction kernel, then a
    pointwise one that reads the aliased input again."""
    from ..helpers import without_scheduler

    with without_scheduler("inner_normalization"):
        test_aliased_input_read_elsewhere_sees_old_values("minus_mean", "strided")


def test_expanded_input_cannot_receive_an_output():
    from pyfuser.errors import InputError

    x = make_tensor((3, 1), torch.float32, gen_for("expanded")).expand(3, 4)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=F)
        fd.add_output(fd.ops.mul(t, 2.0), t)
    with pytest.raises(InputError, match=r"add_output\(T\d+, T0\).*overlapping elements \(strides \[1, 0\]\)"):
        fd.execute([x])
