"""``repr(fd)`` is a runnable python definition: executing its text rebuilds a fusion
that prints the same and computes the same (the round trip)."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, Fusion, FusionDefinition
from pyfuser.bench.seeds import SEEDS

from ..helpers import assert_all_match, gen_for, make_tensor


def rebuild(fd: FusionDefinition) -> FusionDefinition:
    """Exec ``repr(fd)`` and run the function it defines on a fresh current-API definition."""
    text = repr(fd)
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(compile(text, f"<repr of fusion {fd.id}>", "exec"), namespace)
    with FusionDefinition() as fd2:
        namespace["nvfuser_fusion"](fd2)
    return fd2


def assert_round_trip(fd, inputs):
    fd2 = rebuild(fd)
    assert repr(fd2) == repr(fd)
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
    for fragment in ("stride_order=[0, 1]", "float('inf')", "float('nan')", "float('-inf')", "define_scalar(None"):
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
    assert "fd.ops.expand(T0, shape=V2)" in repr(fds[0]) and "broadcast_in_dim" not in repr(fds[0])
    gen = gen_for("printer", "bid")
    a, b = make_tensor((1, 6), torch.float32, gen), make_tensor((5, 6), torch.float32, gen)
    assert_all_match(fds[0].execute([a, b]), [a.expand(5, 6) + b], tol=(0.0, 0.0))
    assert_round_trip(fds[0], [a, b])
