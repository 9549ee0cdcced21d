"""The reference executor (semantics ground truth) against eager on its own, without
the runtime: ``fd.reference`` must agree with hand-written PyTorch on the seeds and
on the corners the runtime is tested against it for."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.bench.seeds import SEEDS

from .helpers import assert_matches, gen_for, make_tensor


@pytest.mark.parametrize("name", ["log_softmax_full", "log_softmax_logsum", "log_softmax_sub"])
def test_reference_runs_the_seeds_like_eager(name):
    case = SEEDS[name]
    with FusionDefinition() as fd:
        case.build(fd, *case.small_sizes)
    inputs = case.make_inputs(case.small_sizes, "cpu", gen_for(name))
    for got, want in zip(fd.reference(inputs), case.eager(*inputs, *case.small_sizes)):
        assert_matches(got.contiguous(), want.contiguous(), tol=(2e-3, 2e-3))


def test_reference_needs_a_seed_for_random_ops():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.rand_like(t))
    with pytest.raises(ValueError, match="rand_like"):
        fd.reference([torch.ones(4)])


def test_reference_scalar_arithmetic_and_half_rounding():
    """fp16 ops round once per op, as eager does: (x * 3) then + 1, each in fp16."""
    x = make_tensor((4, 5), torch.float16, gen_for("ref-half"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        k = fd.ops.add(fd.define_scalar(1.0), fd.define_scalar(2.0))
        fd.add_output(fd.ops.add(fd.ops.mul(t, k), 1.0))
    (got,) = fd.reference([x])
    assert torch.equal(got, x * 3.0 + 1.0)


def test_reference_and_execute_agree():
    x = make_tensor((6, 9), torch.bfloat16, gen_for("ref-exec"))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        f = fd.ops.cast(t, DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.div(f, fd.ops.sum(fd.ops.exp(f), dims=[1], keepdim=True)), DataType.BFloat16))
    (want,) = fd.reference([x])
    (got,) = fd.execute([x])
    assert_matches(got, want)
