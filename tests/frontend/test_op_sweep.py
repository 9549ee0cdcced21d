"""Every elementwise op and every reduction of the op table, run through ``fd.execute``
and compared with PyTorch eager: output dtype (promotion) and values, over dtypes,
tensor vs tensor, tensor vs Python scalar in both orders, mixed dtypes and
broadcasting; reductions over each dim and all of them, with and without keepdim,
also against the reference executor.

The oracles below are written by hand (operators and ``torch.*`` functions), not
taken from the op table, so a wrong table row shows up here.  Where eager refuses an
op for some dtypes, pyfuser must refuse it too, with a PyfuserError.
"""
from __future__ import annotations

import operator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from pyfuser import DataType, FusionDefinition, PyfuserError
from pyfuser.ir.dtypes import from_torch
from pyfuser.ir.ops import BINARY_OPS, OPS, REDUCTION_OPS, UNARY_OPS

from ..helpers import ALL_DTYPES, FLOAT_DTYPES, assert_matches, gen_for, make_tensor

SHAPE = (5, 7)

UNARY_ORACLE = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "log": torch.log, "log1p": torch.log1p, "log2": torch.log2, "log10": torch.log10, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "silu": F.silu, "erf": torch.erf,
    "erfc": torch.erfc, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
    "sign": torch.sign, "isfinite": torch.isfinite, "isnan": torch.isnan, "isinf": torch.isinf,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not, "set": torch.clone,
    "acos": torch.acos, "acosh": torch.acosh, "asin": torch.asin, "asinh": torch.asinh, "atan": torch.atan,
    "atanh": torch.atanh, "cosh": torch.cosh, "sinh": torch.sinh, "lgamma": torch.lgamma, "erfinv": torch.erfinv,
    "erfcinv": lambda x: torch.erfinv(1 - x.double()).to(torch.erfinv(x).dtype),  # torch has no erfcinv
    "frac": torch.frac, "signbit": torch.signbit, "isposinf": torch.isposinf, "isneginf": torch.isneginf,
    "isreal": torch.isreal,
}

def _nvfuser_div(a, b):
    """nvFuser's div: C's truncating division on integers (a bool beside an integer
    counts as one), true division otherwise (two bools included, as eager)."""
    integral = [not x.dtype.is_floating_point for x in (a, b)]
    if all(integral) and not (a.dtype == torch.bool and b.dtype == torch.bool):
        return torch.div(a, b, rounding_mode="trunc")
    return a / b


def _integers_only(fn):
    """nvFuser's integer ops that torch has no such refusal for (or no such op)."""
    def call(a, b):
        dtype = torch.result_type(a, b)
        if dtype.is_floating_point or dtype == torch.bool:
            raise TypeError(f"integers only, got {dtype}")
        return fn(a.to(dtype), b.to(dtype))

    return call


def _logical_right_shift(a, b):
    """Zeros shift in from the left; shifts below 0 or of the width or more give 0."""
    a, b = torch.broadcast_tensors(a, b)
    width = torch.iinfo(a.dtype).bits
    u, k = a.numpy().view(f"uint{width}"), b.numpy()
    inside = (k >= 0) & (k < width)
    out = np.where(inside, u >> np.where(inside, k, 0).astype(f"uint{width}"), 0).astype(f"uint{width}")
    return torch.from_numpy(out.view(f"int{width}").copy())


def _full_precision_nextafter(a, b):
    """pyfuser refuses fp16/bf16 nextafter, as nvFuser (its kernels compute in fp32)."""
    if torch.result_type(a, b) in (torch.float16, torch.bfloat16):
        raise TypeError("nextafter: Float or Double only")
    return torch.nextafter(a, b)


# True: a Python operator (accepts a Python number on either side);
# False: a torch function that wants tensors (numbers become 0-dim tensors, which
# promote like Python numbers do).
BINARY_ORACLE = {
    "add": (operator.add, True), "sub": (operator.sub, True), "mul": (operator.mul, True),
    "div": (_nvfuser_div, False), "truediv": (operator.truediv, True), "pow": (operator.pow, True),
    "fmod": (torch.fmod, False), "remainder": (torch.remainder, False), "atan2": (torch.atan2, False),
    "maximum": (torch.maximum, False), "minimum": (torch.minimum, False),
    "eq": (operator.eq, True), "ne": (operator.ne, True), "lt": (operator.lt, True), "le": (operator.le, True),
    "gt": (operator.gt, True), "ge": (operator.ge, True),
    "logical_and": (torch.logical_and, False), "logical_or": (torch.logical_or, False),
    "bitwise_and": (operator.and_, True), "bitwise_or": (operator.or_, True), "bitwise_xor": (operator.xor, True),
    "bitwise_left_shift": (torch.bitwise_left_shift, False), "bitwise_right_shift": (torch.bitwise_right_shift, False),
    "logical_right_shift": (_integers_only(_logical_right_shift), False), "gcd": (torch.gcd, False),
    "mod": (_integers_only(torch.fmod), False), "nextafter": (_full_precision_nextafter, False),
}

SCALAR_FOR = {"float": -1.75, "int": 3, "bool": True}


def _dtype_id(dt):
    return str(dt).replace("torch.", "")


def _eager(fn, args, tensors_only):
    """The oracle's answer, or the exception eager raises."""
    if tensors_only:
        args = [a if isinstance(a, torch.Tensor) else torch.tensor(a) for a in args]
    try:
        return fn(*args)
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as err:
        return err


def _define_args(fd, args):
    """Tensor args become fusion inputs; Python numbers are passed to the op as they are."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(fd.define_tensor(shape=[-1] * a.dim(), contiguity=[True] * a.dim(), dtype=from_torch(a.dtype)))
        else:
            out.append(a)
    return out


def check_op(op, args, want, builder=None):
    """Define ``fd.ops.<op>(*args)`` (tensors as inputs), execute, compare with ``want``."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    call = builder or (lambda fd, *xs: getattr(fd.ops, op)(*xs))
    if isinstance(want, Exception):
        with pytest.raises(PyfuserError):
            with FusionDefinition() as fd:
                fd.add_output(call(fd, *_define_args(fd, args)))
            fd.execute(tensors)
        return
    with FusionDefinition() as fd:
        fd.add_output(call(fd, *_define_args(fd, args)))
    (got,) = fd.execute(tensors)
    assert_matches(got, want, what=f"{op}{tuple(_dtype_id(a.dtype) if isinstance(a, torch.Tensor) else a for a in args)}")


def test_every_elementwise_op_has_an_oracle():
    """Adding a row to the op table needs a sample here."""
    assert set(UNARY_OPS) == set(UNARY_ORACLE)
    assert set(BINARY_OPS) == set(BINARY_ORACLE)
    ternary = {r.name for r in OPS.values() if r.kind == "ternary"}
    assert ternary == {"where", "lerp", "addcmul", "clamp", "threshold"}


# --- unary ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("op", sorted(UNARY_ORACLE))
def test_unary(op, dtype):
    gen = gen_for((op, str(dtype)))
    x = make_tensor(SHAPE, dtype, gen, special=dtype.is_floating_point)
    check_op(op, [x], _eager(UNARY_ORACLE[op], [x], False))


@pytest.mark.parametrize("op", ["exp", "sqrt", "sin", "abs", "tanh"])
def test_unary_of_constant_scalar(op):
    """All-scalar arithmetic gives a scalar; it reaches a tensor through a binary op."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        s = getattr(fd.ops, op)(fd.define_scalar(0.75, dtype=DataType.Double))
        fd.add_output(fd.ops.add(t, s))
    x = torch.tensor([1.5, -2.0, 3.0])
    (got,) = fd.execute([x])
    assert_matches(got, x + UNARY_ORACLE[op](torch.tensor(0.75, dtype=torch.float64)).item())


# --- binary -----------------------------------------------------------------------


def _binary_inputs(op, lhs_dtype, rhs_dtype, lhs_shape, rhs_shape, gen):
    a = make_tensor(lhs_shape, lhs_dtype, gen, special=lhs_dtype.is_floating_point)
    positive_rhs = op == "pow" and not rhs_dtype.is_floating_point  # ints to negative powers raise in eager
    b = make_tensor(rhs_shape, rhs_dtype, gen, positive=positive_rhs, high=3.0 if op == "pow" else 4.0)
    if op == "pow" and not rhs_dtype.is_floating_point:
        b = b.clamp(max=4)
    return a, b


def _check_binary(op, a, b):
    fn, scalar_ok = BINARY_ORACLE[op]
    check_op(op, [a, b], _eager(fn, [a, b], not scalar_ok))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("op", sorted(BINARY_ORACLE))
def test_binary_tensor_tensor(op, dtype):
    gen = gen_for((op, str(dtype), "tt"))
    _check_binary(op, *_binary_inputs(op, dtype, dtype, SHAPE, SHAPE, gen))


MIXED = [(torch.float16, torch.float32), (torch.bfloat16, torch.float16), (torch.int32, torch.int64),
         (torch.int64, torch.float16), (torch.bool, torch.int32), (torch.int32, torch.bfloat16)]


@pytest.mark.parametrize("dtypes", MIXED, ids=lambda p: f"{_dtype_id(p[0])}-{_dtype_id(p[1])}")
@pytest.mark.parametrize("op", sorted(BINARY_ORACLE))
def test_binary_mixed_dtypes(op, dtypes):
    gen = gen_for((op, str(dtypes)))
    _check_binary(op, *_binary_inputs(op, dtypes[0], dtypes[1], SHAPE, SHAPE, gen))


@pytest.mark.parametrize("shapes", [((5, 1), (7,)), ((1, 7), (5, 1)), ((5, 7), (1,)), ((3, 1, 7), (5, 1))],
                         ids=lambda s: f"{list(s[0])}x{list(s[1])}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32], ids=_dtype_id)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "lt", "remainder", "bitwise_xor"])
def test_binary_broadcasting(op, dtype, shapes):
    gen = gen_for((op, str(dtype), shapes))
    _check_binary(op, *_binary_inputs(op, dtype, dtype, shapes[0], shapes[1], gen))


def _scalar_cases():
    """(tensor dtype, scalar kind): the scalar of the tensor's own category, plus the
    category-crossing pairs where promotion changes the result dtype."""
    cases = []
    for dt in ALL_DTYPES:
        kind = "float" if dt.is_floating_point else ("bool" if dt == torch.bool else "int")
        cases.append((dt, kind))
    cases += [(torch.float16, "int"), (torch.int32, "float"), (torch.bool, "int"), (torch.bool, "float")]
    return cases


@pytest.mark.parametrize("scalar_first", [False, True], ids=["tensor-scalar", "scalar-tensor"])
@pytest.mark.parametrize("case", _scalar_cases(), ids=lambda c: f"{_dtype_id(c[0])}-{c[1]}")
@pytest.mark.parametrize("op", sorted(BINARY_ORACLE))
def test_binary_python_scalar(op, case, scalar_first):
    dtype, kind = case
    gen = gen_for((op, str(case), scalar_first))
    s = SCALAR_FOR[kind]
    if op == "pow" and scalar_first and not dtype.is_floating_point and kind != "float":
        # eager: integer base to the power of a negative integer tensor raises
        t = make_tensor(SHAPE, dtype, gen, positive=True).clamp(max=4) if dtype != torch.bool else \
            make_tensor(SHAPE, dtype, gen)
    else:
        t = make_tensor(SHAPE, dtype, gen, special=dtype.is_floating_point and not scalar_first,
                        positive=op == "pow" and not dtype.is_floating_point)
    if op == "pow" and not dtype.is_floating_point:
        t = t.clamp(max=4) if dtype != torch.bool else t
    if op in ("fmod", "remainder", "div", "mod") and scalar_first and dtype == torch.bool and kind != "float":
        t = torch.ones_like(t)  # an integer division or remainder by False (0) raises in eager
    _check_binary(op, *((s, t) if scalar_first else (t, s)))


@pytest.mark.parametrize("op", ["add", "mul", "div", "lt", "maximum", "pow"])
def test_binary_runtime_scalar_input(op):
    """A scalar defined without a value is an input of execute."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(getattr(fd.ops, op)(t, s))
    gen = torch.Generator().manual_seed(3)
    x = make_tensor(SHAPE, torch.float16, gen, positive=op == "pow")
    fn, scalar_ok = BINARY_ORACLE[op]
    for value in (0.5, -2.25):
        (got,) = fd.execute([x, value])
        assert_matches(got, _eager(fn, [x, value], not scalar_ok), what=f"{op}(T, {value})")


@given(shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, min_side=1, max_side=4),
       op=st.sampled_from(["add", "mul", "sub", "ge"]), seed=st.integers(0, 2**16))
def test_binary_broadcasting_property(shapes, op, seed):
    gen = torch.Generator().manual_seed(seed)
    a, b = (make_tensor(s, torch.float32, gen) for s in shapes.input_shapes)
    _check_binary(op, a, b)


# --- ternary ------------------------------------------------------------------------


WHERE_CASES = [
    ("f32-f32", torch.float32, torch.float32, (5, 7), (5, 7)),
    ("f16-f16", torch.float16, torch.float16, (5, 7), (5, 7)),
    ("bf16-f32", torch.bfloat16, torch.float32, (5, 7), (5, 7)),
    ("i32-i64", torch.int32, torch.int64, (5, 7), (5, 7)),
    ("bool-bool", torch.bool, torch.bool, (5, 7), (5, 7)),
    ("f32-bcast", torch.float32, torch.float32, (5, 1), (7,)),
    ("f16-scalar", torch.float16, None, (5, 7), None),
    ("i64-scalar", torch.int64, None, (5, 7), None),
    ("scalar-scalar", None, None, None, None),
]


@pytest.mark.parametrize("case", WHERE_CASES, ids=lambda c: c[0])
def test_where(case):
    _, da, db, sa, sb = case
    gen = torch.Generator().manual_seed(11)
    pred = make_tensor((5, 7), torch.bool, gen)
    a = make_tensor(sa, da, gen, special=da is not None and da.is_floating_point) if da else 2.5
    b = make_tensor(sb, db, gen) if db else (-3 if da is None or not da.is_floating_point else -1.5)
    if da is None and db is None:
        # nvFuser promotes two scalar values as scalars: a Double and an Int give Double,
        # where eager's default dtype would give float32 (docs/SEMANTICS.md)
        want = torch.where(pred, torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
    else:
        want = _eager(torch.where, [pred, a, b], False)
    check_op("where", [pred, a, b], want)


def test_where_scalar_predicate_is_rejected_or_matches():
    gen = torch.Generator().manual_seed(12)
    a, b = make_tensor(SHAPE, torch.float32, gen), make_tensor(SHAPE, torch.float32, gen)
    pred = make_tensor(SHAPE, torch.float32, gen)  # a float predicate: eager refuses it
    check_op("where", [pred, a, b], _eager(torch.where, [pred, a, b], False))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("weight", ["tensor", "scalar-small", "scalar-large"])
def test_lerp(dtype, weight):
    gen = torch.Generator().manual_seed(13)
    s, e = make_tensor(SHAPE, dtype, gen), make_tensor(SHAPE, dtype, gen)
    w = {"tensor": torch.rand(SHAPE, generator=gen).to(dtype), "scalar-small": 0.25, "scalar-large": 0.75}[weight]
    check_op("lerp", [s, e, w], _eager(torch.lerp, [s, e, w], False))


@pytest.mark.parametrize("dtypes", [(torch.float32,) * 3, (torch.float16,) * 3, (torch.bfloat16,) * 3,
                                    (torch.float32, torch.float16, torch.float32), (torch.int64,) * 3],
                         ids=lambda d: "-".join(map(_dtype_id, d)))
@pytest.mark.parametrize("value", [1.0, -0.5, 2])
def test_addcmul(dtypes, value):
    gen = torch.Generator().manual_seed(14)
    t, t1, t2 = (make_tensor(SHAPE, d, gen) for d in dtypes)
    want = _eager(lambda a, b, c: torch.addcmul(a, b, c, value=value), [t, t1, t2], False)
    check_op("addcmul", [t, t1, t2], want, builder=lambda fd, a, b, c: fd.ops.addcmul(a, b, c, value))


CLAMP_CASES = [
    ("f32-both", torch.float32, -1.0, 2.0),
    ("f32-min", torch.float32, -1.0, None),
    ("f32-max", torch.float32, None, 2.0),
    ("f16-both", torch.float16, -1.5, 1.5),
    ("bf16-both", torch.bfloat16, -1.5, 1.5),
    ("i32-both", torch.int32, -3, 4),
    ("i64-float-bounds", torch.int64, -2.5, 3.5),
    ("f32-tensor-bounds", torch.float32, "tensor", "tensor"),
]


@pytest.mark.parametrize("case", CLAMP_CASES, ids=lambda c: c[0])
def test_clamp(case):
    _, dtype, lo, hi = case
    gen = torch.Generator().manual_seed(15)
    x = make_tensor(SHAPE, dtype, gen, special=dtype.is_floating_point)
    if lo == "tensor":
        lo, hi = -make_tensor(SHAPE, dtype, gen, positive=True), make_tensor(SHAPE, dtype, gen, positive=True)
        want = _eager(lambda x, a, b: torch.clamp(x, a, b), [x, lo, hi], False)
        check_op("clamp", [x, lo, hi], want, builder=lambda fd, t, a, b: fd.ops.clamp(t, a, b))
        return
    want = _eager(lambda t: torch.clamp(t, lo, hi), [x], False)
    check_op("clamp", [x], want, builder=lambda fd, t: fd.ops.clamp(t, min=lo, max=hi))


# --- cast ---------------------------------------------------------------------------

CAST_DTYPES = ALL_DTYPES + (torch.float64,)


@pytest.mark.parametrize("dst", CAST_DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("src", CAST_DTYPES, ids=_dtype_id)
def test_cast(src, dst):
    gen = gen_for((str(src), str(dst)))
    # NaN/inf have no integer value (eager's result is platform-defined), so only
    # float -> float casts see them; a zero checks the -> bool cast.
    x = make_tensor(SHAPE, src, gen, special=src.is_floating_point and dst.is_floating_point, high=100.0)
    x.view(-1)[4] = 0
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=from_torch(src))
        fd.add_output(fd.ops.cast(t, dtype=from_torch(dst)))
    (got,) = fd.execute([x])
    assert_matches(got, x.to(dst), what=f"cast {src} -> {dst}")


def test_cast_accepts_torch_dtype_and_positional_dtype():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=torch.float32)
        fd.add_output(fd.ops.cast(t, torch.float16))
        fd.add_output(fd.ops.cast(t, DataType.Int32))
    x = torch.tensor([1.25, -7.5, 3.0])
    a, b = fd.execute([x])
    assert_matches(a, x.half())
    assert_matches(b, x.to(torch.int32))


# --- reductions -----------------------------------------------------------------------


def _prod(x, dims, keepdim):
    out = x.to(torch.int64) if not x.dtype.is_floating_point else x
    for d in sorted(dims, reverse=True):
        out = torch.prod(out, d, keepdim=True)
    return out if keepdim else out.reshape([s for i, s in enumerate(out.shape) if i not in dims])


def _welford(x, dims, keepdim):
    """nvFuser's welford: the mean, the sum of squared deviations and the count (Int)."""
    var, mean = torch.var_mean(x, dims, correction=0, keepdim=keepdim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    return mean, var * n, torch.full(mean.shape, n, dtype=torch.int64)


# Eager's answer per reduction row; ``dtypes``: the input dtypes eager takes.
REDUCTION_ORACLE = {
    "sum": (lambda x, d, k: torch.sum(x, d, keepdim=k), ALL_DTYPES),
    "max": (lambda x, d, k: torch.amax(x, d, keepdim=k), ALL_DTYPES),
    "min": (lambda x, d, k: torch.amin(x, d, keepdim=k), ALL_DTYPES),
    "prod": (_prod, ALL_DTYPES),
    "any": (lambda x, d, k: torch.any(x, d, keepdim=k), ALL_DTYPES),
    "all": (lambda x, d, k: torch.all(x, d, keepdim=k), ALL_DTYPES),
    "var": (lambda x, d, k: torch.var(x, d, keepdim=k), FLOAT_DTYPES),
    "var_mean": (lambda x, d, k: torch.var_mean(x, d, keepdim=k), FLOAT_DTYPES),
    "welford": (lambda x, d, k: _welford(x, d, k), FLOAT_DTYPES),
}

REDUCTION_SHAPE = (6, 37)
REDUCTION_CASES = [([1], False), ([0], True), ([0, 1], False)]


def test_every_reduction_has_an_oracle():
    """Adding a reduction row to the op table needs a sample here."""
    assert set(REDUCTION_OPS) == set(REDUCTION_ORACLE)


def _reduction_input(op, dtype):
    gen = gen_for(("reduce", op, str(dtype)))
    x = make_tensor(REDUCTION_SHAPE, dtype, gen, low=0.5, high=1.5)
    if dtype != torch.bool and not dtype.is_floating_point:
        x = x.clamp(-2, 2)  # products of 37 stay inside int32
    x[2] = 0  # a row of zeros (falsy throughout): any, all and prod see both answers
    return x


@pytest.mark.parametrize("dims,keepdim", REDUCTION_CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("op,dtype", [(op, dt) for op, (_, dts) in sorted(REDUCTION_ORACLE.items()) for dt in dts],
                         ids=lambda c: _dtype_id(c) if isinstance(c, torch.dtype) else c)
def test_reduction(op, dtype, dims, keepdim):
    """Generated kernels (the interpreter on CPU) against eager and the reference."""
    fn, _ = REDUCTION_ORACLE[op]
    x = _reduction_input(op, dtype)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=from_torch(dtype))
        out = getattr(fd.ops, op)(t, dims=dims, keepdim=keepdim)
        for o in out if isinstance(out, tuple) else (out,):
            fd.add_output(o)
    want = fn(x, dims, keepdim)
    want = list(want) if isinstance(want, tuple) else [want]
    got = fd.execute([x])
    ref = fd.reference([x])
    what = f"{op}({_dtype_id(dtype)}, dims={dims}, keepdim={keepdim})"
    tol = {torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}.get(dtype)
    for i, (g, r, w) in enumerate(zip(got, ref, want, strict=True)):
        assert_matches(g, w, what=f"{what} output {i} against eager", tol=tol if w.dtype == dtype else None)
        assert_matches(g, r, what=f"{what} output {i} against the reference", tol=tol if w.dtype == dtype else None)
