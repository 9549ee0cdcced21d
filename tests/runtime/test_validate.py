"""fd.validate: the fusion against the reference executor, same random numbers."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition, PyfuserError, ValidationError
from pyfuser.codegen.emit import KernelSource
from pyfuser.runtime.validate import compare
from pyfuser.schedulers import ReductionScheduler

from .conftest import bert_fd, bert_inputs, device, gelu_fd, gelu_inputs


def test_report_fusion_validates_random_outputs_included():
    fd, inputs = bert_fd(), bert_inputs()
    outs = fd.validate(inputs)
    assert len(outs) == 4 and outs[2].dtype == torch.bool
    keep = outs[2].float().mean().item()
    assert 0.8 < keep < 1.0  # dropout(p=0.1) really drew random numbers


def test_validate_leaves_the_generator_where_execute_leaves_it():
    fd, inputs = bert_fd(), bert_inputs()
    torch.manual_seed(7)
    fd.execute(inputs)
    after_execute = torch.get_rng_state()
    torch.manual_seed(7)
    fd.validate(inputs)
    assert torch.equal(torch.get_rng_state(), after_execute)


def test_validate_returns_the_fusions_outputs():
    fd, inputs = gelu_fd(), gelu_inputs()
    outs = fd.validate(inputs)
    ref = fd.reference(inputs)
    assert [o.dtype for o in outs] == [r.dtype for r in ref]


def test_a_wrong_kernel_is_caught_with_the_largest_error(monkeypatch):
    original = ReductionScheduler.emit

    def emit(self, seg, params, name):  # a softmax of 2**x instead of e**x
        src = original(self, seg, params, name)
        if self.NAME != "inner_normalization":
            return src
        broken = src.source.replace("libdevice.exp(", "tl.exp2(").replace("tl.exp(", "tl.exp2(")
        assert broken != src.source
        return KernelSource(src.name, broken, src.args, src.constexprs, src.outputs, src.tile)

    monkeypatch.setattr(ReductionScheduler, "emit", emit)
    fd, inputs = bert_fd(), bert_inputs()
    with pytest.raises(ValidationError) as info:
        fd.validate(inputs)
    err = info.value
    assert isinstance(err, AssertionError) and isinstance(err, PyfuserError)
    text = str(err)
    assert text.startswith(f"validate: fusion {fd.id} disagrees with the reference executor on ")
    assert "  output 0 (T11): ok: float32 [2, 1, 1, 16], max abs error 0" in text
    assert "  output 1 (T24): MISMATCH: float32 [2, 3, 16, 16], " in text
    assert "elements out of tolerance; worst at (" in text and "max abs error" in text


def test_compare_by_dtype():
    a = torch.tensor([1.0, 2.0, float("nan")])
    assert compare(a, a.clone())[0]
    ok, text = compare(a, torch.tensor([1.0, 2.1, float("nan")]))
    assert not ok and "1 of 3 elements out of tolerance; worst at (1,): got 2, reference 2.1" in text
    h = torch.tensor([1000.0], dtype=torch.float16)
    assert compare(h, torch.tensor([1000.5], dtype=torch.float16))[0]  # one fp16 ulp apart
    ok, text = compare(torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 2], [3, 5]]))
    assert not ok and "1 of 4 elements differ (exact compare); first at (1, 1): got 4, reference 5" in text
    assert not compare(torch.tensor([True]), torch.tensor([False]))[0]
    ok, text = compare(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert not ok and "dtype torch.float32, reference torch.float64" in text
    assert compare(torch.tensor(1.0 + 1e-7), torch.tensor(1.0))[0]  # fp32 at ~1e-5 relative


def test_validate_rejects_bad_inputs_like_execute():
    from pyfuser import InputError

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(x))
    with pytest.raises(InputError):
        fd.validate([torch.zeros(2, 2, device=device())])


def test_compare_nan_and_inf():
    nan, inf = float("nan"), float("inf")
    assert compare(torch.tensor([inf, -inf, nan]), torch.tensor([inf, -inf, nan]))[0]
    ok, text = compare(torch.tensor([1.0, nan, 3.0]), torch.tensor([1.0, 2.0, 3.5]))
    assert not ok and "2 of 3 elements out of tolerance; worst at (1,): got nan, reference 2" in text
    assert not compare(torch.tensor([inf]), torch.tensor([-inf]))[0]


def _row_sum_fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(x, dims=[1]))
    return fd


def _long_rows():
    """16 rows of 16384 normal values; the even rows sum to about zero, so the order in
    which a kernel and torch add the terms shows there as an absolute error."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 1 << 14, generator=g)
    x[::2, -1] -= x[::2].double().sum(1).float()
    return x.to(device())


def test_a_long_sum_is_judged_by_its_accumulation_error():
    fd, x = _row_sum_fd(), _long_rows()
    (out,) = fd.validate([x])
    ref = fd.reference([x])[0]
    # Two summation orders: at the dtype's own tolerance the cancelling rows differ...
    assert not torch.equal(out, ref) and not compare(out, ref)[0]
    # ...but each sum is as near the exact one as the reference's own sum is
    exact = x.double().sum(1)
    assert (out.double() - exact).abs().max() < 4 * (ref.double() - exact).abs().max() + 1e-4


def test_a_dropped_term_still_fails_a_long_sum(monkeypatch):
    from pyfuser.runtime import validate as v

    def reference_without_a_term(ir, inputs, **kw):  # as if the kernel lost one term per row
        return [torch.sum(inputs[0][:, 1:], 1)]

    fd, x = _row_sum_fd(), _long_rows()
    x[:, 0] = 0.25  # the term lost: small beside the row sums (about 128), but no rounding
    monkeypatch.setattr(v, "run_reference", reference_without_a_term)
    with pytest.raises(ValidationError) as info:
        fd.validate([x])
    assert "16 of 16 elements out of tolerance" in str(info.value)
    assert "widened for sums: accumulation error 7.6e-06" in str(info.value)


def test_only_outputs_fed_by_accumulating_reductions_are_widened():
    from pyfuser.ir.concretize import bind
    from pyfuser.runtime.validate import accumulation_error

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        s = fd.ops.sum(x, dims=[1])  # 64 terms
        m = fd.ops.max(x, dims=[1])  # selects a term: exact in any order
        t = fd.ops.sum(fd.ops.mul(x, fd.ops.broadcast_in_dim(s, shape=[4, 64], broadcast_dims=[0])), dims=[0])
        for out in (s, m, fd.ops.exp(x), t):
            fd.add_output(out)
    xs = torch.randn(4, 64, device=device())
    err = accumulation_error(fd.ir, bind(fd.ir, [xs]).shapes)
    u = 2.0**-24
    assert [err.get(o, 0.0) for o in fd.ir.outputs] == [u * 8, 0.0, 0.0, u * 8 + u * 2]
    fd.validate([xs])


def test_nvfusers_tolerance_accepts_a_magnified_rounding_flip_and_nothing_far_past_it():
    """A bf16 output whose inputs went through a bf16 intermediate and a 4096-term
    reduction: one unit of that intermediate, flipped and magnified by cancellation, is
    past pyfuser's own bf16 tolerance near zero but within nvFuser's (atol 2.5 at 4096
    terms); an error of 5 is past both, and an fp32 output keeps nvFuser's fp32 table."""
    from pyfuser.runtime.tolerances import nvfuser_tolerance
    from pyfuser.runtime.validate import compare_either

    g = torch.Generator().manual_seed(3)
    got = (torch.randn(64, generator=g) * 4).to(torch.bfloat16)
    got[7] = 0.0
    flipped = got.clone()
    flipped[7] = 0.0625
    assert not compare(got, flipped)[0]
    ok, text = compare_either(got, flipped, reduction_size=4096)
    assert ok and "within nvFuser's validation tolerance (atol 2.49" in text
    wrong = got.clone()
    wrong[7] = 5.0
    ok, text = compare_either(got, wrong, reduction_size=4096)
    assert not ok and "nor within nvFuser's" in text
    assert nvfuser_tolerance(torch.float32, 64) == (8.57934e-06, 8.57934e-08)
    assert nvfuser_tolerance(torch.bfloat16, 1) == (0.00390625, 0.0078125)
    assert nvfuser_tolerance(torch.int64, 64) is None
    x = torch.randn(64, generator=g)
    assert not compare_either(x, x + 1e-3, reduction_size=64)[0]


def test_reduction_sizes_count_the_chain_and_the_matmul():
    from pyfuser.ir.concretize import bind
    from pyfuser.runtime.tolerances import reduction_sizes

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        s = fd.ops.sum(x, dims=[1], keepdim=True)
        y = fd.ops.linear(fd.ops.div(x, s), w)
        fd.add_output(y)
        fd.add_output(fd.ops.exp(x))
    xs, ws = torch.rand(4, 16, device=device()) + 1, torch.randn(8, 16, device=device())
    sizes = reduction_sizes(fd.ir, bind(fd.ir, [xs, ws]).shapes)
    assert [sizes.get(o, 1) for o in fd.ir.outputs] == [16 * 16, 1]
    fd.validate([xs, ws])
