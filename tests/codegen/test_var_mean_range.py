"""var_mean of values near the fp32 maximum, through every reduction tile: the mean
must stay finite wherever eager's (Welford) is, e.g. 16 copies of 1.7e38 give mean
1.7e38 and variance 0, not a sum that overflowed.  The reference executor is eager's
torch.var_mean; every output is compared with it (inf == inf) and the means of the
large rows are asserted finite.  The variance of n equal values past about 1e26 is
not checked: unless the summed mean is exact (it need not be: v + v + v rounds), the
deviations are at least one ulp of v and their squares overflow, where eager's
Welford keeps the mean exact and gives 0.  The two-pass form's limit, left open."""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import Choices

from .common import define_input, fusion, gen_for, tol_for

BIG = {torch.float32: 1.7e38, torch.bfloat16: 1.6e38, torch.float16: 6.0e4}  # bf16(1.7e38) > max / 2

# Tile kinds (inner: rows reduced; outer: columns).  multipass chunks of 4 or 8: several
# chunks per row, the last one partial; peeled: a head, an aligned body and a tail.
INNER = {"persistent": {"persistent": True}, "few_rows": {"persistent": True, "block_k": 2},
         "one_row": {"persistent": True, "block_k": 1},
         "multipass": {"persistent": False, "block_j": 4}, "multipass_rows": {"persistent": False, "block_j": 8, "block_k": 2},
         "peeled_persistent": {"persistent": True, "block_k": 1, "align": 8},
         "peeled_multipass": {"persistent": False, "block_k": 1, "block_j": 8, "align": 8}}
OUTER = {"persistent": {"persistent": True, "block_j": 64}, "multipass": {"persistent": False, "block_j": 4, "block_k": 4},
         "split": {"persistent": False, "block_j": 4, "block_k": 4, "split": 4}}


def _rows(J: int, dtype, gen) -> torch.Tensor:
    """[6, J]: J copies of +big, of -big, big half and small values half, +big then
    -big halves, and two rows of ordinary values (mixed magnitudes)."""
    big = BIG[dtype]
    small = torch.rand(J, generator=gen) + 0.5
    half = J // 2
    rows = [torch.full((J,), big), torch.full((J,), -big),
            torch.cat([torch.full((half,), big), small[half:]]),
            torch.cat([torch.full((half,), big), torch.full((J - half,), -big)]),
            (torch.rand(J, generator=gen) - 0.5) * 10.0 ** torch.randint(-3, 4, (J,), generator=gen),
            torch.randn(J, generator=gen) + 1000.0]
    return torch.stack(rows).to(dtype)


def _check(fd, x, dim, what):
    """The reference's var (at the output dtype's precision, inf == inf) and mean, the
    mean to within a few ulps of the row's largest magnitude (the +big, -big row's
    mean is a cancellation: 0 in eager, an ulp-sized remainder when chunks combine)."""
    (var, mean), (want_var, want_mean) = fd.execute([x]), fd.reference([x])
    rtol, atol = tol_for(want_var.dtype)
    v, wv = var.flatten()[2:], want_var.flatten()[2:]  # rows 0, 1: see the module docstring
    torch.testing.assert_close(v, wv, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what} var: {m}")
    scale = x.float().abs().amax(dim, keepdim=mean.dim() == x.dim()).view(mean.shape)
    err = (mean.float() - want_mean.float()).abs()
    assert (err <= rtol * want_mean.float().abs() + 2.0**-20 * scale).all(), (what, mean, want_mean)
    return var, mean


def _var_mean(dims, correction, keepdim, x):
    def build(fd):
        v, m = fd.ops.var_mean(define_input(fd, x), dims=dims, correction=correction, keepdim=keepdim)
        fd.add_output(v)
        fd.add_output(m)

    return fusion(build)


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", list(INNER))
def test_row_var_mean_near_the_maximum(variant, dtype, correction, keepdim):
    x = _rows(16, dtype, gen_for("vm_rows", str(dtype)))
    fd = _var_mean([1], correction, keepdim, x)
    with Choices(**INNER[variant]):
        var, mean = _check(fd, x, 1, variant)
    assert torch.isfinite(mean).all(), mean


@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", list(OUTER))
def test_column_var_mean_near_the_maximum(variant, dtype, correction):
    x = _rows(16, dtype, gen_for("vm_cols", str(dtype))).t().contiguous()  # [16, 6]: columns
    fd = _var_mean([0], correction, False, x)
    with Choices(**OUTER[variant]):
        var, mean = _check(fd, x, 0, variant)
    assert torch.isfinite(mean).all(), mean



@pytest.mark.parametrize("variant", ["persistent", "multipass", "peeled_multipass"])
def test_scaled_mean_is_as_accurate_as_float64_allows(variant):
    """Mixed magnitudes (1e-3 .. 1e3, random signs) and an offset row (1000 + noise),
    rows of 1001: mean and variance within a few fp32 ulps of float64's (relative to
    the row's largest magnitude for the mean, to the variance for the variance): the
    scaled sums give the bits of the plain ones here, so no accuracy is lost."""
    gen = gen_for("vm_accuracy", variant)
    J = 1001
    mixed = (torch.rand(4, J, generator=gen) - 0.5) * 10.0 ** torch.randint(-3, 4, (4, J), generator=gen)
    x = torch.cat([mixed, torch.randn(2, J, generator=gen) + 1000.0])
    fd = _var_mean([1], 1, False, x)
    with Choices(**INNER[variant]):
        var, mean = fd.execute([x])
    v64, m64 = torch.var_mean(x.double(), 1, correction=1)
    scale = x.double().abs().amax(1)
    assert ((mean.double() - m64).abs() <= 2e-7 * scale).all(), (mean, m64)
    assert ((var.double() - v64).abs() <= 4e-5 * v64).all(), (var, v64)  # 250 chunks of 4: 1.6e-5
