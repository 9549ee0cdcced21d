"""fd.validate: the fusion against the reference executor, same random numbers."""
from __future__ import annotations

import pytest
import torch

from pyfuser import DataType, FusionDefinition, PyfuserError, ValidationError
from pyfuser.codegen.emit import KernelSource
from pyfuser.runtime.validate import compare
from pyfuser.schedulers import inner_normalization

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
    original = inner_normalization.emit

    def emit(seg, params, name):  # a softmax of 2**x instead of e**x
        src = original(seg, params, name)
        broken = src.source.replace("tl.exp(", "tl.exp2(")
        assert broken != src.source
        return KernelSource(src.name, broken, src.args, src.constexprs, src.outputs, src.tile)

    monkeypatch.setattr(inner_normalization, "emit", emit)
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
