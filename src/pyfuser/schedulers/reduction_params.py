"""The reduction schedulers' params: one frozen dataclass per form of the tile.

``codegen.tiles.reduction.ReductionTile`` takes five forms, and each form's params
carry the fields that mean something for it, nothing else:

=================  ======================================================================
form               fields beyond ``block_k, block_j, num_warps, int64``
=================  ======================================================================
InnerPersistent    quad_rng, align, aligned_rows, contig_multiple, runtime_row (a row in one block)
InnerChunked       the same, online, out_reversed, flush (rows walked in passes over chunks)
PrefetchRows       align, rewiden; no block_k (one row per program, one program per SM)
OuterPersistent    contig_multiple (a column strip over all the reduced rows at once)
OuterChunked       contig_multiple, split, stages (column strips walked a chunk at a time)
=================  ======================================================================

The fields (each means the same in every form that has it):

* ``block_k``: kept elements per program; ``block_j``: reduced elements per block (per
  chunk when chunked; the whole padded row when persistent); ``num_warps``; ``int64``:
  index arithmetic in int64.
* ``quad_rng``: the reduced extent is a multiple of 4, one Philox call per 4 elements.
* ``align``: elements per 16 bytes when rows start misaligned: with ``block_k`` 1 each
  row is peeled (head, aligned body, tail); ``aligned_rows``: a peeled row's streamed
  input starts 16-byte aligned (a padded row stride), so the body starts at the row's
  first element (``reduction.strided_rows_dominate``).
* ``runtime_row``: a row narrower than its block takes its length at run time, not as
  the compile-time constant it otherwise is (``reduction.constant_row_length``): set once
  a kernel has met ``CONSTANT_ROW_LENGTHS`` distinct row lengths
  (``runtime.program``), since each constant is a compile of its own.
* ``contig_multiple``: the extent along the tile's contiguous axis (J inner, K outer)
  is a multiple of this, which the kernel tells the compiler (``base.contiguous_multiple``).
* ``online``: max and sum(exp(a - max)) in one pass with a rescaled running sum
  (``ReductionTile.online_chunk``, docs/TUNING.md#online-softmax); ``out_reversed``: the
  output pass walks each row's chunks last to first, starting with those the statistics
  pass read last (``reduction._wide_row_params``).
* ``flush``: every ``flush`` chunks, a float sum's block-shaped accumulator is folded
  into the row's sum and restarted (0: once, after the loop), so each sum rounds along
  two chains of some ``flush`` additions instead of one per chunk
  (``reduction.flush_chunks``).
* ``rewiden``: a prefetching fp16 row's last ``rewiden`` passes widen the carried row
  for themselves rather than reuse the first pass's fp32 copy (``codegen.tiles.rows``
  docstring, ``reduction.prefetch_pays``).
* ``split``: programs along the reduced extent, partials folded by each column strip's
  last program (``codegen.tiles.split``); ``stages``: the chunk loop's ``num_stages``.

What a form fixes instead of carrying (``online`` is False on a persistent row, a
prefetching row has ``block_k`` 1) reads as an attribute all the same (``FIXED``), so
the tile builder, the dumps and the tests read every form alike; ``persistent``,
``inner`` and ``prefetch`` say the form.  ``Choices`` may name ``persistent`` and
``prefetch`` besides the fields: a choice that names another form moves the params to it
(``recast``), keeping the fields both share.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ChoicesError
from .base import powers_of_2, require_valid, too_many_warps

# What every attribute reads where no form carries it as a field.
_DEFAULTS = dict(block_k=1, quad_rng=False, align=1, aligned_rows=False, contig_multiple=1, online=False,
                 out_reversed=False, split=1, stages=1, rewiden=0, flush=0, runtime_row=False)
# The names besides the fields that ``Choices`` may set: they pick the form.
SWITCHES = ("persistent", "prefetch")


@dataclass(frozen=True)
class ReductionParams:
    """The base of the forms (never built itself): the fixed attributes, the checks
    every form shares, the moves between forms."""

    FIXED: ClassVar[dict] = {}
    NUMBERS: ClassVar[tuple] = ()  # fields that must be powers of 2

    def __getattr__(self, name):
        fixed = type(self).FIXED
        if name in fixed:
            return fixed[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def validate(self) -> ReductionParams:
        """Raise ``ChoicesError`` for combinations no kernel takes; returns self."""
        return require_valid(self, self._problems())

    def _problems(self) -> list:
        return powers_of_2(self, "block_j", "num_warps", *self.NUMBERS) + too_many_warps(self)

    def values(self) -> dict:
        """Every attribute: the fields and what the form fixes."""
        return {**_DEFAULTS, **type(self).FIXED, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    def recast(self, **changes) -> ReductionParams:
        """These params with ``changes``, in the form the changes name (``persistent``,
        ``prefetch``; the axis stays); fields the new form does not have are dropped."""
        v = {**self.values(), **changes}
        if not v["inner"]:
            form = OuterPersistent if v["persistent"] else OuterChunked
        elif v["prefetch"]:
            form = PrefetchRows
        else:
            form = InnerPersistent if v["persistent"] else InnerChunked
        return form(**{f.name: v[f.name] for f in dataclasses.fields(form)})

    def choose(self, chosen: dict) -> ReductionParams:
        """``Choices.apply``: the chosen fields and switches that apply to this axis.
        ``prefetch=True`` needs a persistent row, one per program, of unaligned rows:
        choices asking for it and for another geometry are an error; choices asking
        only for another geometry move a prefetching row's params to it."""
        names = set(self.values()) | set(SWITCHES)
        names -= _INNER_ONLY if not self.inner else {"split", "stages"}
        mine = {k: v for k, v in chosen.items() if k in names}
        if not mine:
            return self
        clash = [f"{k}={mine[k]!r}" for k, want in _PREFETCH_GEOMETRY.items() if mine.get(k, want) != want]
        if mine.get("prefetch"):
            if clash:
                raise ChoicesError(f"Choices: prefetch=True needs a persistent row per program of unaligned rows "
                                   f"(persistent=True, block_k=1, aligned_rows=False); got {', '.join(clash)}")
            mine.setdefault("persistent", True)
        elif self.prefetch and clash and "prefetch" not in mine:
            mine["prefetch"] = False
        return self.recast(**mine)


# What only an inner tile has, and the geometry a prefetching row needs.
_INNER_ONLY = frozenset({"prefetch", "quad_rng", "align", "aligned_rows", "online", "out_reversed", "rewiden",
                         "flush", "runtime_row"})
_PREFETCH_GEOMETRY = dict(persistent=True, block_k=1, aligned_rows=False)


@dataclass(frozen=True)
class InnerPersistent(ReductionParams):
    """Rows held in one block of ``block_j`` (J padded), ``block_k`` rows per program."""

    block_k: int
    block_j: int
    num_warps: int
    int64: bool
    quad_rng: bool = False
    align: int = 1
    aligned_rows: bool = False
    contig_multiple: int = 1
    # Printed only when set, so that fixed-size rows keep their kernels' headers.
    runtime_row: bool = dataclasses.field(default=False, repr=False)

    FIXED: ClassVar[dict] = dict(inner=True, persistent=True, prefetch=False, online=False, out_reversed=False,
                                 split=1, stages=1, rewiden=0, flush=0)
    NUMBERS: ClassVar[tuple] = ("block_k", "align", "contig_multiple")

    def __repr__(self):
        return _repr_set_only(self, "runtime_row")


@dataclass(frozen=True)
class InnerChunked(ReductionParams):
    """Rows walked in passes over chunks of ``block_j``: one pass per level of dependent
    reductions, the last writing the outputs."""

    block_k: int
    block_j: int
    num_warps: int
    int64: bool
    quad_rng: bool = False
    align: int = 1
    aligned_rows: bool = False
    contig_multiple: int = 1
    online: bool = False
    out_reversed: bool = False
    # Printed only when set, so that rows without a flush keep their kernels' headers.
    flush: int = dataclasses.field(default=0, repr=False)

    FIXED: ClassVar[dict] = dict(inner=True, persistent=False, prefetch=False, split=1, stages=1, rewiden=0,
                                 runtime_row=False)
    NUMBERS: ClassVar[tuple] = ("block_k", "align", "contig_multiple")

    def _problems(self) -> list:
        return super()._problems() + ([f"flush={self.flush} must be >= 0"] if self.flush < 0 else [])

    def __repr__(self):
        return _repr_set_only(self, "flush")


@dataclass(frozen=True)
class PrefetchRows(ReductionParams):
    """Peeled persistent rows walked by one program per SM, each program loading its
    next row before it reduces and stores this one (``codegen.tiles.rows``)."""

    block_j: int
    num_warps: int
    int64: bool
    align: int
    rewiden: int = 0

    FIXED: ClassVar[dict] = dict(inner=True, persistent=True, prefetch=True, block_k=1, quad_rng=False,
                                 aligned_rows=False, contig_multiple=1, online=False, out_reversed=False, split=1,
                                 stages=1, flush=0, runtime_row=False)

    def _problems(self) -> list:
        bad = super()._problems()
        if self.align < 2 or powers_of_2(self, "align"):
            bad.append(f"align={self.align} must be a power of 2 > 1: prefetching carries a peeled row")
        if self.rewiden < 0:
            bad.append(f"rewiden={self.rewiden} must be >= 0")
        return bad


@dataclass(frozen=True)
class OuterPersistent(ReductionParams):
    """Column strips of ``block_k`` kept elements over all the reduced rows at once."""

    block_k: int
    block_j: int
    num_warps: int
    int64: bool
    contig_multiple: int = 1

    FIXED: ClassVar[dict] = dict(inner=False, persistent=True, prefetch=False, quad_rng=False, align=1,
                                 aligned_rows=False, online=False, out_reversed=False, split=1, stages=1, rewiden=0,
                                 flush=0, runtime_row=False)
    NUMBERS: ClassVar[tuple] = ("block_k", "contig_multiple")


@dataclass(frozen=True)
class OuterChunked(ReductionParams):
    """Column strips walked down the reduced rows a chunk of ``block_j`` at a time,
    ``split`` programs per strip."""

    block_k: int
    block_j: int
    num_warps: int
    int64: bool
    contig_multiple: int = 1
    split: int = 1
    stages: int = 1

    FIXED: ClassVar[dict] = dict(inner=False, persistent=False, prefetch=False, quad_rng=False, align=1,
                                 aligned_rows=False, online=False, out_reversed=False, rewiden=0, flush=0,
                                 runtime_row=False)
    NUMBERS: ClassVar[tuple] = ("block_k", "contig_multiple")

    def _problems(self) -> list:
        return super()._problems() + [f"{n}={getattr(self, n)} must be >= 1" for n in ("split", "stages")
                                      if getattr(self, n) < 1]


def _repr_set_only(params, name: str) -> str:
    """``params``'s repr with field ``name`` shown only when it is set."""
    fields = [f"{f.name}={getattr(params, f.name)!r}" for f in dataclasses.fields(params) if f.repr]
    value = getattr(params, name)
    return f"{type(params).__name__}({', '.join(fields + ([f'{name}={value!r}'] if value else []))})"


FORMS = (InnerPersistent, InnerChunked, PrefetchRows, OuterPersistent, OuterChunked)
