"""Scalar arithmetic on runtime scalar inputs inside a fusion (Adam's ``1 - beta1``,
``sqrt(c2)``): binding evaluates it on the host once per execute and the kernel takes
the results as scalar arguments, so the fusion is one kernel and a repeat execute is
the cached ``Prepared.run`` (its ``ScalarProgram`` recomputes the scalars from each
execute's inputs), with results equal to the reference executor's for every value."""
import math
import struct

import pytest
import torch

import pyfuser
from pyfuser import DataType, FusionDefinition
from pyfuser.bench import training as T
from pyfuser.ir import extents
from pyfuser.ir.extents import scalar_result
from pyfuser.reference import run_reference
from pyfuser.runtime import executor

FL, DBL, INT, BF = DataType.Float, DataType.Double, DataType.Int, DataType.BFloat16
R, N = 8, 64


def define(build, *args):
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


@pytest.fixture
def slow_calls(monkeypatch):
    """How many executes took ``_execute_slow`` (bind, plan, prepare): a list of one."""
    counts = [0]
    slow = executor._execute_slow

    def counting_slow(*a, **k):
        counts[0] += 1
        return slow(*a, **k)

    monkeypatch.setattr(executor, "_execute_slow", counting_slow)
    return counts


def execute_each(fd, inputs_list, slow_calls, launches=1):
    """Execute every input list; the first compiles, the others must take the cached
    path with ``launches`` launches each.  Returns the outputs of each."""
    outs = []
    for k, inputs in enumerate(inputs_list):
        before = pyfuser.cache_info()
        outs.append(fd.execute(list(inputs)))
        after = pyfuser.cache_info()
        assert after["launches"] - before["launches"] == launches
        if k:
            assert after["hits"] - before["hits"] == launches and after["misses"] == before["misses"]
    assert slow_calls == [1], f"{slow_calls[0]} executes took the slow path"
    return outs


def assert_reference(fd, inputs, outs, **tol):
    for got, want in zip(outs, run_reference(fd.ir, list(inputs))):
        torch.testing.assert_close(got, want, equal_nan=True, **tol)


# -- the Adam step ------------------------------------------------------------------------
ADAM_SETTINGS = [  # lr, beta1, beta2, step
    (1e-3, 0.9, 0.999, 10),
    (3e-4, 0.8, 0.99, 1),
    (1e-2, 0.95, 0.9999, 1000),
    (5e-3, 0.5, 0.9, 3),
]


def adam_scalars(lr, b1, b2, step):
    return [lr, b1, b2, 1 - b1 ** step, 1 - b2 ** step]


def torch_adam(p, g, m, v, lr, b1, b2, step):
    param = torch.nn.Parameter(p.float().clone())
    opt = torch.optim.Adam([param], lr=lr, betas=(b1, b2), eps=T.ADAM_EPS, foreach=False)
    param.grad = g.float().clone()
    opt.state[param] = {"step": torch.tensor(float(step - 1)), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
    opt.step()
    st = opt.state[param]
    return param.detach().to(p.dtype), st["exp_avg"], st["exp_avg_sq"]


@pytest.mark.parametrize("dt", [FL, BF], ids=str)
def test_adam_step_is_one_cached_kernel_that_sees_new_scalars(dt, slow_calls):
    g = torch.Generator().manual_seed(3)
    p, gr = (torch.randn(R, N, generator=g).to(dt.torch) for _ in range(2))
    m, v = torch.randn(R, N, generator=g), torch.rand(R, N, generator=g) + 0.01
    fd = define(T.build_adam_step, (R, N, dt))
    inputs_list = [[p, gr, m, v, *adam_scalars(*s)] for s in ADAM_SETTINGS]
    outs = execute_each(fd, inputs_list, slow_calls)
    assert len(fd._runtime.programs) == 1
    loose = dict(rtol=1.6e-2, atol=1.6e-2) if dt is BF else dict(rtol=1e-5, atol=1e-6)
    for setting, inputs, (p_new, m_new, v_new) in zip(ADAM_SETTINGS, inputs_list, outs):
        assert_reference(fd, inputs, [p_new, m_new, v_new], rtol=1e-6, atol=1e-7)
        p_want, m_want, v_want = torch_adam(p, gr, m, v, *setting)
        torch.testing.assert_close(m_new, m_want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(v_new, v_want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p_new, p_want, **loose)


def test_adam_step_scalars_are_computed_per_run_and_launched_directly():
    """The three scalar-only exprs (1 - beta1, 1 - beta2, sqrt(c2)) are the program's
    targets; all scalar arguments are floats, so a CUDA launch may skip Triton's binding."""
    fd = define(T.build_adam_step, (R, N, FL))
    x = torch.rand(R, N) + 0.1
    fd.execute([x, x, x, x, *adam_scalars(*ADAM_SETTINGS[0])])
    (prep,) = fd._runtime.programs.values()
    assert [e.op for e in (v.definition for v in prep.scalars.targets)] == ["sub", "sub", "sqrt"]
    lr, b1, b2, c1, c2 = adam_scalars(*ADAM_SETTINGS[2])
    assert prep.scalars.run([x, x, x, x, lr, b1, b2, c1, c2]) == [1 - b1, 1 - b2, math.sqrt(c2)]
    assert prep.direct_ok == [True]


# -- scalar dtypes: Double, Float, Int, casts, comparisons, division by zero ---------------
def build_mixed(fd):
    """Each computed scalar scales its own output, so a wrong value shows."""
    t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=FL)
    s = fd.define_scalar(dtype=FL)
    n = fd.define_scalar(dtype=INT)
    d = fd.define_scalar(dtype=DBL)
    one_minus = fd.ops.sub(1.0, s)
    scalars = [
        one_minus,  # Double constant and Float: computed in fp64
        fd.ops.mul(n, 3),  # Int arithmetic stays Int
        fd.ops.div(one_minus, n),  # by an Int, zero included
        fd.ops.sqrt(s),  # NaN for negative s
        fd.ops.cast(d, dtype=FL),  # rounds to fp32
        fd.ops.pow(d, 3.0),
        fd.ops.where(fd.ops.gt(s, 0.5), d, fd.ops.neg(d)),
        fd.ops.add(fd.ops.mul(s, 2), fd.ops.abs(d)),
    ]
    for x in scalars:
        fd.add_output(fd.ops.mul(t, x))
    fd.add_output(fd.ops.add(t, fd.ops.full([R, N], fd.ops.mul(d, 0.5), FL)))


MIXED_VALUES = [  # s, n, d
    (0.25, 4, 1.1),
    (0.75, -3, 0.1),
    (-2.0, 0, -7.5),
    (1.0, 1, 3),  # a Double given as a Python int: its own fingerprint
    (1e-3, 2**40, 1e30),
]


def test_mixed_scalar_dtypes_match_the_reference_for_every_value(slow_calls):
    fd = define(build_mixed)
    t = torch.randn(R, N, generator=torch.Generator().manual_seed(5))
    inputs_list = [[t, s, n, d] for s, n, d in MIXED_VALUES]
    outs = []
    for inputs in inputs_list:
        outs.append(fd.execute(list(inputs)))
        assert_reference(fd, inputs, outs[-1], rtol=0, atol=0)
    assert slow_calls == [2]  # the int d makes a second fingerprint
    # eager, as a user writes it
    s, n, d = MIXED_VALUES[1]
    want = [t * (1 - s), t * (n * 3), t * ((1 - s) / n), t * math.sqrt(s),
            t * torch.tensor(d, dtype=torch.float32).item(), t * d ** 3.0, t * (d if s > 0.5 else -d), t * (s * 2 + abs(d)), t + d * 0.5]
    for got, w in zip(outs[1], want):
        torch.testing.assert_close(got, w, rtol=1.3e-6, atol=1e-7)


def test_scalar_input_given_as_a_0d_tensor(slow_calls):
    """A 0-d tensor for a scalar input is read with ``.item()`` on every run."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=FL)
        s = fd.define_scalar(dtype=FL)
        fd.add_output(fd.ops.mul(t, s))
        fd.add_output(fd.ops.add(t, fd.ops.sub(1.0, s)))
    x = torch.arange(6, dtype=torch.float32)
    for k, s in enumerate([0.5, 1.5, -4.0]):
        y, z = fd.execute([x, torch.tensor(s)])
        torch.testing.assert_close(y, x * s)
        torch.testing.assert_close(z, x + (1 - s))
    assert slow_calls == [1]


def test_constant_only_scalar_math_is_folded_once(slow_calls):
    """Scalar math on constants alone depends on no input: a constant argument."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=FL)
        fd.add_output(fd.ops.mul(t, fd.ops.sqrt(fd.ops.div(fd.define_scalar(2.0), 3.0))))
    x = torch.arange(5, dtype=torch.float32)
    outs = execute_each(fd, [[x], [x]], slow_calls)
    (prep,) = fd._runtime.programs.values()
    assert prep.scalars.targets == [] and prep.direct_ok == [True]
    torch.testing.assert_close(outs[1][0], x * math.sqrt(2.0 / 3.0))


def test_int_scalar_math_feeding_random_numbers(slow_calls):
    """rng_offset computed from an Int input: Int arithmetic, new values each execute,
    the same numbers as the reference; an int argument keeps Triton's binding."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=FL)
        seed = fd.define_scalar(dtype=INT)
        step = fd.define_scalar(dtype=INT)
        r = fd.ops.rand_like(t, rng_seed=seed, rng_offset=fd.ops.mul(step, 4))
        fd.add_output(fd.ops.mul(t, r))
    x = torch.rand(R, N) + 0.5
    inputs_list = [[x, 1234, step] for step in (0, 1, 7)]
    outs = execute_each(fd, inputs_list, slow_calls)
    for inputs, o in zip(inputs_list, outs):
        assert_reference(fd, inputs, o, rtol=0, atol=0)
    assert not torch.equal(outs[0][0], outs[1][0])
    (prep,) = fd._runtime.programs.values()
    assert prep.direct_ok == [False]


def test_general_path_reads_the_bound_scalars(slow_calls):
    """A host op (matmul) makes the plan general; its cached program's kernels read
    the scalars each execute computes."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=FL)
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=FL)
        s = fd.define_scalar(dtype=FL)
        fd.add_output(fd.ops.mul(fd.ops.matmul(fd.ops.exp(a), b), fd.ops.sub(1.0, s)))
    g = torch.Generator().manual_seed(9)
    a, b = torch.randn(4, 8, generator=g), torch.randn(8, 3, generator=g)
    for s in (0.25, 3.0):
        (out,) = fd.execute([a, b, s])
        torch.testing.assert_close(out, (a.exp() @ b) * (1 - s))
    assert slow_calls == [1]


# -- the exact fp64 shortcut of scalar_result ---------------------------------------------
EDGE = [0.0, -0.0, 1.0, -1.5, 0.1, 1 / 3, 1e-310, -1e-310, 1e308, -1e308, float("inf"), float("-inf"),
        float("nan"), 2.0 ** 53 + 1, 7, 2**53 + 1, -2**62 - 1]  # ints too: a Float input may be given one
INT_EDGE = [0, 1, -3, 2**53 + 1, 2**62, -2**63, 2**31 - 1]


def _scalar_expr(op, dtypes):
    with FusionDefinition() as fd:
        args = [fd.define_scalar(dtype=dt) for dt in dtypes]
        getattr(fd.ops, op)(*args)
    return fd.ir.exprs[-1]


def _same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return b != b
    return struct.pack("<d", a) == struct.pack("<d", b) if isinstance(a, float) else a == b


@pytest.mark.parametrize("op", sorted(extents._EXACT_FP64))
def test_exact_fp64_shortcut_is_torchs_result_bit_for_bit(op, monkeypatch):
    if op in ("neg", "abs"):
        cases = [((dt,), (x,)) for dt in (FL, DBL) for x in EDGE]
    else:
        cases = [((DBL, FL), (x, y)) for x in EDGE for y in EDGE]
        cases += [((INT, DBL), (i, y)) for i in INT_EDGE for y in EDGE]
        cases += [((FL, DataType.Int32), (x, i)) for x in EDGE for i in INT_EDGE if -2**31 <= i < 2**31]
        # an integer div by zero raises (both ways): see test_integer_div_by_zero_raises
        cases += [((INT, INT), (i, j)) for i in INT_EDGE[:3] for j in INT_EDGE[:3] if not (op == "div" and j == 0)]
    exprs = {dts: _scalar_expr(op, dts) for dts, _ in cases}
    fast = [scalar_result(exprs[dts], list(args)) for dts, args in cases]
    monkeypatch.setattr(extents, "_EXACT_FP64", {})
    slow = [scalar_result(exprs[dts], list(args)) for dts, args in cases]
    bad = [(dts, args, f, s) for (dts, args), f, s in zip(cases, fast, slow) if not _same(f, s)]
    assert not bad, bad[:5]
