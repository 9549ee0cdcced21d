"""How each reduction of the op table accumulates: the ``reduction`` field of its row.

The code generator (``codegen.tiles.accumulate``) keeps one accumulator per row of a tile and
asks the row's ``Reduction`` for everything op-specific:

* ``identity(dt)``: the accumulator's start value, and what masked-off lanes read;
* ``combine(dt)``: the function ``tl.reduce`` folds a block with (a ``Combine``: a
  Triton builtin, or a ``@triton.jit`` helper the kernel defines where it calls it);
* ``fold(dt, a, b)``: the expression folding two partial results (a chunk into the
  accumulator, split partials into each other);
* ``finish(w, acc, attrs)``: the op's outputs from its accumulators (None: the value
  itself).

``dt`` is the accumulator dtype (the result's compute dtype: fp16/bf16 accumulate in
fp32).  A bool accumulator reduces its blocks as int32 (Triton reduces no int1), so a
bool row needs only int identities.  ``welford`` rows (var, var_mean) accumulate a
count, a mean and M2 and fold parts with Chan's formula instead of ``fold``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .dtypes import DataType


@dataclass(frozen=True)
class Combine:
    """A ``tl.reduce`` combine function."""
    name: str  # what the kernel calls it by
    source: str | None = None  # its @triton.jit definition; None: a Triton builtin
    # Triton's interpreter reduces with a Python loop over the combine calls; a helper
    # with a numpy equivalent (a whole axis at once: the name of a numpy function) is run
    # as that instead.  A name, so that defining ops needs no numpy.
    numpy: str | None = None


# Kernel-defined combine helpers, in the order a kernel's source lists the ones it uses.
# Float max/min propagate NaN, as torch does (Triton's builtin max drops it).
PROD = Combine("_pyfuser_prod", "@triton.jit\ndef _pyfuser_prod(a, b):\n    return a * b", "prod")
MAX_NAN = Combine("_pyfuser_max_nan", "@triton.jit\ndef _pyfuser_max_nan(a, b):\n"
                  "    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)", "max")
MIN_NAN = Combine("_pyfuser_min_nan", "@triton.jit\ndef _pyfuser_min_nan(a, b):\n"
                  "    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)", "min")
HELPERS = (PROD, MAX_NAN, MIN_NAN)
SUM = Combine("tl.standard._sum_combine")


@dataclass(frozen=True)
class Reduction:
    identity: Callable[[DataType], str] | None = None
    combine: Callable[[DataType], Combine] | None = None
    fold: Callable[[DataType, str, str], str] | None = None
    finish: Callable | None = None  # (writer, accumulators, attrs) -> output values
    welford: bool = False


def _constant(v):
    return lambda dt: repr(float(v)) if dt.is_float else repr(v)


# The largest value of each integer accumulator dtype (bool: True).
_BIG = {DataType.Int: 2**63 - 1, DataType.Int32: 2**31 - 1, DataType.Bool: 1}


def _lowest(dt: DataType) -> str:
    if dt.is_float:
        return "float('-inf')"
    return repr(-_BIG[dt] - 1 if dt is not DataType.Bool else 0)


def _highest(dt: DataType) -> str:
    return "float('inf')" if dt.is_float else repr(_BIG.get(dt))


def _extremum(fn: str, nan_helper: Combine):
    def fold(dt, a, b):
        nan_arg = ", propagate_nan=tl.PropagateNan.ALL" if dt.is_float else ""
        return f"tl.{fn}({a}, {b}{nan_arg})"

    def combine(dt):
        return nan_helper if dt.is_float else Combine(f"tl.standard._elementwise_{fn[:3]}")

    return fold, combine


_max_fold, _max_combine = _extremum("maximum", MAX_NAN)
_min_fold, _min_combine = _extremum("minimum", MIN_NAN)

SUM_ROW = Reduction(_constant(0), lambda dt: SUM, lambda dt, a, b: f"{a} + {b}")
PROD_ROW = Reduction(_constant(1), lambda dt: PROD, lambda dt, a, b: f"{a} * {b}")
MAX_ROW = Reduction(_lowest, _max_combine, _max_fold)
MIN_ROW = Reduction(_highest, _min_combine, _min_fold)


def _variance(w, acc, attrs) -> str:
    n, _, m2 = acc
    return w.tmp(f"{m2} / tl.maximum({n} - {float(attrs['correction'])!r}, 0.0)", "red")


def _finish_var(w, acc, attrs) -> list:
    return [_variance(w, acc, attrs)]


def _finish_var_mean(w, acc, attrs) -> list:
    var = _variance(w, acc, attrs)
    # the mean of nothing is nan, as in torch (0 / 0)
    return [var, w.tmp(f"tl.where({acc[0]} > 0, {acc[1]}, float('nan'))", "red")]


VAR_ROW = Reduction(finish=_finish_var, welford=True)
VAR_MEAN_ROW = Reduction(finish=_finish_var_mean, welford=True)


def _finish_welford(w, acc, attrs) -> list:
    """nvFuser's ``welford``: (avg, var_sum, n), the accumulators themselves: the mean,
    M2 (the sum of squared deviations, var * n with correction 0) and the count, which
    the finish casts to its Int output."""
    n, mean, m2 = acc
    return [mean, m2, n]


def welford_ref(x, dims, correction=0, keepdim=False):
    """The semantics of ``welford``: eager's var_mean with correction 0, var times the
    count; the count is an Int tensor of the reduced shape (nvFuser's Index dtype)."""
    var, mean = torch.var_mean(x, dims, correction=0, keepdim=keepdim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    return mean, var * n, torch.full(mean.shape, n, dtype=torch.int64, device=x.device)


WELFORD_ROW = Reduction(finish=_finish_welford, welford=True)
