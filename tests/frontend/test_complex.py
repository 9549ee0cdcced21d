"""Complex numbers: every op on a complex tensor runs as a host step through torch, so
its values must be torch's bit for bit, infinities and NaNs included; complex
constants (``define_scalar`` of a Python complex, runtime complex scalars) keep their
DataType, print as Python that rebuilds them, and ``where`` promotes as nvFuser does."""
from __future__ import annotations

import itertools
import warnings

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import DefinitionTypeError, EagerFallbackWarning
from pyfuser.ir.dtypes import from_torch

from ..helpers import gen_for
from .test_printer import rebuild

COMPLEX = (torch.complex64, torch.complex128)
_SPECIAL = (float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1.5, -2.0)


def special_complex(dtype, gen):
    """Every pairing of inf, -inf, NaN, signed zeros and finite parts, then random values."""
    pairs = list(itertools.product(_SPECIAL, repeat=2))
    special = torch.tensor([complex(r, i) for r, i in pairs], dtype=dtype)
    return torch.cat([special, torch.randn(17, dtype=dtype, generator=gen) * 3])


def assert_same_complex(got, want, what="output"):
    """Same dtype, shape and strides; real and imaginary parts equal, NaN == NaN, each part
    apart (``allclose`` on complex calls a value NaN when either part is)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, torch gives {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, torch gives {tuple(want.shape)}"
    assert got.stride() == want.stride(), f"{what}: strides {got.stride()}, torch gives {want.stride()}"
    parts = (lambda z: (z.real, z.imag)) if want.dtype.is_complex else (lambda z: (z,))
    for g, w in zip(parts(got), parts(want)):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def _run(fd, inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EagerFallbackWarning)
        return fd.execute(inputs)


UNARY = ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "exp", "log", "log2", "neg", "sigmoid",
         "sin", "sinh", "sqrt", "rsqrt", "reciprocal", "tan", "tanh", "log10", "abs")


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("op", UNARY)
def test_unary_op_on_complex_is_torchs(op, dtype):
    z = special_complex(dtype, gen_for("complex-unary", op, dtype))
    with FusionDefinition() as fd:
        fd.add_output(getattr(fd.ops, op)(fd.from_pytorch(z)))
    want = getattr(torch, op)(z)
    assert_same_complex(_run(fd, [z])[0], want, op)
    assert_same_complex(_run(rebuild(fd), [z])[0], want, f"{op}, rebuilt from repr(fd)")


@pytest.mark.parametrize("dtype", COMPLEX)
def test_complex_output_strides_follow_the_real_path(dtype):
    """A complex output is laid out as the same fusion on real tensors lays it out, so a
    fusion's outputs do not change strides with the dtype."""
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    layouts = []
    for dt in (real, dtype):
        x = torch.randn(2, 3, 4, dtype=dt, generator=gen_for("strides", dt)).permute(2, 0, 1)
        with FusionDefinition() as fd:
            t = fd.from_pytorch(x)
            fd.add_output(fd.ops.neg(t))
            fd.add_output(fd.ops.sum(t, [1]))
            fd.add_output(fd.ops.permute(t, [1, 0, 2]))
        layouts.append([o.stride() for o in _run(fd, [x])])
    assert layouts[0] == layouts[1]


def test_complex_constant_in_arithmetic():
    z = special_complex(torch.complex64, gen_for("complex-const"))
    c = complex(3.0, 0.5)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(z)
        s = fd.define_scalar(c)
        assert s.dtype is DataType.ComplexDouble
        fd.add_output(fd.ops.mul(t, s))
        fd.add_output(fd.ops.add(t, 2 - 1j))  # a Python complex given to an op directly
    got = _run(fd, [z])
    assert_same_complex(got[0], z * c)
    assert_same_complex(got[1], z + (2 - 1j))


@pytest.mark.parametrize("c", [complex(float("inf"), float("nan")), complex(-0.0, float("-inf")),
                               complex(float("nan"), 0.5), complex(1e-310, -1e300)])
def test_non_finite_complex_constants_round_trip(c):
    x = torch.tensor([1.0, -0.0, float("inf"), float("nan"), 2.5])
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.mul(fd.from_pytorch(x), fd.define_scalar(c, DataType.ComplexDouble)))
    text = repr(fd)
    assert "nanj" not in text and "infj" not in text  # repr(complex) is no Python expression there
    assert_same_complex(_run(rebuild(fd), [x])[0], x * c)


def test_real_value_with_a_complex_dtype_is_complex():
    z = torch.randn(5, dtype=torch.complex64, generator=gen_for("complex-real-value"))
    with FusionDefinition() as fd:
        s = fd.define_scalar(1.5, DataType.ComplexFloat)
        fd.add_output(fd.ops.mul(fd.from_pytorch(z), s))
    assert s.value == complex(1.5) and isinstance(s.value, complex)
    assert_same_complex(_run(fd, [z])[0], z * 1.5)


def test_complex_value_needs_a_complex_dtype():
    with FusionDefinition() as fd:
        with pytest.raises(DefinitionTypeError, match=r"define_scalar: the complex value \(1\+2j\) needs dtype "
                                                      r"DataType.ComplexFloat or DataType.ComplexDouble, got "
                                                      r"DataType.Float"):
            fd.define_scalar(1 + 2j, DataType.Float)


def test_runtime_complex_scalar_input():
    z = special_complex(torch.complex128, gen_for("complex-runtime"))
    with FusionDefinition() as fd:
        t = fd.from_pytorch(z)
        s = fd.define_scalar(dtype=DataType.ComplexDouble)
        fd.add_output(fd.ops.mul(t, s))
    assert_same_complex(_run(fd, [z, 2 - 3j])[0], z * (2 - 3j))
    assert_same_complex(_run(fd, [z, 4])[0], z * 4)  # a real number is a complex one
    with pytest.raises(TypeError, match="input 1 .* must be a Python number of dtype DataType.ComplexDouble"):
        _run(fd, [z, "2j"])


def test_real_result_of_complex_scalar_arithmetic_feeds_a_kernel():
    """abs of a complex constant is a Double scalar, computed before the kernels, not a
    host step that would hand a kernel a Python number where it stores tensors."""
    x = torch.randn(6, generator=gen_for("complex-abs-scalar"))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.mul(fd.from_pytorch(x), fd.ops.abs(fd.define_scalar(3 + 4j))))
    got = _run(fd, [x])[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, x * 5.0)


# -- where: nvFuser promotes the two values alone -------------------------------------------------
@pytest.mark.parametrize("a, b, want", [
    ((3.0,), (5.0,), torch.float64),
    ((3.0, DataType.Float), (5.0, DataType.Float), torch.float32),
    ((3, DataType.Int32), (5, DataType.Int32), torch.int32),
    ((3,), (5,), torch.int64),
    ((True, DataType.Bool), (False, DataType.Bool), torch.bool),
    ((complex(3.0),), (complex(5.0),), torch.complex128),
    ((3 + 0j, DataType.ComplexFloat), (5 + 0j, DataType.ComplexFloat), torch.complex64),
    ((3.0, DataType.Float), (5.0, DataType.Double), torch.float64),
    ((3.0, DataType.Half), (5, DataType.Int), torch.float32),  # Half meeting another dtype counts as Float
    ((3 + 0j, DataType.ComplexFloat), (0.1, DataType.Double), torch.complex128),
])
def test_where_of_two_scalars_keeps_their_dtype(a, b, want):
    pred = torch.tensor([True, False, True])
    with FusionDefinition() as fd:
        t = fd.from_pytorch(pred)
        fd.add_output(fd.ops.where(t, fd.define_scalar(*a), fd.define_scalar(*b)))
    expect = torch.where(pred, torch.tensor(a[0], dtype=want), torch.tensor(b[0], dtype=want))
    for f in (fd, rebuild(fd)):
        assert_same_complex(_run(f, [pred])[0], expect, f"where{a, b}")
        assert_same_complex(f.reference([pred])[0], expect, f"where{a, b}, reference")


def test_where_double_scalars_are_not_rounded_to_float():
    pred = torch.tensor([True, False])
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.where(fd.from_pytorch(pred), 0.1, -1e300))
    got = _run(fd, [pred])[0]
    assert got.dtype == torch.float64 and got.tolist() == [0.1, -1e300]


@pytest.mark.parametrize("dtype", COMPLEX)
def test_where_with_complex_tensors(dtype):
    g = gen_for("where-complex", dtype)
    z = special_complex(dtype, g)
    w = torch.randn(z.shape, dtype=dtype, generator=g)
    x = torch.randn(z.shape, generator=g)
    pred = torch.rand(z.shape, generator=g) > 0.5
    with FusionDefinition() as fd:
        p, a, b, r = (fd.from_pytorch(v) for v in (pred, z, w, x))
        fd.add_output(fd.ops.where(p, a, b))
        fd.add_output(fd.ops.where(p, a, fd.define_scalar(complex(float("nan"), 1.0))))
        fd.add_output(fd.ops.where(p, r, a))  # a real tensor meets a complex one
        fd.add_output(fd.ops.where(p, 2.0, a))
    want = [torch.where(pred, z, w), torch.where(pred, z, complex(float("nan"), 1.0)),
            torch.where(pred, x, z), torch.where(pred, 2.0, z)]
    for i, (g_, w_) in enumerate(zip(_run(fd, [pred, z, w, x]), want)):
        assert_same_complex(g_, w_, f"output {i}")


# -- layout ops ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("shape", [(0, 2, 1), (3, 4), (2, 5, 3), (4, 1)])
def test_triu_of_complex(dtype, shape):
    z = torch.randn(shape, dtype=dtype, generator=gen_for("triu", dtype, shape))
    if z.numel():
        z.view(-1)[0] = complex(float("nan"), float("inf"))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.triu(fd.from_pytorch(z), 0))
    assert_same_complex(_run(fd, [z])[0], torch.triu(z))


def test_iota_along_a_size_one_extent():
    """The coordinate along a size-1 extent is the literal 0: the kernel still computes
    the iota there (a mask the complex where of ``triu`` reads, stored by a kernel)."""
    x = torch.zeros(3, 2, 1)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        rows = fd.ops.broadcast_in_dim(fd.ops.iota(fd.ops.size(t, 1), 0, 1, dtype=DataType.Int),
                                       shape=[1, fd.ops.size(t, 1), 1], broadcast_dims=[1])
        cols = fd.ops.broadcast_in_dim(fd.ops.iota(fd.ops.size(t, 2), 5, 2, dtype=DataType.Int),
                                       shape=[1, 1, fd.ops.size(t, 2)], broadcast_dims=[2])
        fd.add_output(fd.ops.le(rows, fd.ops.sub(cols, 5)))
        fd.add_output(cols)
    mask, c = _run(fd, [x])
    assert torch.equal(mask, torch.tensor([[[True], [False]]]))
    assert torch.equal(c, torch.tensor([[[5]]]))


@pytest.mark.parametrize("value", [complex(2.0, -1.0), complex(float("nan"), float("-inf")), None])
def test_pad_of_complex(value):
    z = torch.randn(2, 3, dtype=torch.complex64, generator=gen_for("pad-complex"))
    with FusionDefinition() as fd:
        t = fd.from_pytorch(z)
        fd.add_output(fd.ops.pad(t, [1, 2, 0, 1]) if value is None else fd.ops.pad(t, [1, 2, 0, 1], value))
    v = 0j if value is None else value
    want = torch.complex(torch.nn.functional.pad(z.real, [1, 2, 0, 1], value=v.real),
                         torch.nn.functional.pad(z.imag, [1, 2, 0, 1], value=v.imag))
    assert_same_complex(_run(fd, [z])[0], want)
    assert_same_complex(_run(rebuild(fd), [z])[0], want, "rebuilt")


@pytest.mark.parametrize("arg, dtype", [(DataType.ComplexFloat, DataType.Double), (DataType.Float, DataType.ComplexDouble)])
def test_pad_value_must_match_complexity(arg, dtype):
    """A scalar of the fusion pads only a tensor of its kind (nvFuser's rule); a Python
    complex number cannot pad a real tensor, a real one pads a complex tensor as F.pad does."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[2, 2], dtype=arg)
        s = fd.define_scalar(dtype=dtype)
        with pytest.raises(DefinitionTypeError, match=f"pad: value {s.name} has dtype .* but the tensor is"):
            fd.ops.pad(t, [1, 1], s)
        if arg is DataType.Float:
            with pytest.raises(DefinitionTypeError, match="pad: value .* is complex, but the tensor is"):
                fd.ops.pad(t, [1, 1], 1 + 2j)
        else:
            fd.ops.pad(t, [1, 1], 1.5)


def test_complex_dtypes_name_nvfusers():
    assert from_torch(torch.complex64) is DataType.ComplexFloat
    assert from_torch(torch.complex128) is DataType.ComplexDouble


def test_where_of_scalars_alone_is_a_scalar():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[3], dtype=DataType.Float)
        i = fd.define_scalar(dtype=DataType.Int)
        s = fd.ops.where(fd.ops.lt(i, 0), fd.ops.add(i, 3), i)
        fd.add_output(fd.ops.mul(x, s))
    x = torch.tensor([1.0, 2.0, 3.0])
    assert _run(fd, [x, -1])[0].tolist() == [2.0, 4.0, 6.0]
