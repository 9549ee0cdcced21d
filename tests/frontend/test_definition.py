"""Both API eras of FusionDefinition, run through ``execute`` against eager.

2022 (the report): ``fs = Fusion(); with FusionDefinition(fs) as fd: ...; fs.execute``,
``symbolic_sizes``/``contiguous``, ``define_constant``, ``view``, ``axes=``.
Current: ``with FusionDefinition() as fd: ...; fd.execute``, ``shape``/``contiguity``/
``stride_order``, ``define_scalar`` with and without a value (a runtime input)."""
from __future__ import annotations

import re

import pytest
import torch

from pyfuser import DataType, Fusion, FusionDefinition

from ..helpers import assert_matches, gen_for, make_tensor


def test_legacy_api():
    x = make_tensor((4, 6), torch.float16, gen_for("legacy-x"))
    m = make_tensor((4, 1), torch.float32, gen_for("legacy-m"))
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Half)
        t1 = fd.define_tensor(symbolic_sizes=[-1, 1], contiguous=[True, True], dtype=DataType.Float)
        s2 = fd.define_constant(0.5)
        t3 = fd.ops.mul(fd.ops.cast(t0, dtype=DataType.Float), s2)
        t4 = fd.ops.broadcast_in_dim(t1, output_shape=[4, 6], broadcast_dims=[0, 1])
        t5 = fd.ops.add(t3, t4)
        t6 = fd.ops.sum(t5, axes=[1], keepdim=False, dtype=DataType.Null)
        fd.add_output(t5)
        fd.add_output(t6)
    out = fs.execute([x, m])
    want = x.float() * 0.5 + m
    assert isinstance(out, list) and len(out) == 2
    assert_matches(out[0], want)
    assert_matches(out[1], want.sum(1), tol=(1e-5, 1e-5))


def test_current_api():
    x = make_tensor((4, 6), torch.bfloat16, gen_for("current"))
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        s1 = fd.define_scalar(2.0, dtype=DataType.Double)
        t2 = fd.ops.mul(t0, s1)
        t3 = fd.ops.max(t2, dims=[0], keepdim=True)
        fd.add_output(t2)
        fd.add_output(t3)
    a, b = fd.execute([x])
    assert_matches(a, x * 2.0)
    assert_matches(b, (x * 2.0).amax(0, keepdim=True))


def test_runtime_scalar_inputs():
    """define_scalar() without a value is an input of execute, in definition order."""
    x = make_tensor((3, 5), torch.float32, gen_for("rt"))
    with FusionDefinition() as fd:
        alpha = fd.define_scalar(dtype=DataType.Double)
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        n = fd.define_scalar(None, dtype=DataType.Int)
        fd.add_output(fd.ops.add(fd.ops.mul(t, alpha), n))
    for alpha, n in ((1.5, 2), (-0.25, -7)):
        (got,) = fd.execute([alpha, x, n])
        assert_matches(got, x * alpha + n)


def test_scalar_arithmetic_feeds_tensor_ops():
    x = make_tensor((3, 5), torch.float32, gen_for("scalar-math"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Double)
        k = fd.ops.sqrt(fd.ops.mul(s, fd.define_scalar(4.0)))  # scalar-only ops stay scalars
        fd.add_output(fd.ops.div(t, k))
    (got,) = fd.execute([x, 9.0])
    assert_matches(got, x / 6.0)


def test_symbolic_sizes_rebind_on_each_execute():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.exp(t), dims=[1]))
    for shape in ((2, 3), (5, 17), (1, 4), (7, 1)):
        x = make_tensor(shape, torch.float32, gen_for("rebind", shape))
        (got,) = fd.execute([x])
        assert_matches(got, torch.exp(x).sum(1), tol=(1e-5, 1e-5))


def test_concrete_sizes_and_size_one_dims():
    x = make_tensor((3, 1, 5), torch.float32, gen_for("concrete"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[3, 1, 5], contiguity=[True, None, True], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(t))
    (got,) = fd.execute([x])
    assert_matches(got, -x)


def test_non_contiguous_inputs():
    """contiguity False: a strided view (every other column) is accepted as it is."""
    base = make_tensor((4, 10), torch.float32, gen_for("strided"))
    x = base[:, ::2]  # strides (10, 2)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(t, 3.0))
        fd.add_output(fd.ops.sum(t, dims=[1]))
    a, b = fd.execute([x])
    assert_matches(a, x * 3.0)
    assert_matches(b, x.sum(1), tol=(1e-5, 1e-5))


def test_stride_order_accepts_a_transposed_tensor():
    """stride_order[i] ranks dim i's stride (0 = innermost): [0, 1] is a transposed matrix."""
    x = make_tensor((6, 4), torch.float32, gen_for("stride-order")).t()  # [4, 6], strides (1, 4)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, stride_order=[0, 1])
        fd.add_output(fd.ops.add(t, 1.0))
        fd.add_output(fd.ops.sum(t, dims=[0]))
    a, b = fd.execute([x])
    assert_matches(a, x + 1.0)
    assert_matches(b, x.sum(0), tol=(1e-5, 1e-5))


def test_channels_last_stride_order():
    x = make_tensor((2, 3, 4, 5), torch.float16, gen_for("nhwc")).to(memory_format=torch.channels_last)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.Half,
                             stride_order=[3, 0, 2, 1])
        fd.add_output(fd.ops.relu(t))
    (got,) = fd.execute([x])
    assert_matches(got.contiguous(), torch.relu(x).contiguous())


def test_define_tensor_from_sizes_and_strides():
    x = make_tensor((5, 3), torch.float32, gen_for("sizes-strides")).t()
    with FusionDefinition() as fd:
        t = fd.define_tensor(sizes=list(x.shape), strides=list(x.stride()), dtype=DataType.Float)
        fd.add_output(fd.ops.exp(t))
    (got,) = fd.execute([x])
    assert_matches(got, torch.exp(x))


def test_dtype_accepts_torch_dtypes():
    x = make_tensor((3, 4), torch.int32, gen_for("torch-dtype"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=torch.int32)
        fd.add_output(fd.ops.mul(t, 2))
    (got,) = fd.execute([x])
    assert_matches(got, x * 2)


def test_unused_input_and_input_as_output():
    x = make_tensor((3, 4), torch.float32, gen_for("unused-x"))
    y = make_tensor((3, 4), torch.float32, gen_for("unused-y"))
    with FusionDefinition() as fd:
        tx = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(tx))
        fd.add_output(tx)
    a, b = fd.execute([x, y])
    assert_matches(a, -x)
    assert_matches(b, x)


def test_same_value_output_twice_and_dead_code():
    x = make_tensor((3, 4), torch.float32, gen_for("twice"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.ops.exp(t)  # never an output: must not matter
        u = fd.ops.mul(t, t)
        fd.add_output(u)
        fd.add_output(u)
    a, b = fd.execute([x])
    assert_matches(a, x * x)
    assert_matches(b, x * x)


def test_empty_tensor():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(t, 1.0))
        fd.add_output(fd.ops.sum(t, dims=[1]))
    a, b = fd.execute([torch.empty(0, 5)])
    assert a.shape == (0, 5) and b.shape == (0,)


def test_sum_over_empty_extent_is_zero():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(t, dims=[1]))
    (got,) = fd.execute([torch.empty(3, 0)])
    assert_matches(got, torch.zeros(3))


@pytest.mark.parametrize("era", ["legacy", "current"])
def test_fusion_ids_are_distinct(era):
    defs = []
    for _ in range(2):
        if era == "legacy":
            fs = Fusion()
            with FusionDefinition(fs) as fd:
                fd.add_output(fd.define_tensor(shape=[-1], contiguity=[True]))
        else:
            with FusionDefinition() as fd:
                fd.add_output(fd.define_tensor(shape=[-1], contiguity=[True]))
        defs.append(fd)
    assert defs[0].id != defs[1].id
    assert repr(defs[0]).startswith("def nvfuser_fusion(fd : FusionDefinition) -> None :")


def _executed_add_one():
    x = make_tensor((2, 3), torch.float32, gen_for("sealed"))
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.ops.add(t0, 1.0)
        fd.add_output(t1)
    assert_matches(fd.execute([x])[0], x + 1.0)
    return fd, t0, t1, x


@pytest.mark.parametrize("edit", ["add_output", "new_op", "full", "define_tensor", "define_scalar",
                                  "second_with"])
def test_edits_after_the_with_block_raise(edit):
    """nvFuser raises on any change once the definition's block ended; accepting it
    would leave the cached plan running the old program (the edit silently ignored)."""
    from pyfuser.errors import DefinitionError

    fd, t0, t1, x = _executed_add_one()
    attempts = {
        "add_output": (lambda: fd.add_output(t0), "add_output(T0)"),
        "new_op": (lambda: fd.add_output(fd.ops.mul(t1, 2.0)), "mul"),
        "full": (lambda: fd.ops.full([2], 1.0, DataType.Float), "full"),
        "define_tensor": (lambda: fd.define_tensor(shape=[-1], dtype=DataType.Float), "define_tensor"),
        "define_scalar": (lambda: fd.define_scalar(dtype=DataType.Double), "define_scalar"),
    }
    if edit == "second_with":
        with pytest.raises(DefinitionError, match="already defined"):
            with fd:
                fd.add_output(fd.ops.neg(t1))
    else:
        fn, what = attempts[edit]
        with pytest.raises(DefinitionError, match=re.escape(what) + ".*already defined"):
            fn()
    out = fd.execute([x])
    assert len(out) == 1
    assert_matches(out[0], x + 1.0)
    assert "T0" not in [o.name for o in fd.ir.outputs]
