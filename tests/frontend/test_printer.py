"""``repr(fd)`` is a runnable python definition: executing its text rebuilds a fusion
that prints the same and computes the same (the round trip)."""
from __future__ import annotations

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from pyfuser import DataType, Fusion, FusionDefinition
from pyfuser.bench.seeds import SEEDS

from ..helpers import assert_all_match, gen_for, make_tensor
from ..segment.fuzz_fusions import build, fusions


def rebuild(fd: FusionDefinition) -> FusionDefinition:
    """Exec ``repr(fd)`` and run the function it defines on a fresh current-API definition."""
    text = repr(fd)
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(compile(text, f"<repr of fusion {fd.id}>", "exec"), namespace)
    with FusionDefinition() as fd2:
        namespace["nvfuser_fusion"](fd2)
    return fd2


def _unnumbered(text: str) -> str:
    return re.sub(r"\b(tv|c)\d+\b", r"\1", text)


def plan_of(fd, inputs) -> list:
    """Each segment's scheduler and params, or why it runs as torch ops (``fd.explain``)."""
    return [(s.scheduler, s.params, s.host) for s in fd.explain(inputs).segments]


def assert_round_trip(fd, inputs):
    """The printed text rebuilds the fusion, which runs the same plan.  nvFuser's form
    numbers values in the order they were defined and prints ops depth first from the
    outputs: a definition rebuilt from it prints the same ops in the same order, and once
    it is defined in that order its text is a fixed point.  (The 2022 form rebuilds a
    current-API definition, which prints in nvFuser's form.)"""
    fd2 = rebuild(fd)
    fd3 = rebuild(fd2)
    assert not fd2.legacy_api and repr(rebuild(fd3)) == repr(fd3)
    assert _unnumbered(repr(fd3)) == _unnumbered(repr(fd2))
    if not fd.legacy_api:
        assert _unnumbered(repr(fd2)) == _unnumbered(repr(fd))
    # The text is the program that runs: the same kernels with the same params (a plan
    # split elsewhere rounds otherwise on the GPU, where contraction into FMAs follows the
    # kernel's expressions).
    assert plan_of(fd2, inputs) == plan_of(fd, inputs)
    torch.manual_seed(0)  # random ops without a seed draw from torch's generator
    want = fd.execute(inputs)
    torch.manual_seed(0)
    got = fd2.execute(inputs)
    assert_all_match(got, want, tol=(0.0, 0.0))


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_fusions_round_trip(name):
    case = SEEDS[name]
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        case.build(fd, *case.small_sizes)
    text = repr(fd)
    assert text.startswith("def nvfuser_fusion(fd : FusionDefinition) -> None :\n")
    assert "fd.ops.view" not in text and "axes=" not in text  # printed in the current API's spelling
    assert_round_trip(fd, case.make_inputs(case.small_sizes, "cpu", gen_for(name)))


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fusions())
def test_random_fusions_print_the_program_they_run(recipe):
    fd, inputs = build(recipe)
    assert plan_of(rebuild(fd), inputs) == plan_of(fd, inputs)


def test_a_sum_over_extent_1_dims_is_held_and_run_as_the_squeeze_it_prints():
    """nvFuser's test_ws_tma_normalization1's pattern: a row sum broadcast back to
    [1, N, 1], then summed over its extent-1 dims.  Held as a reduction it took a kernel
    of its own, while ``repr(fd)`` printed (and the rebuilt definition ran) a squeeze:
    another plan, whose row sums rounded otherwise on the GPU."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[1, -1, -1], contiguity=[None, True, True])
        t1 = fd.ops.sum(t0, dims=[0, 2])
        t2 = fd.ops.broadcast_in_dim(t1, shape=[1, t0.size(1), 1], broadcast_dims=[1])
        t3 = fd.ops.sum(fd.ops.mul(t2, 0.5), dims=[0, 2])
        fd.add_output(fd.ops.add(fd.ops.broadcast_in_dim(t3, shape=[1, t0.size(1), t0.size(2)],
                                                         broadcast_dims=[1]), t0))
    assert "fd.ops.squeeze(" in repr(fd) and [e.op for e in fd.ir.program].count("sum") == 1
    x = make_tensor((1, 6, 40), torch.float32, gen_for("printer", "sum-1"))
    assert_all_match(fd.execute([x]), [x.sum(2, keepdim=True) * 0.5 + x], tol=(1e-6, 1e-6))
    assert_round_trip(fd, [x])


def test_round_trip_of_many_op_kinds():
    x = make_tensor((4, 6), torch.float32, gen_for("rt-x"))
    h = make_tensor((6, 4), torch.float16, gen_for("rt-h")).t()
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, 6], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half, stride_order=[0, 1])
        s2 = fd.define_scalar(dtype=DataType.Double)
        t3 = fd.ops.where(fd.ops.gt(t0, 0.0), fd.ops.cast(t1, DataType.Float), s2)
        t4 = fd.ops.clamp(t3, min=-1.0, max=float("inf"))
        t5 = fd.ops.addcmul(t4, t0, t0, 0.5)
        t6 = fd.ops.lerp(t5, t0, 0.25)
        var, mean = fd.ops.var_mean(t6, dims=[1], correction=0, keepdim=True)
        t7 = fd.ops.permute(fd.ops.slice(t6, [0, 1], [4, 6], [1, 2]), [1, 0])
        t8 = fd.ops.pad(t7, [1, 0], float("-inf"))
        t9 = fd.ops.cat([t8, fd.ops.full([3, 4], float("nan"), DataType.Float)], 1)
        t10 = fd.ops.squeeze(fd.ops.reshape(t9, [1, -1]), [0])
        t11 = fd.ops.add(fd.ops.iota(27, 0.0, 0.5, DataType.Float), t10)
        t12 = fd.ops.rand_like(t0, rng_seed=3, rng_offset=4)
        t13 = fd.ops.uniform(-1.0, 1.0, shape=[5], dtype=DataType.Float, rng_seed=1, rng_offset=0)
        for t in (t3, var, mean, t11, t12, t13, fd.ops.sum(t0, dims=[0], dtype=DataType.Double)):
            fd.add_output(t)
    text = repr(fd)
    for fragment in ("stride_order=[0, 1]", 'float("inf")', 'float("nan")', 'float("-inf")', "define_scalar(None"):
        assert fragment in text
    assert_round_trip(fd, [x, h, -0.5])


def test_round_trip_of_runtime_rng_scalars_and_an_empty_fusion():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
        seed, offset = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.randn_like(t0, rng_seed=seed, rng_offset=offset))
    assert_round_trip(fd, [torch.ones(9, dtype=torch.bfloat16), 11, 8])
    with FusionDefinition() as empty:
        pass
    assert repr(rebuild(empty)) == repr(empty)


def test_two_fusions_of_the_same_ops_print_the_same_text():
    """The printed name carries no fusion id (nvFuser's ``nvfuser_fusion``), and a
    ``broadcast_in_dim`` that adds no dim is the expand it is, as nvFuser records it: the
    two definitions below print alike, and compute as eager's ``expand``."""
    def build(fd, spelling):
        t0 = fd.define_tensor(shape=[1, -1], contiguity=[None, True])
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        t2 = fd.ops.broadcast_in_dim(t0, t1.shape(), [0, 1]) if spelling == "bid" else fd.ops.expand(t0, t1.shape())
        fd.add_output(fd.ops.add(t2, t1))

    fds = []
    for spelling in ("bid", "expand"):
        with FusionDefinition() as fd:
            build(fd, spelling)
        fds.append(fd)
    assert fds[0].id != fds[1].id and repr(fds[0]) == repr(fds[1])
    assert "fd.ops.expand(tv0, shape=c0)" in repr(fds[0]) and "broadcast_in_dim" not in repr(fds[0])
    gen = gen_for("printer", "bid")
    a, b = make_tensor((1, 6), torch.float32, gen), make_tensor((5, 6), torch.float32, gen)
    assert_all_match(fds[0].execute([a, b]), [a.expand(5, 6) + b], tol=(0.0, 0.0))
    assert_round_trip(fds[0], [a, b])


def test_current_api_prints_in_nvfusers_form():
    """tv names, constants inline (six digits where exact, every digit otherwise), no
    default arguments, a sum's result dtype, ops depth first from the outputs, a sum over
    extent-1 dims as the squeeze it is, manual_normalization where the indices are in range."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True])
        t1 = fd.define_tensor(shape=[2, 3], contiguity=[True, True])
        a = fd.ops.mul(t0, fd.define_scalar(3.0))
        b = fd.ops.sum(fd.ops.slice(t1, [0, 0], [1, 3], [1, 1]), [0], False, DataType.Null)
        c = fd.ops.add(b, fd.define_scalar(0.1 + 0.2))
        d = fd.ops.max(t1, [1], keepdim=True)
        fd.add_output(fd.ops.mul(a, fd.ops.sum(c, [0])))
        fd.add_output(fd.ops.mul(d, fd.define_scalar(2, dtype=DataType.Float)))
    text = repr(fd)
    assert text.splitlines()[1:] == [
        "    tv0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)",
        "    tv1 = fd.define_tensor(shape=[2, 3], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)",
        "    tv2 = fd.ops.mul(tv0, 3.00000)",
        "    tv3 = fd.ops.slice(tv1, start_indices=[0, 0], end_indices=[1, 3], strides=[1, 1], "
        "manual_normalization=True)",
        "    tv4 = fd.ops.squeeze(tv3, dims=[0])",
        "    tv5 = fd.ops.add(tv4, 0.30000000000000004)",
        "    tv7 = fd.ops.sum(tv5, dims=[0], dtype=DataType.Float)",
        "    tv8 = fd.ops.mul(tv2, tv7)",
        "    tv6 = fd.ops.max(tv1, dims=[1], keepdim=True)",
        "    c0 = fd.define_scalar(2, dtype=DataType.Float)",
        "    tv9 = fd.ops.mul(tv6, c0)",
        "    fd.add_output(tv8)",
        "    fd.add_output(tv9)"]
    x, y = make_tensor((3,), torch.float32, gen_for("form-x")), make_tensor((2, 3), torch.float32, gen_for("form-y"))
    assert_round_trip(fd, [x, y])


def test_the_2022_api_keeps_its_form():
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.mul(t0, fd.define_constant(3.0)), axes=[1], keepdim=False))
    assert repr(fd).splitlines()[1:] == [
        "    T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)",
        "    S1 = fd.define_scalar(3.0, dtype=DataType.Double)",
        "    T2 = fd.ops.mul(T0, S1)",
        "    T3 = fd.ops.sum(T2, dims=[1], keepdim=False, dtype=DataType.Null)",
        "    fd.add_output(T3)"]


def test_slice_by_vectors_prints_without_normalizing():
    """Runtime indices (a Vector, sizes) leave the slice as given: no
    manual_normalization is claimed, and printing defines no new value."""
    x = make_tensor((2, 5, 10), torch.float32, gen_for("slice-vec"))
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        fd.add_output(fd.ops.slice(t0, [0, 1, 2], t0.shape()))
        fd.add_output(fd.ops.slice(t0, fd.define_vector(3), fd.define_vector(3)))
    n_vals = len(fd.ir.vals)
    text = repr(fd)
    assert "manual_normalization" not in text and len(fd.ir.vals) == n_vals
    assert_round_trip(fd, [x, 0, 1, 2, 2, 5, 10])
