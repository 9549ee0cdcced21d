"""What the emitter and the lowering ask of any tile (``Tile``).

A tile decides which elements one program of a kernel works on: the coordinates it
iterates over (its axes: ``x`` for a flat tile, ``k`` and ``j`` and a peeled row's
chunk axes for the others), the masks and block shapes along them, and how a
reduction's result is found at a coordinate.  ``emit.emit_kernel`` calls
``prologue`` and then walks the outputs through a ``lower.Lowering``, which asks the
tile everything else.  The tile kinds (``flat``, ``reduction``, ``inner_outer``)
add what their own body emitter needs; the schedulers build them.
"""
from __future__ import annotations

from typing import Protocol

from ..index import Coord, Index


class Tile(Protocol):
    """The members every tile has.  ``variation.ProbeTile`` is only walked, never emitted,
    and has no ``prologue``.  A tile may also have ``carried_load`` (the reduction
    tile's rows loaded one iteration ahead), which the lowering looks up by name."""

    ref: object
    """The reference tensor (a ``TensorVal``): the tile's coordinates are its elements."""

    int64: bool
    """Whether index math runs in int64 (plain ``//`` and ``%``, no division constants)."""

    store_hint: str
    """Extra ``tl.store`` arguments for every output store (``""`` for none)."""

    def load_hint(self, axes: frozenset) -> str:
        """Extra ``tl.load`` arguments (a cache hint) for a load whose offset varies
        along the tile axes ``axes``; ``""`` for none."""
        ...

    def prologue(self, low) -> None:
        """Write the kernel's first lines through ``low.w``: the program's coordinates
        and masks, the size arguments and constexprs they use."""
        ...

    def ref_index(self, low) -> Index:
        """The reference tensor's coordinates at the tile's elements (and its linear
        index where the tile has one)."""
        ...

    def divides_fast(self, axes: frozenset) -> bool:
        """Whether index math along ``axes`` may use ``Lowering.divide``'s multiply and
        shift: not along the axis whose loads are vectorized."""
        ...

    def mask(self, axes: frozenset, preds=()) -> str | None:
        """The mask of an access that varies along ``axes``, and-ed with the
        predicates ``preds``; None where every element is in bounds."""
        ...

    def shape(self, axes: frozenset) -> str:
        """The block shape (Triton source, ``[BLOCK_K, 1]``) of a value that varies
        along ``axes``."""
        ...

    def reduction(self, low, e, v, idx: Index) -> tuple[str, frozenset]:
        """(code, axes) of output ``v`` of reduction ``e`` at ``idx``; a tile that
        cannot reduce raises ``Unsupported``."""
        ...

    def quads(self, lin: Coord) -> tuple[str, str] | None:
        """(subsequence indices, block shape) for one Philox call per 4 elements at
        the linear index ``lin``, or None: one call per element."""
        ...
