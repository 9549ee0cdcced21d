"""The op table's reference helpers (``ir.op_refs``) where they add to torch: checked
against independent definitions (Python integers, fp64 identities)."""
from __future__ import annotations

import pytest
import torch

from pyfuser.ir import op_refs as F


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=lambda d: str(d)[6:])
def test_logical_right_shift_is_the_unsigned_shift(dtype):
    width = torch.iinfo(dtype).bits
    x = torch.tensor([-1, -8, 5, torch.iinfo(dtype).min, torch.iinfo(dtype).max], dtype=dtype)
    s = torch.arange(-2, width + 3, dtype=dtype)
    a, b = x.repeat_interleave(len(s)), s.repeat(len(x))
    got = F.logical_right_shift_ref(a, b)
    want = [((int(v) % 2 ** width) >> int(k)) if 0 <= k < width else 0 for v, k in zip(a, b)]
    assert got.dtype == dtype
    assert [int(v) % 2 ** width for v in got] == want


def test_logical_right_shift_with_numbers_and_promotion():
    x = torch.tensor([-16, 16], dtype=torch.int32)
    assert F.logical_right_shift_ref(x, 2).tolist() == [(2 ** 32 - 16) >> 2, 4]
    assert F.logical_right_shift_ref(x, torch.tensor([2, 2])).dtype == torch.int64  # int32 with int64
    assert F.logical_right_shift_ref(-1, torch.tensor([60])).tolist() == [15]


@pytest.mark.parametrize("fn,args", [(F.logical_right_shift_ref, (torch.tensor([1.5]), 1)),
                                     (F.logical_right_shift_ref, (torch.tensor([True]), torch.tensor([True]))),
                                     (F.mod_ref, (torch.tensor([7.5]), 2)),
                                     (F.nextafter_ref, (torch.tensor([1.0], dtype=torch.float16), 2.0)),
                                     (F.nextafter_ref, (torch.tensor([1.0], dtype=torch.bfloat16), 2.0))])
def test_refused_dtypes(fn, args):
    with pytest.raises(NotImplementedError):
        fn(*args)


def test_mod_is_cs_remainder():
    a, b = torch.tensor([7, -7, 7, -7]), torch.tensor([2, 2, -2, -2])
    assert F.mod_ref(a, b).tolist() == [1, -1, 1, -1]
    assert F.mod_ref(-7, torch.tensor([3], dtype=torch.int32)).tolist() == [-1]


def test_erfcinv_inverts_erfc():
    x = torch.tensor([1e-300, 1e-30, 1e-8, 0.05, 0.3, 0.7, 1.0, 1.3, 1.999, 2.0 - 1e-15], dtype=torch.float64)
    y = F.erfcinv(x)
    assert torch.allclose(torch.special.erfc(y), x, rtol=1e-13, atol=0)
    edges = F.erfcinv(torch.tensor([0.0, 2.0, -0.5, 2.5, float("nan")], dtype=torch.float64))
    assert edges[0] == float("inf") and edges[1] == float("-inf") and edges[2:].isnan().all()


def test_erfcinv_dtypes_follow_erfinv():
    assert F.erfcinv_ref(torch.tensor([1])).dtype == torch.float32
    assert F.erfcinv_ref(torch.tensor([True])).tolist() == [0.0]
    half = torch.tensor([0.5], dtype=torch.float16)
    assert F.erfcinv_ref(half).dtype == torch.float16
    assert F.erfcinv_ref(half).item() == pytest.approx(0.4769362762044699, rel=1e-3)


def test_threshold_keeps_nan_and_truncates_integer_bounds():
    x = torch.tensor([0.5, 1.0, float("nan"), 2.0])
    assert F.threshold_ref(x, 1.0, -3.0).tolist()[:2] == [-3.0, -3.0]
    assert F.threshold_ref(x, 1.0, -3.0)[2].isnan() and F.threshold_ref(x, 1.0, -3.0)[3] == 2.0
    assert F.threshold_ref(torch.tensor([0, 1, -1]), -0.5, 7).tolist() == [7, 1, 7]  # -0.5 -> 0
