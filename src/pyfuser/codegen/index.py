"""Coordinates: how a kernel names the element of a tensor it is working on.

A kernel iterates over a tile of a *reference* tensor's elements.  Every other value
is reached from the reference by walking the IR backwards; each layout op maps the
coordinates of its output to those of its input (a reshape re-ravels, a permute
reorders, a broadcast pins a dim to 0, a slice scales and shifts).  Nothing is ever
copied: a reshape of a contiguous input is just another way to spell the address.

``Coord`` is a Triton integer expression plus the tile axes it varies along
(``x`` for flat tiles; ``k`` kept and ``j`` reduced for reduction tiles), which
tells the code generator the shape of every load and which mask guards it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Coord:
    code: str
    axes: frozenset = frozenset()


ZERO = Coord("0")


@dataclass(frozen=True)
class Index:
    coords: tuple  # one Coord per dim of the value; size-1 dims are ZERO
    linear: Coord | None = None  # row-major linear index over the value's shape, when known cheaply
    pred: tuple = ()  # extra predicates (strings) guarding loads below a pad, cat or gather
    pred_each: tuple = ()  # the tile axes of each predicate in ``pred`` (each guards one coordinate)
    dropped: tuple = ()  # coords that broadcasts collapsed: a store of this value keeps coord == 0 only

    @property
    def pred_axes(self) -> frozenset:
        return frozenset().union(*self.pred_each)

    def guarded(self, pred: str, axes: frozenset) -> "Index":
        """This index under one more predicate (of one coordinate, varying along ``axes``)."""
        return Index(self.coords, self.linear, self.pred + (pred,), self.pred_each + (axes,), self.dropped)

    @property
    def axes(self) -> frozenset:
        out = frozenset().union(*(c.axes for c in self.coords)) if self.coords else frozenset()
        if self.linear is not None:
            out |= self.linear.axes
        return out

    def key(self):
        return (tuple(c.code for c in self.coords), self.linear.code if self.linear else None, self.pred)


def plain_div(code: str, divisors: list[str]) -> str:
    return f"({code} // ({' * '.join(divisors)}))"


def unravel(lin: Coord, extents: list[str], divider=None) -> list[Coord]:
    """Coordinates of row-major index ``lin`` in a shape whose extents are ``extents``
    (Triton expressions; the string "1" marks a size-1 dim).  ``divider(axes)`` gives
    the function that spells a quotient by a product of extents for an index varying
    along ``axes`` (``Lowering.divider``: a multiply and a shift), or None for Triton's
    ``//`` and ``%``."""
    div = divider(lin.axes) if divider is not None else None
    coords = []
    live = [i for i, e in enumerate(extents) if e != "1"]
    for d, e in enumerate(extents):
        if e == "1":
            coords.append(ZERO)
            continue
        inner = [extents[i] for i in live if i > d]
        code = lin.code if not inner else (div or plain_div)(lin.code, inner)
        if d != live[0]:
            code = f"({code} % {e})" if div is None else f"({code} - {div(code, [e])} * {e})"
        coords.append(Coord(code, lin.axes))
    return coords


def div_magic(d: int) -> tuple[int, int]:
    """``(M, P)`` with ``n // d == (n * M) >> P`` for every ``0 <= n < 2**31`` and
    ``1 <= d < 2**31`` (the round-up method: ``P = 31 + ceil(log2 d)``,
    ``M = ceil(2**P / d)``, so ``M * d - 2**P < d <= 2**(P - 31)`` and the rounding
    error never reaches the next multiple of ``d``).  ``2**31 <= M < 2**32``: the
    product fits 64 bits.  A kernel's int32 index math divides by runtime extents this
    way: an integer division is a software sequence of about 20 instructions
    (docs/TUNING.md#index-math)."""
    if d <= 0:  # an empty extent: no element to index
        return 1 << 31, 31
    p = 31 + (d - 1).bit_length()
    return -(-(1 << p) // d), p


def ravel(coords, extents: list[str]) -> Coord:
    acc = None
    axes = frozenset()
    for c, e in zip(coords, extents):
        if e == "1":
            continue
        axes |= c.axes
        if acc is None:
            acc = c.code
        else:
            acc = f"({acc} * {e} + {c.code})" if c.code != "0" else f"({acc} * {e})"
    return Coord(acc if acc is not None else "0", axes)
