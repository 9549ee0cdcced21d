"""Every unary and binary op of the op table through the generated kernels, against
the reference executor: fp32 with NaN, +-inf, +-0, tiny and huge values among
random ones of many magnitudes; integer and bool inputs where PyTorch takes them;
tensor-tensor (with broadcasting), tensor-constant and tensor-runtime-scalar.

On CPU (CI) the kernels run under Triton's interpreter; ``PYFUSER_SWEEP_DEVICE=cuda``
runs the same sweep on the GPU, where libdevice and the compiled kernels are the
ones users get (the reference then runs there too)."""
from __future__ import annotations

import pytest
import torch

import os

from pyfuser import PyfuserError
from pyfuser.ir.ops import BINARY_OPS, OPS, UNARY_OPS

from .common import DataType, assert_matches, define_input, fusion, gen_for, launches

SHAPE = (7, 129)
SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 1e-30, -1e-30,
           1e-7, -1e-7, 3e-4, 88.5, -88.5, 100.0, -100.0, 1e20, -1e20, 7.25, -0.75]

DEVICE = os.environ.get("PYFUSER_SWEEP_DEVICE", "cpu")
OPS_REF = {name: OPS[name].ref for name in UNARY_OPS + BINARY_OPS}
# Binary rows that take integers only (torch or nvFuser refuse floats)
INT_ONLY = ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
            "logical_right_shift", "gcd", "mod")

# fp32: 1e-5 relative and absolute.  Ops computed from several builtins (see the
# op table's notes) get a modestly looser bound where they need it; listed here so a
# regression past it fails and an improvement can tighten it.
TOL = {}
DEFAULT_TOL = (1e-5, 1e-5)


def float_input(gen, shape=SHAPE, special=True):
    """Random signs and magnitudes from 1e-6 to 3e1; the first elements special."""
    n = 1
    for s in shape:
        n *= s
    exp = torch.empty(n, dtype=torch.float64).uniform_(-6, 1.5, generator=gen)
    sign = torch.where(torch.rand(n, generator=gen) > 0.5, 1.0, -1.0).to(torch.float64)
    x = (sign * torch.pow(10.0, exp)).to(torch.float32)
    if special:
        x[: len(SPECIAL)] = torch.tensor(SPECIAL)
    return x.reshape(shape)


def float_pair(gen):
    """Two inputs whose first len(SPECIAL)**2 elements hold every pair of special values."""
    a, b = float_input(gen, special=False), float_input(gen, special=False)
    s = torch.tensor(SPECIAL)
    k = len(SPECIAL)
    a.view(-1)[: k * k] = s.repeat_interleave(k)
    b.view(-1)[: k * k] = s.repeat(k)
    # exact small integers too (pow with integral exponents, fmod/remainder exact cases)
    a.view(-1)[k * k: k * k + 40] = torch.arange(-20, 20, dtype=torch.float32)
    b.view(-1)[k * k: k * k + 40] = torch.arange(-4, 4, dtype=torch.float32).repeat(5)
    return a, b


def int_input(gen, dtype, shape=SHAPE, positive=False):
    lo = 1 if positive else -40
    x = torch.randint(lo, 41, shape, generator=gen, dtype=torch.int64)
    x = torch.where(x == 0, torch.full_like(x, 3), x)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    return x.to(dtype)


def _torch_accepts(fn):
    try:
        fn()
        return True
    except (RuntimeError, TypeError, NotImplementedError):
        return False


def _on_device(inputs):
    return [x.to(DEVICE) if isinstance(x, torch.Tensor) else x for x in inputs]


def _run(build, inputs, what, tol=None):
    inputs = _on_device(inputs)
    fd = fusion(build)
    want = fd.reference(inputs)[0]
    with launches() as n:
        (got,) = fd.execute(inputs)
    assert n[0] == 1, f"{what}: {n[0]} launches"
    if want.dtype.is_floating_point:
        assert_matches(got, want, what=what, tol=tol or DEFAULT_TOL)
        # assert_close's equal_nan would let a NaN-poisoned, unwritten element pass
        # where the reference is NaN too: NaN must appear exactly where expected.
        assert torch.equal(torch.isnan(got), torch.isnan(want)), f"{what}: NaN positions differ"
    else:
        assert_matches(got, want, what=what)
    return got.cpu(), want.cpu()  # for comparisons with eager on the CPU


# --- unary -------------------------------------------------------------------------


@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_fp32(op):
    if op == "bitwise_not":
        pytest.skip("bitwise_not takes integers and bools only")
    x = float_input(gen_for("unary", op))

    def build(fd):
        fd.add_output(getattr(fd.ops, op)(define_input(fd, x)))

    _run(build, [x], f"{op}(fp32)", TOL.get(op))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_int_bool(op, dtype):
    x = int_input(gen_for("unary_int", op, str(dtype)), dtype)
    if not _torch_accepts(lambda: OPS_REF[op](x)):
        pytest.skip(f"torch rejects {op} on {dtype}")
    try:
        fd_ok = fusion(lambda fd: fd.add_output(getattr(fd.ops, op)(define_input(fd, x))))
        fd_ok.reference([x])
    except (PyfuserError, RuntimeError, TypeError) as err:
        pytest.skip(f"not definable for {dtype}: {err}")

    def build(fd):
        fd.add_output(getattr(fd.ops, op)(define_input(fd, x)))

    _run(build, [x], f"{op}({dtype})", TOL.get(op))


# --- binary ------------------------------------------------------------------------


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_fp32(op):
    a, b = float_pair(gen_for("binary", op))
    if op in INT_ONLY:
        pytest.skip(f"{op} takes integers only")

    def build(fd):
        fd.add_output(getattr(fd.ops, op)(define_input(fd, a), define_input(fd, b)))

    _run(build, [a, b], f"{op}(fp32, fp32)", TOL.get(op))


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_fp32_broadcast_and_scalars(op):
    """[7, 129] with a [129] row (broadcast), a constant and a runtime scalar on the left."""
    if op in INT_ONLY:
        pytest.skip(f"{op} takes integers only")
    gen = gen_for("binary_b", op)
    a = float_input(gen)
    row = float_input(gen, shape=(SHAPE[1],), special=False)

    def build(fd):
        ta, tr = define_input(fd, a), define_input(fd, row)
        f = getattr(fd.ops, op)
        fd.add_output(f(ta, fd.ops.broadcast_in_dim(tr, shape=list(SHAPE), broadcast_dims=[1])))

    _run(build, [a, row], f"{op}(fp32, row)", TOL.get(op))
    for scalar in (2.5, -0.75, 3.0):
        _run(lambda fd: fd.add_output(getattr(fd.ops, op)(define_input(fd, a), fd.define_scalar(scalar))),
             [a], f"{op}(fp32, {scalar})", TOL.get(op))




@pytest.mark.parametrize("op", ["add", "mul", "div", "pow", "atan2", "maximum", "lt"])
def test_binary_runtime_scalar(op):
    """A scalar given at execute time (define_scalar without a value), on the left."""
    a = float_input(gen_for("binary_rt", op))

    def build(fd):
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(getattr(fd.ops, op)(s, define_input(fd, a)))

    for scalar in (2.5, -0.75):
        _run(build, [scalar, a], f"{op}(runtime {scalar}, fp32)", TOL.get(op))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_int_bool(op, dtype):
    gen = gen_for("binary_int", op, str(dtype))
    positive = op in ("pow",)
    a, b = int_input(gen, dtype, positive=positive), int_input(gen, dtype, positive=True if op == "pow" else False)
    if op == "pow" and dtype != torch.bool:
        b = (b % 4).to(dtype)  # small exponents stay in range
    if not _torch_accepts(lambda: OPS_REF[op](a, b)):
        pytest.skip(f"torch rejects {op} on {dtype}")
    try:
        fd = fusion(lambda fd: fd.add_output(getattr(fd.ops, op)(define_input(fd, a), define_input(fd, b))))
    except PyfuserError as err:
        pytest.skip(f"not definable: {err}")
    a, b = _on_device([a, b])
    want = fd.reference([a, b])[0]
    got = fd.execute([a, b])[0]
    assert_matches(got, want, what=f"{op}({dtype})", tol=TOL.get(op) or (DEFAULT_TOL if want.dtype.is_floating_point
                                                                         else None))


@pytest.mark.parametrize("op", ["add", "mul", "div", "maximum", "atan2", "lt", "pow", "fmod", "remainder"])
def test_binary_mixed_dtypes(op):
    """int32 with fp32, and fp16 with fp32: promoted like eager, computed once."""
    gen = gen_for("mixed", op)
    i = int_input(gen, torch.int32, positive=True)
    f = float_input(gen, special=False).abs() + 0.5
    h = float_input(gen, special=False).clamp(-60000, 60000).to(torch.float16)
    for a, b in ((i, f), (f, i), (h, f)):
        a, b = _on_device([a, b])
        fd = fusion(lambda fd: fd.add_output(getattr(fd.ops, op)(define_input(fd, a), define_input(fd, b))))
        want = fd.reference([a, b])[0]
        got = fd.execute([a, b])[0]
        tol = None if not want.dtype.is_floating_point else (TOL.get(op) or DEFAULT_TOL)
        assert_matches(got, want, what=f"{op}({a.dtype}, {b.dtype})", tol=tol)


# --- integer edge cases and threshold ------------------------------------------------


def _int_pair_run(op, a, b):
    a, b = _on_device([a, b])
    fd = fusion(lambda fd: fd.add_output(getattr(fd.ops, op)(define_input(fd, a), define_input(fd, b))))
    got, want = fd.execute([a, b])[0], fd.reference([a, b])[0]
    assert_matches(got, want, what=f"{op}({a.dtype})")
    return got.cpu()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("op", ["bitwise_left_shift", "bitwise_right_shift", "logical_right_shift"])
def test_shifts_by_every_amount(op, dtype):
    """Shifts by -3 .. width + 3 of negative and positive values: torch's answers past the
    width (0, or the sign for >>), which C and LLVM leave undefined."""
    width = torch.iinfo(dtype).bits
    s = torch.arange(-3, width + 4, dtype=dtype)
    x = torch.tensor([-7, 5, -1, torch.iinfo(dtype).min, torch.iinfo(dtype).max], dtype=dtype)
    a, b = x.repeat_interleave(len(s)), s.repeat(len(x))
    got = _int_pair_run(op, a, b)
    if op != "logical_right_shift":
        assert torch.equal(got, OPS_REF[op](a, b))
    else:  # zeros shift in: the unsigned value's shift
        u = a.numpy().view(f"uint{width}")
        want = [int(v) >> int(k) if 0 <= k < width else 0 for v, k in zip(u, b.tolist())]
        assert got.numpy().view(f"uint{width}").tolist() == want


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=lambda d: str(d)[6:])
def test_gcd_longest_chains_and_signs(dtype):
    """Consecutive Fibonacci numbers take Euclid the most steps; negative operands, zeros
    and the most negative value (whose |x| wraps, as in torch) too."""
    fib = [1, 2]
    while fib[-1] + fib[-2] <= torch.iinfo(dtype).max:
        fib.append(fib[-1] + fib[-2])
    lo = torch.iinfo(dtype).min
    a = torch.tensor([fib[-1], -fib[-2], fib[-3], 0, 0, -12, lo, 6, lo, 35], dtype=dtype)
    b = torch.tensor([fib[-2], fib[-1], -fib[-2], 0, -5, 18, 6, lo, lo, 0], dtype=dtype)
    got = _int_pair_run("gcd", a, b)
    assert torch.equal(got, torch.gcd(a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.int64], ids=lambda d: str(d)[6:])
def test_threshold(dtype):
    gen = gen_for("threshold", str(dtype))
    x = float_input(gen).to(dtype) if dtype.is_floating_point else int_input(gen, dtype)
    for limit, value in ((0.5, -2.0), (-0.5, 7.0), (3, 0)):
        def build(fd):
            fd.add_output(fd.ops.threshold(define_input(fd, x), limit, value))

        got, want = _run(build, [x], f"threshold({dtype}, {limit}, {value})")
        assert_matches(got, torch.threshold(x, limit, value), what=f"threshold({dtype}) vs eager",
                       tol=DEFAULT_TOL if dtype.is_floating_point else None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=lambda d: str(d)[6:])
def test_nextafter_bits(dtype):
    """Bit-equal to torch where one ulp matters: from zero to the smallest subnormal (of
    either sign), between subnormals, to and from the largest finite value and the
    infinities, and x == y (which returns y: nextafter(0.0, -0.0) is -0.0)."""
    tiny = torch.finfo(dtype).smallest_normal
    big = torch.finfo(dtype).max
    inf = float("inf")
    pairs = [(0.0, 1.0), (-0.0, -1.0), (0.0, -0.0), (-0.0, 0.0), (tiny, 0.0), (-tiny, 0.0), (tiny / 4, 1.0),
             (big, inf), (inf, 0.0), (-inf, 0.0), (-big, -inf), (1.0, 1.0), (1.0, 2.0), (-1.0, 2.0), (1.0, -2.0)]
    a = torch.tensor([p[0] for p in pairs], dtype=dtype)
    b = torch.tensor([p[1] for p in pairs], dtype=dtype)
    got = _run(lambda fd: fd.add_output(fd.ops.nextafter(define_input(fd, a), define_input(fd, b))), [a, b],
               f"nextafter({dtype})")[0]
    bits = torch.int64 if dtype == torch.float64 else torch.int32
    assert torch.equal(got.view(bits), torch.nextafter(a, b).view(bits))
