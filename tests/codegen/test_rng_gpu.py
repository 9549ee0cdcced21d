"""Random numbers on a CUDA device (compiled kernels): the same contract as on the CPU
(tests/codegen/test_rng.py), plus CPU == GPU bit for bit.  Run on the GPU machine with
``PYTHONPATH=src python -m pytest -q tests/codegen/test_rng_gpu.py -m gpu``."""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import Choices

from .common import DataType, fusion
from .test_rng import BOUND_CASES, REDUCTION_SCHEDULES, _dropout_softmax, _explicit, _stateful_pair

pytestmark = pytest.mark.gpu

DTYPES = [DataType.Float, DataType.Half, DataType.BFloat16, DataType.Double]


@pytest.mark.parametrize("dtype", DTYPES, ids=repr)
@pytest.mark.parametrize("ops", [("uniform",), ("normal",), ("rand_like",), ("randn_like",),
                                 ("uniform", "randn_like", "rand_like")], ids="+".join)
def test_stateful_execute_i_is_stateless_offset_i_on_cuda(ops, dtype):
    """After torch.manual_seed(s) (the CUDA generator: seed s, offset 0), execute i
    draws what rng_seed=s, rng_offset=n*i+k draws; and a torch random op in between
    moves the generator on, as PyTorch's own ops do."""
    stateful, stateless = _stateful_pair(ops, dtype)
    x = torch.rand(5, 9, device="cuda").to(dtype.torch) + 0.5
    n = len(ops)
    for seed in (0, 2**63 - 25, 123456789):
        torch.manual_seed(seed)
        got = [stateful.execute([x]) for _ in range(3)]
        for i, outs in enumerate(got):
            want = stateless.execute([x] + [v for k in range(n) for v in (seed, n * i + k)])
            for k, (g, w) in enumerate(zip(outs, want)):
                assert torch.equal(g, w), f"execute {i}, random op {k}"
        assert torch.cuda.default_generators[0].get_offset() == 4 * 3 * n


@pytest.mark.parametrize("dist", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=repr)
def test_cpu_and_cuda_give_the_same_values(dist, dtype):
    """uniform(0, 1): the same bits (the draw is exact integer math); normal: the same
    words through the GPU's log / sqrt / sin / cos, whose fp32 approximations differ
    from numpy's (an absolute error in log(u1) near u1 = 1 moves sqrt(-2 log u1) most)."""
    fd = _explicit(dist, shape=(37, 129), dtype=dtype)
    cpu, = fd.execute([2024, 7], device="cpu")
    gpu, = _explicit(dist, shape=(37, 129), dtype=dtype).execute([2024, 7], device="cuda")
    assert gpu.is_cuda
    again, = _explicit(dist, shape=(37, 129), dtype=dtype).execute([2024, 7], device="cuda")
    assert torch.equal(gpu, again), "run after run"
    if dist == "uniform" and dtype is not DataType.BFloat16:  # the interpreter truncates to bf16
        assert torch.equal(gpu.cpu(), cpu)
    else:
        rtol = {DataType.Float: 1e-4, DataType.Double: 1e-4, DataType.Half: 2e-3, DataType.BFloat16: 1.6e-2}[dtype]
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=rtol, atol=max(rtol, 1e-3))
        assert torch.isfinite(gpu).all()


@pytest.mark.parametrize("lo,hi,dtype,shape", BOUND_CASES, ids=lambda v: repr(v) if isinstance(v, DataType) else None)
def test_uniform_upper_bound_exclusive_on_cuda(lo, hi, dtype, shape):
    """2**24 draws (U(0, 1) in fp16 reaches 1.0 about 4096 times under the plain rule)."""
    n = 1 << 24

    def build(fd):
        s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.uniform(fd.define_scalar(lo), fd.define_scalar(hi), shape=[n], dtype=dtype,
                                     rng_seed=s, rng_offset=o))

    cdt = torch.float64 if dtype is DataType.Double else torch.float32
    hi_d = torch.tensor(hi, dtype=cdt).to(dtype.torch).item()
    lo_d = torch.tensor(lo, dtype=cdt).to(dtype.torch).item()
    fd = fusion(build)
    for offset in range(3):
        u, = fd.execute([99, offset], device="cuda")
        assert u.max().item() < hi_d and u.min().item() >= lo_d
        if (lo, hi) != (0.0, 1.0):
            assert u.max().item() == torch.nextafter(torch.tensor(hi_d, dtype=dtype.torch),
                                                     torch.tensor(lo_d, dtype=dtype.torch)).item()


@pytest.mark.parametrize("dist", ["rand_like", "randn_like"])
def test_reduction_schedules_give_identical_bits_on_cuda(dist):
    x = (torch.randn(5, 1024, device="cuda") * 3).half()
    fd = _dropout_softmax((5, 1024), dist)
    first = None
    for name, params in REDUCTION_SCHEDULES.items():
        with Choices(**params):
            got = fd.execute([x, 987654321, 8])
        if first is None:
            first = got
        assert torch.equal(got[0], first[0]) and torch.equal(got[1], first[1]), name
