"""Variation: along which dims of a pointwise segment's reference each value varies.

The pointwise scheduler chooses its 2-D tiles from it (``schedulers.pointwise``): a
heavy op whose result does not vary along some dims is computed once for them (the
broadcast tile), an input whose unit-stride dim is read at one reference dim alone is
a transposed read (the transpose tile), an input read once per row is a row's value
(the row tile).

``variation`` walks the segment as a kernel would (``lower.Lowering``) over a
``ProbeTile``, whose every reference dim is a tile axis of its own, so the tile axes
that a value's code varies along are the reference dims it varies along.  The walk
notes two things on the way, and the code it writes is thrown away:

* ``expr_axes``: elementwise expr -> the dims its results vary along, over all its
  uses (a value used at two coordinates varies along both);
* ``load_axes``: fusion input -> per dim of the input, the dims its coordinate
  varies along, over all its loads.

Worked example: RoPE's ``x * cos(a)`` with ``x`` [tokens, heads, 128] and ``a``
[tokens, 128] broadcast over the heads: ``cos``'s axes are {0, 2} (never dim 1),
``x``'s load axes ``({0}, {1}, {2})``; the scheduler puts dim 1 on k.

Why the kernel's walk and not a symbolic pass over the IR: the axes follow the index
maps (``index_maps``: every layout op's map from its output's coordinates to its
input's, the linear index of a reshape of an empty tensor, a gather's coordinates
taken from its index values), which are written once; a second copy would have to
follow them exactly, and it would also have to predict where the walk refuses (an
op form the op table cannot emit, a gather of integers).  The walk is computed
once per segment (``Segment.cached``), only where the scheduler asks.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from ..errors import Unsupported
from .index import ZERO, Coord, Index
from .lower import Lowering
from .tiles.flat import no_load_hint
from .writer import KernelWriter


@dataclass(frozen=True)
class Variation:
    """What the walk noted (the module docstring); read-only mappings."""

    expr_axes: MappingProxyType  # elementwise expr -> frozenset of reference dims
    load_axes: MappingProxyType  # fusion input -> tuple, per dim, of frozensets of reference dims


def variation(outputs, shapes: dict, inputs_info: dict, values: dict, ref) -> Variation | None:
    """The variation of the values that ``outputs`` need, over the reference ``ref``
    (an output): the outputs shaped like ``ref`` walked at its coordinates, the others
    where that walk met them.  None when the walk fails (an output it does not meet,
    a value it cannot lower): the scheduler then keeps the flat tile, whose own walk
    says why."""
    walk = _Walk(shapes, inputs_info, values, ref)
    idx = walk.tile.ref_index(walk)
    ref_shape = shapes[ref]
    try:
        for o in outputs:
            if shapes[o] == ref_shape:
                walk.value(o, walk.normalize(o, idx))
        for o in outputs:
            if shapes[o] != ref_shape:
                at = walk.reached.get(o)
                if at is None:
                    return None
                walk.value(o, at)
    except Unsupported:
        return None
    return Variation(MappingProxyType(walk.expr_axes), MappingProxyType(walk.load_axes))


class _Walk(Lowering):
    """The kernel walk, noting the axes of every elementwise result and every load."""

    def __init__(self, shapes, inputs_info, values, ref):
        super().__init__(KernelWriter("probe"), shapes, inputs_info, ProbeTile(ref), values)
        self.expr_axes: dict = {}
        self.load_axes: dict = {}

    def elementwise(self, e, v, idx):
        code, axes = super().elementwise(e, v, idx)
        self.expr_axes[e] = self.expr_axes.get(e, frozenset()) | axes
        return code, axes

    def load(self, v, idx: Index):
        seen = self.load_axes.get(v)
        here = tuple(c.axes for c in idx.coords)
        self.load_axes[v] = here if seen is None else tuple(a | b for a, b in zip(seen, here))
        return super().load(v, idx)


class ProbeTile:
    """Not a kernel's tile: each dim ``d`` of the reference (but those of extent 1) is
    its own tile axis ``d``.  Only walked (``variation``), never emitted."""

    int64 = True  # plain ``//`` and ``%``: no size arguments for division constants
    load_hint, store_hint = staticmethod(no_load_hint), ""

    def __init__(self, ref):
        self.ref = ref

    def ref_index(self, low) -> Index:
        shape = low.shapes[self.ref]
        return Index(tuple(ZERO if s == 1 else Coord(f"d{d}", frozenset([d])) for d, s in enumerate(shape)))

    def divides_fast(self, axes) -> bool:
        return False

    def mask(self, axes, preds=()):
        return None

    def shape(self, axes):
        return "[1]"

    def reduction(self, low, e, v, idx):
        raise Unsupported("a pointwise tile cannot reduce", "pointwise_reduction")

    def quads(self, lin: Coord):
        return None
