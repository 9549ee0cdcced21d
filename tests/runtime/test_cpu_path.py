"""The CPU path (generated kernels under Triton's interpreter) gives what the GPU
path gives: kernels that crashed or computed wrong values there, each checked
against PyTorch eager and the reference executor."""
import pytest
import torch

from pyfuser import DataType, FusionDefinition


def tensor(fd, rank, dtype=DataType.Float, ones=()):
    return fd.define_tensor(shape=[1 if d in ones else -1 for d in range(rank)], contiguity=[True] * rank,
                            dtype=dtype)


def run(fd, inputs, want):
    outs = fd.execute(inputs)
    assert len(outs) == len(want)
    for got, ref in zip(outs, want):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    fd.validate(inputs)
    return outs


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("value", [True, False])
def test_runtime_bool_scalar(value):
    """A Bool scalar input is an int1 kernel argument."""
    x = torch.randn(3, 5, generator=gen(1))
    b = x > 0
    with FusionDefinition() as fd:
        t, m, s = tensor(fd, 2), tensor(fd, 2, DataType.Bool), fd.define_scalar(dtype=DataType.Bool)
        fd.add_output(fd.ops.add(t, s))
        fd.add_output(fd.ops.logical_or(m, s))
    run(fd, [x, b, value], [x + value, b | value])


@pytest.mark.parametrize("op", ["logical_and", "logical_or"])
def test_logical_op_with_a_uniform_float_operand(op):
    """``x != 0`` of a runtime Double scalar is a uniform int1 that broadcasts
    against the tensor's block."""
    b = torch.randn(3, 5, generator=gen(2)) > 0
    x = torch.randn(3, 5, generator=gen(3))
    with FusionDefinition() as fd:
        m, t, s = tensor(fd, 2, DataType.Bool), tensor(fd, 2), fd.define_scalar(dtype=DataType.Double)
        fd.add_output(getattr(fd.ops, op)(m, s))
        fd.add_output(getattr(fd.ops, op)(s, t))
    fn = getattr(torch, op)
    for value in (2.5, 0.0):
        run(fd, [b, x, value], [fn(b, torch.tensor(value)), fn(torch.tensor(value), x)])


def test_row_loop_index_is_a_tensor():
    """A normalization's side output of another shape is stored over its own rows,
    whose index a magic-number division unravels (``k_o.to(tl.uint64)``)."""
    g = gen(4)
    x, y, z = torch.randn(3, 5, 7, 8, generator=g), torch.randn(3, 1, 7, 8, generator=g), \
        torch.randn(3, 1, 1, 8, generator=g)
    with FusionDefinition() as fd:
        t0, t1, t2 = tensor(fd, 4), tensor(fd, 4, ones=(1,)), tensor(fd, 4, ones=(1, 2))
        a = fd.ops.add(t0, t1)
        fd.add_output(fd.ops.sub(a, fd.ops.sum(a, dims=[3], keepdim=True)))
        fd.add_output(fd.ops.mul(t1, t2))
    out, side = fd.execute([x, y, z])
    torch.testing.assert_close(out, (x + y) - (x + y).sum(3, keepdim=True))
    torch.testing.assert_close(side, y * z)
    fd.validate([x, y, z])


@pytest.mark.parametrize("dt", [DataType.Int, DataType.Int32])
@pytest.mark.parametrize("red", ["min", "max"])
def test_integer_identity_in_the_accumulators_type(dt, red):
    """sign of an int64 tensor, and a where of two constants, are int64 values: the
    reduction's identity (2**63 - 1 for min) fits their accumulator."""
    i = torch.randint(-9, 9, (4, 6), generator=gen(5)).to(dt.torch)
    with FusionDefinition() as fd:
        t = tensor(fd, 2, dt)
        w = fd.ops.where(fd.ops.gt(t, 0), fd.define_scalar(1, dtype=dt), fd.define_scalar(-2, dtype=dt))
        for v in (fd.ops.sign(t), w):
            fd.add_output(getattr(fd.ops, red)(v, dims=[0, 1]))
            fd.add_output(getattr(fd.ops, red)(v, dims=[1]))
    fn = getattr(torch, f"a{red}")
    w = torch.where(i > 0, 1, -2).to(i.dtype)
    outs = fd.execute([i])
    want = [fn(torch.sign(i)), fn(torch.sign(i), 1), fn(w), fn(w, 1)]
    for got, ref in zip(outs, want):
        assert torch.equal(got, ref.to(got.dtype))
    assert outs[0].dtype == i.dtype
    fd.validate([i])


@pytest.mark.parametrize("value", [2**40 + 1, -(2**40) - 3, 2**31, 2**63 - 1])
def test_int32_tensor_and_an_int_constant_out_of_its_range(value):
    """torch converts the number to the tensor's int32, wrapping it: so does the kernel."""
    i = torch.randint(-100, 100, (3, 5), generator=gen(6), dtype=torch.int32)
    with FusionDefinition() as fd:
        t = tensor(fd, 2, DataType.Int32)
        fd.add_output(fd.ops.add(t, value))
        fd.add_output(fd.ops.mul(t, value))
    run(fd, [i], [i + value, i * value])


def test_pow_of_bool_tensors():
    b = torch.randn(3, 5, generator=gen(7)) > 0
    with FusionDefinition() as fd:
        t, s = tensor(fd, 2, DataType.Bool), fd.define_scalar(dtype=DataType.Bool)
        fd.add_output(fd.ops.pow(t, True))
        fd.add_output(fd.ops.pow(t, False))
        fd.add_output(fd.ops.pow(t, s))
    for value in (True, False):
        run(fd, [b, value], [torch.pow(b, True), torch.pow(b, False), torch.pow(b, value)])


def test_bf16_subnormals_are_kept():
    tiny = torch.tensor([1e-39, -1e-39, 9.2e-41, -3e-40, 0.0, -0.0, 1.5, -2.0], dtype=torch.bfloat16)
    assert (tiny[:4].float().abs() < torch.finfo(torch.bfloat16).tiny).all()  # subnormal
    with FusionDefinition() as fd:
        t = tensor(fd, 1, DataType.BFloat16)
        fd.add_output(fd.ops.gt(t, 0.0))
        fd.add_output(fd.ops.sign(t))
        fd.add_output(fd.ops.cast(t, DataType.Bool))
        fd.add_output(fd.ops.cast(t, DataType.Float))
        fd.add_output(fd.ops.mul(t, 1e30))
    want = [tiny > 0, torch.sign(tiny), tiny.bool(), tiny.float(), (tiny.float() * 1e30).to(torch.bfloat16)]
    run(fd, [tiny], want)


def test_exp2_of_integers_is_exact():
    """exp2 of an integer tensor is a float32 power of two, exact for every exponent
    float32 holds (numpy's float32 exp2 rounded 2**127 an ulp up)."""
    k = torch.arange(-149, 128, dtype=torch.int32)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.exp2(tensor(fd, 1, DataType.Int32)))
    want = torch.tensor([2.0 ** int(e) for e in k], dtype=torch.float64).float()
    run(fd, [k], [want])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", ["exp", "exp2", "log", "log2", "log10", "sin", "cos"])
def test_transcendentals_as_accurate_as_eager(op, dtype):
    """The interpreter's exp, exp2, log, log2, sin and cos are eager's on CPU, bit for
    bit (numpy's float32 exp, exp2, sin and cos were up to 2.5 ulp off), and so is
    log10 (once log2(x) * log10(2), rounded twice)."""
    x = torch.empty(4096, dtype=dtype).uniform_(0.01 if op.startswith("log") else -80.0, 80.0, generator=gen(3))
    with FusionDefinition() as fd:
        fd.add_output(getattr(fd.ops, op)(tensor(fd, 1, DataType.Float if dtype == torch.float32 else DataType.Double)))
    run(fd, [x], [getattr(torch, op)(x)])
