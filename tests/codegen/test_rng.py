"""Random numbers in generated kernels (Philox-4x32-10 on the logical element index).

The values must be the reference executor's (uniform: bit for bit), must not depend
on the schedule (block sizes, persistent or multi-pass, one Philox call per element
or per 4), and must follow the seed/offset (explicit scalars, or PyTorch's generator
when none are given)."""
from __future__ import annotations

import math

import pytest
import torch

from pyfuser.reference import run_reference
from pyfuser.rng import reference_random
from pyfuser.runtime.args import make_rng_state
from pyfuser.schedulers import Choices

from .common import DataType, check, define_input, fusion, gen_for, kernels_of, launches, make_tensor


def _explicit(dist="uniform", shape=(37, 129), dtype=DataType.Float, p=(0.0, 1.0)):
    """``dist`` with runtime rng_seed / rng_offset scalars: inputs are [seed, offset]."""

    def build(fd):
        seed = fd.define_scalar(dtype=DataType.Int)
        off = fd.define_scalar(dtype=DataType.Int)
        lo, hi = (fd.define_scalar(v) for v in p)
        fd.add_output(getattr(fd.ops, dist)(lo, hi, shape=list(shape), dtype=dtype, rng_seed=seed, rng_offset=off))

    return fusion(build)


def _uniform_ok(u: torch.Tensor):
    n = u.numel()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.double().mean().item() - 0.5) < 4 * math.sqrt(1 / 12 / n)
    hist = torch.histc(u.double(), bins=10, min=0.0, max=1.0)
    expected = n / 10
    assert (hist - expected).abs().max().item() < 5 * math.sqrt(expected), hist


def test_same_seed_offset_same_bits_and_reference():
    fd = _explicit()
    a = fd.execute([123456789, 8])[0]
    b = fd.execute([123456789, 8])[0]
    assert torch.equal(a, b)
    fd2 = _explicit()  # an independent definition of the same fusion
    assert torch.equal(fd2.execute([123456789, 8])[0], a)
    assert torch.equal(a, fd.reference([123456789, 8])[0])  # bit for bit
    _uniform_ok(a)


@pytest.mark.parametrize("seed,offset", [(0, 0), (1, 4), (2**32 + 5, 12), (2**62 + 3, 2**33 + 4), (7, 2**32)])
def test_uniform_matches_reference_bits(seed, offset):
    """Seeds and offsets past 32 bits use the high Philox words."""
    fd = _explicit(shape=(5, 1001))
    got = fd.execute([seed, offset])[0]
    assert torch.equal(got, fd.reference([seed, offset])[0])
    _uniform_ok(got)


def test_different_offsets_and_seeds_differ():
    fd = _explicit(shape=(4096,))
    base = fd.execute([99, 0])[0]
    for args in ([99, 4], [99, 8], [99, 2**32], [100, 0], [99 + 2**32, 0]):
        other = fd.execute(args)[0]
        assert (other != base).float().mean() > 0.99, args
        _uniform_ok(other)


def test_normal_statistics_and_reference():
    fd = _explicit("normal", shape=(8191,))
    z = fd.execute([2024, 16])[0]
    n = z.numel()
    assert abs(z.double().mean().item()) < 4 / math.sqrt(n)
    assert abs(z.double().std().item() - 1) < 0.05
    assert z.abs().max() < 6.5 and torch.isfinite(z).all()
    torch.testing.assert_close(z, fd.reference([2024, 16])[0], rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("dist,p", [("uniform", (-2.0, 3.0)), ("normal", (1.5, 0.25))])
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Half, DataType.BFloat16], ids=repr)
def test_parameters_and_dtypes(dist, p, dtype):
    fd = _explicit(dist, shape=(13, 77), dtype=dtype, p=p)
    got = fd.execute([31337, 4])[0]
    want = fd.reference([31337, 4])[0]
    if dist == "uniform" and dtype is DataType.Float:
        assert torch.equal(got, want)
    tol = {DataType.Float: (1e-5, 1e-5), DataType.Half: (2e-3, 2e-3), DataType.BFloat16: (1.6e-2, 1.6e-2)}[dtype]
    torch.testing.assert_close(got, want, rtol=tol[0], atol=tol[1])
    g = got.double()
    if dist == "uniform":
        assert g.min() >= p[0] and g.max() <= p[1] and abs(g.mean().item() - 0.5) < 0.15
    else:
        assert abs(g.mean().item() - p[0]) < 0.05 and abs(g.std().item() - p[1]) < 0.03


# --- independence from the schedule ------------------------------------------------


def _dropout_softmax(shape, dist="rand_like"):
    """softmax over rows, then dropout with an explicit seed: a random op inside a
    normalization kernel.  Inputs: x, seed, offset."""
    R, V = shape

    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        seed = fd.define_scalar(dtype=DataType.Int)
        off = fd.define_scalar(dtype=DataType.Int)
        t = fd.ops.cast(x, dtype=DataType.Float)
        e = fd.ops.exp(fd.ops.sub(t, fd.ops.max(t, dims=[1], keepdim=True)))
        y = fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True))
        r = getattr(fd.ops, dist)(y, rng_seed=seed, rng_offset=off)
        keep = fd.ops.gt(r, fd.define_scalar(0.1))
        fd.add_output(r)
        fd.add_output(keep)
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.cast(keep, dtype=DataType.Float), y), dtype=DataType.Half))

    return fusion(build)


REDUCTION_SCHEDULES = {
    "persistent": {"persistent": True, "quad_rng": False},
    "persistent_quad": {"persistent": True, "quad_rng": True},
    "multipass_16": {"persistent": False, "block_j": 16, "quad_rng": False},
    "multipass_quad_8": {"persistent": False, "block_j": 8, "quad_rng": True},
    "one_row_per_program": {"persistent": True, "block_k": 1},
    "peeled_persistent": {"persistent": True, "block_k": 1, "align": 8},
    "peeled_multipass": {"persistent": False, "block_k": 1, "block_j": 32, "align": 8},
}


@pytest.mark.parametrize("dist", ["rand_like", "randn_like"])
@pytest.mark.parametrize("shape", [(3, 36), (5, 129), (2, 1001)], ids=str)
def test_reduction_schedules_give_identical_bits(shape, dist):
    gen = gen_for("sched_bits", shape, dist)
    x = make_tensor(shape, torch.float16, gen)
    fd = _dropout_softmax(shape, dist)
    args = [x, 987654321, 8]
    want = fd.reference(args)
    first = None
    distinct = set()
    for name, params in REDUCTION_SCHEDULES.items():
        if "quad" in name and shape[1] % 4:
            params = {**params, "quad_rng": False}  # the scheduler only sets it for J % 4 == 0
        if not params["persistent"] and shape[1] > 200:
            params = {**params, "block_j": params["block_j"] * 8}  # fewer interpreted loop trips
        distinct.add(tuple(sorted(params.items())))
        with Choices(**params):
            got = fd.execute(args)
        if dist == "rand_like":
            assert torch.equal(got[0], want[0]), f"{name}: not the reference's bits"
        else:
            torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=2e-5, msg=lambda m: f"{name}: {m}")
        assert torch.equal(got[1], want[1]) or dist == "randn_like", name
        if first is None:
            first = got
        else:
            for i, (g, f) in enumerate(zip(got, first)):
                assert torch.equal(g, f), f"schedule {name} changed output {i}"
    # every variant compiled its own kernel (the overrides took effect)
    assert len(kernels_of(fd)) == len(distinct)


@pytest.mark.parametrize("dist", ["uniform", "normal"])
@pytest.mark.parametrize("shape", [(7,), (129,), (3, 1001), (2, 3, 37)], ids=str)
def test_pointwise_block_sizes_give_identical_bits(shape, dist):
    fd = _explicit(dist, shape=shape)
    outs = []
    n = math.prod(shape)
    for block in ((None, 4, 16, 64) if n < 1000 else (None, 64, 256, 1024)):
        with Choices(**({} if block is None else {"block": block})):
            outs.append(fd.execute([77, 12])[0])
    for o in outs[1:]:
        assert torch.equal(o, outs[0])
    want = fd.reference([77, 12])[0]
    if dist == "uniform":
        assert torch.equal(outs[0], want)
    else:
        torch.testing.assert_close(outs[0], want, rtol=1e-5, atol=2e-5)


def test_random_reached_through_permute_and_broadcast():
    """The value belongs to the random op's own element index, whichever tensor the
    kernel walks: a [5, 7] uniform read transposed, and a [5, 1] normal broadcast."""
    gen = gen_for("perm_rng")
    x = make_tensor((7, 5), torch.float32, gen)

    def build(fd):
        tx = define_input(fd, x)
        seed = fd.define_scalar(dtype=DataType.Int)
        off = fd.define_scalar(dtype=DataType.Int)
        zero, one = fd.define_scalar(0.0), fd.define_scalar(1.0)
        u = fd.ops.uniform(zero, one, shape=[5, 7], rng_seed=seed, rng_offset=off)
        n = fd.ops.normal(zero, one, shape=[5, 1], rng_seed=seed, rng_offset=off)
        nb = fd.ops.broadcast_in_dim(n, shape=[5, 7], broadcast_dims=[0, 1])
        fd.add_output(fd.ops.add(tx, fd.ops.permute(fd.ops.add(u, nb), dims=[1, 0])))

    fd = fusion(build)
    check(fd, [x, 5, 4], n_launches=1, tol=(1e-5, 2e-5))


# --- the generator's state, when no seed is given ---------------------------------


def _implicit(shape=(9, 129)):
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        r1 = fd.ops.rand_like(x)
        r2 = fd.ops.rand_like(x)  # a second random op: the next offset
        fd.add_output(fd.ops.mul(x, r1))
        fd.add_output(r2)

    return fusion(build)


def test_manual_seed_replays_and_consecutive_executes_differ():
    fd = _implicit()
    x = make_tensor((9, 129), torch.float32, gen_for("implicit"))
    torch.manual_seed(7)
    a1 = fd.execute([x])
    a2 = fd.execute([x])
    torch.manual_seed(7)
    b1 = fd.execute([x])
    b2 = fd.execute([x])
    for g, w in zip(a1 + a2, b1 + b2):
        assert torch.equal(g, w)
    assert (a1[0] != a2[0]).float().mean() > 0.99
    assert (a1[1] != a2[1]).float().mean() > 0.99
    # the two random ops of one execute are independent streams
    assert (a1[0] / x != a1[1]).float().mean() > 0.99
    _uniform_ok(a1[1])
    torch.manual_seed(8)
    c1 = fd.execute([x])
    assert (c1[1] != a1[1]).float().mean() > 0.99


@pytest.mark.parametrize("nth", [0, 1])
def test_implicit_state_matches_reference(nth):
    """Execute after manual_seed(s) equals the reference run with the state
    make_rng_state draws after manual_seed(s), on the first and on a cached execute."""
    fd = _implicit()
    x = make_tensor((9, 129), torch.float32, gen_for("implicit_ref"))
    if nth:
        fd.execute([x])  # the next execute takes the cached path
    torch.manual_seed(11)
    with launches() as n:
        got = fd.execute([x])
    assert n[0] == 1
    torch.manual_seed(11)
    state, _ = make_rng_state(fd.ir, x.device)
    want = run_reference(fd.ir, [x], rng_state=state)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


# -- a uniform draw compared with a constant tests its integers ------------------------------
_CONSTANTS = (0.1, 0.5, 0.25, 1 / 3, 0.0, 1.0, -0.3, 1.5, 2.0**-24, 1 - 2.0**-24, 7)


def test_integer_comparison_has_the_float_comparisons_truth():
    """n > floor(x) and its kin against (n * 2**-24) op fp32(c), for every n at the
    thresholds and around them, each op, the draw on either side."""
    from pyfuser.codegen.random import integer_comparison

    ops = {"gt": torch.gt, "ge": torch.ge, "lt": torch.lt, "le": torch.le}
    for c in _CONSTANTS:
        c32 = torch.tensor(c, dtype=torch.float32)
        x = int(c32.double().item() * 2**24)
        lo, hi = min(max(0, x - 3), 2**24), min(max(0, x + 4), 2**24)
        n = torch.cat([torch.arange(lo, hi), torch.tensor([0, 1, 2**24 - 1])])
        u = n.to(torch.float32) * 2.0**-24  # exact
        for op, fn in ops.items():
            for left in (True, False):
                expr = integer_comparison(op, "n", c, random_left=left)
                got = eval(expr, {"n": n})  # noqa: S307 - the emitted comparison, on torch ints
                want = fn(u, c32) if left else fn(c32, u)
                assert torch.equal(got, want), (c, op, left, expr)


@pytest.mark.parametrize("op", ["gt", "ge", "lt", "le"])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("c", [0.1, 0.25, 1.5])
def test_dropout_keep_test_on_integers_matches_reference(op, left, c):
    """rand_like(x) op c (and c op rand_like(x)) in a kernel: the comparison is made on
    the draw's integers (the generated code has no float compare with c) and keeps
    the reference's mask bit for bit."""
    x = make_tensor((33, 256), torch.float32, gen_for("keep test", op, left, c))  # an fp32 draw

    def build(fd):
        xi = define_input(fd, x)
        u = fd.ops.rand_like(xi, rng_seed=fd.define_scalar(dtype=DataType.Int), rng_offset=fd.define_scalar(dtype=DataType.Int))
        k = fd.define_scalar(c)
        keep = getattr(fd.ops, op)(u, k) if left else getattr(fd.ops, op)(k, u)
        fd.add_output(keep)
        fd.add_output(fd.ops.where(keep, xi, 0.0))

    fd = fusion(build)
    got = fd.execute([x, 4242, 16])
    want = fd.reference([x, 4242, 16])
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    (src, _), = [v for v in fd._runtime.kernels.values()]
    assert f"> {c!r})" not in src.source and f"< {c!r})" not in src.source


# -- the upper bound stays exclusive after rounding ---------------------------------------
# (lo, hi, dtype, shape): ranges where a draw often rounds to hi (fp32 values lo + k *
# ulp(lo) with k = round(8u) for fp32/fp64, a quarter of that for fp16/bf16), and
# U(0, 1) stored at 16 bits (u >= 1 - 2**-12 rounds to 1.0 in fp16).
BOUND_CASES = [
    (1.0, 1.0 + 2.0**-20, DataType.Float, (129,)),
    (1.0, 1.0 + 2.0**-49, DataType.Double, (129,)),
    (1.0, 1.0 + 2.0**-8, DataType.Half, (129,)),
    (-1.0 - 2.0**-5, -1.0, DataType.BFloat16, (129,)),
    (0.0, 1.0, DataType.Half, (64, 256)),
    (0.0, 1.0, DataType.BFloat16, (64, 256)),
]


def _rounds_to_hi(lo, hi, dtype, shape, seed, offset):
    """How many draws the plain rule (lo + (hi - lo) * u, rounded) takes to hi: the
    case must have some, or the test could not fail."""
    cdt = torch.float64 if dtype is DataType.Double else torch.float32
    u = reference_random("uniform", shape, 0.0, 1.0, seed, offset, cdt, "cpu")
    lo_c, hi_c = torch.tensor(lo, dtype=cdt), torch.tensor(hi, dtype=cdt)
    plain = (lo_c + (hi_c - lo_c) * u).to(dtype.torch)
    return int((plain >= hi_c.to(dtype.torch)).sum())


@pytest.mark.parametrize("runtime", [False, True], ids=["constant_bounds", "runtime_bounds"])
@pytest.mark.parametrize("lo,hi,dtype,shape", BOUND_CASES, ids=lambda v: repr(v) if isinstance(v, DataType) else None)
def test_uniform_upper_bound_exclusive_after_rounding(lo, hi, dtype, shape, runtime):
    if runtime and dtype is DataType.Double:
        pytest.skip("a runtime fp64 scalar reaches a kernel as fp32 (Triton types Python floats so)")
    seed, offset = 4321, 3
    assert _rounds_to_hi(lo, hi, dtype, shape, seed, offset) > 0

    def build(fd):
        s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        a, b = ((fd.define_scalar(dtype=DataType.Double) for _ in range(2)) if runtime
                else (fd.define_scalar(lo), fd.define_scalar(hi)))
        fd.add_output(fd.ops.uniform(a, b, shape=list(shape), dtype=dtype, rng_seed=s, rng_offset=o))

    fd = fusion(build)
    args = [seed, offset] + ([lo, hi] if runtime else [])
    got, = fd.execute(args)
    want, = fd.reference(args)
    hi_d = torch.tensor(hi, dtype=torch.float32 if dtype is not DataType.Double else torch.float64).to(dtype.torch)
    lo_d = torch.tensor(lo, dtype=torch.float32 if dtype is not DataType.Double else torch.float64).to(dtype.torch)
    for out in (got, want):
        assert out.dtype == dtype.torch and out.max() < hi_d and out.min() >= lo_d
    if dtype is not DataType.BFloat16:  # the interpreter's bf16 conversion truncates
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1.6e-2)


def test_reversed_uniform_range_is_not_clamped():
    """uniform(hi, lo) with hi > lo (nvFuser does not reject it) scales u as given:
    the exclusive-bound rule applies only to a proper range."""
    fd = _explicit(shape=(257,), p=(1.0, 0.0))
    got, = fd.execute([9, 1])
    assert torch.equal(got, fd.reference([9, 1])[0])
    assert got.min() > 0.0 and got.max() <= 1.0
    assert torch.equal(got, 1.0 - _explicit(shape=(257,)).execute([9, 1])[0])


# -- stateful (the generator's) and stateless (rng_seed / rng_offset) draws agree ------------
_RANDOM_OPS = {
    "uniform": lambda fd, x, dt, **kw: fd.ops.uniform(fd.define_scalar(-0.5), fd.define_scalar(2.0),
                                                      shape=[5, 9], dtype=dt, **kw),
    "normal": lambda fd, x, dt, **kw: fd.ops.normal(fd.define_scalar(0.3), fd.define_scalar(1.7),
                                                    shape=[5, 9], dtype=dt, **kw),
    "rand_like": lambda fd, x, dt, **kw: fd.ops.rand_like(x, **kw),
    "randn_like": lambda fd, x, dt, **kw: fd.ops.randn_like(x, **kw),
}


def _stateful_pair(ops, dtype):
    """The same fusion twice: random ops drawing the generator's state, and written
    with runtime rng_seed / rng_offset (inputs x, then seed and offset of each op)."""

    def build(fd, stateless):
        x = fd.define_tensor(shape=[5, 9], contiguity=[True, True], dtype=dtype)
        for op in ops:
            kw = {}
            if stateless:
                kw = dict(rng_seed=fd.define_scalar(dtype=DataType.Int), rng_offset=fd.define_scalar(dtype=DataType.Int))
            r = _RANDOM_OPS[op](fd, x, dtype, **kw)
            fd.add_output(fd.ops.mul(x, r))

    return fusion(lambda fd: build(fd, False)), fusion(lambda fd: build(fd, True))


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Half, DataType.BFloat16, DataType.Double], ids=repr)
@pytest.mark.parametrize("ops", [("uniform",), ("normal",), ("rand_like",), ("randn_like",),
                                 ("uniform", "randn_like", "rand_like")], ids="+".join)
def test_stateful_execute_i_is_stateless_offset_i(ops, dtype):
    """After torch.manual_seed(s), the i-th execute draws what rng_seed=s,
    rng_offset=n*i+k draws for random op k of n (nvFuser's contract), bit for bit."""
    stateful, stateless = _stateful_pair(ops, dtype)
    x = make_tensor((5, 9), dtype.torch, gen_for("stateful", ops, dtype))
    n = len(ops)
    for seed in (0, 2**63 - 25, 123456789):
        torch.manual_seed(seed)
        got = [stateful.execute([x]) for _ in range(3)]
        for i, outs in enumerate(got):
            args = [x] + [v for k in range(n) for v in (seed, n * i + k)]
            want = stateless.execute(args)
            for k, (g, w) in enumerate(zip(outs, want)):
                assert torch.equal(g, w), f"execute {i}, random op {k}"
        assert not torch.equal(got[0][0], got[1][0])


def test_stateful_draws_replay_after_other_random_calls():
    """When torch's generator served other draws after manual_seed (inputs made with
    torch.randn), the executes still replay after the same seed and the same calls,
    and consecutive executes still draw new numbers."""
    stateful, _ = _stateful_pair(("rand_like", "randn_like"), DataType.Float)
    runs = []
    for _ in range(2):
        torch.manual_seed(77)
        x = torch.randn(5, 9) + 3.0
        runs.append([stateful.execute([x]) for _ in range(2)])
    for a, b in zip(*runs):
        for g, w in zip(a, b):
            assert torch.equal(g, w)
    assert not torch.equal(runs[0][0][0], runs[0][1][0])


# -- random values at 16 bits do not depend on the schedule either ------------------------
@pytest.mark.parametrize("shape", [(3, 36), (5, 129)], ids=str)
def test_half_random_values_identical_across_reduction_schedules(shape):
    """rand_like of an fp16 tensor inside a softmax kernel (its value rounded and kept
    below 1), under every reduction schedule: the reference's bits each time."""
    gen = gen_for("sched_bits_half", shape)
    x = make_tensor(shape, torch.float16, gen)

    def build(fd):
        xi = define_input(fd, x)
        seed, off = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        t = fd.ops.cast(xi, dtype=DataType.Float)
        e = fd.ops.exp(fd.ops.sub(t, fd.ops.max(t, dims=[1], keepdim=True)))
        y = fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)), dtype=DataType.Half)
        r = fd.ops.rand_like(y, rng_seed=seed, rng_offset=off)
        fd.add_output(r)
        fd.add_output(fd.ops.lt(r, 0.75))

    fd = fusion(build)
    args = [x, 2**40 + 17, 6]
    want = fd.reference(args)
    for name, params in REDUCTION_SCHEDULES.items():
        if "quad" in name and shape[1] % 4:
            params = {**params, "quad_rng": False}
        with Choices(**params):
            got = fd.execute(args)
        for g, w in zip(got, want):
            assert torch.equal(g, w), name
        assert got[0].max() < 1.0


def test_saved_and_restored_generator_state_replays_and_continues():
    """torch.set_rng_state(saved) replays what followed the save (fd.validate and
    benchmarks swap states so), and validate between executes keeps execute i at
    offset i."""
    stateful, stateless = _stateful_pair(("rand_like",), DataType.Float)
    x = make_tensor((5, 9), torch.float32, gen_for("restore"))
    torch.manual_seed(5)
    stateful.execute([x])
    saved = torch.get_rng_state()
    a = stateful.execute([x])[0]
    torch.set_rng_state(saved)
    assert torch.equal(stateful.execute([x])[0], a)
    torch.manual_seed(5)
    got = []
    for _ in range(3):
        stateful.validate([x])
        got.append(stateful.execute([x])[0])
    for i, g in enumerate(got):
        assert torch.equal(g, stateless.execute([x, 5, 2 * i + 1])[0]), i
