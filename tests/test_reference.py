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


@pytest.mark.parametrize("runtime", [False, True], ids=["constant", "runtime"])
@pytest.mark.parametrize("dtype", [DataType.Half, DataType.BFloat16])
def test_a_float_scalar_meeting_a_16_bit_tensor_is_not_rounded(runtime, dtype):
    """nvFuser's rule (the reference's, the kernels'): the op runs in fp32 with the
    scalar's own value and rounds the result once; eager rounds the scalar to the
    tensor's dtype first (fp16: -10000 + 70000.0 is inf there, 60000 here)."""
    big = 70000.0 if dtype is DataType.Half else 3.3e38
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=dtype)
        s = fd.define_scalar(dtype=DataType.Double) if runtime else fd.define_scalar(big)
        fd.add_output(fd.ops.add(t, s))
        fd.add_output(fd.ops.lt(t, fd.define_scalar(0.9)))
    x = torch.tensor([-10000.0, 0.8999, -3.0e38 if dtype is DataType.BFloat16 else 1.0], dtype=dtype.torch)
    inputs = [x, big] if runtime else [x]
    want = [(x.float() + big).to(dtype.torch), x.float() < 0.9]
    for got in (fd.execute(inputs), fd.reference(inputs)):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
