"""Pointwise tiles: a program computes one block of elements and reduces nothing.

* ``FlatTile``: a 1-D block of the reference tensor's linear index,
  ``x = pid * BLOCK + arange(BLOCK)``.  Contiguous tensors are addressed by ``x``
  itself, which is what lets Triton vectorize.
* ``BroadcastTile``: a 2-D block, ``k`` over some dims and ``j`` over the rest, so
  values broadcast along one of them are computed once per tile.
"""
from __future__ import annotations

from ...errors import Unsupported
from ..index import Coord, Index, unravel


def no_load_hint(axes) -> str:
    """Pointwise tiles read each element once: no cache hint (``ReductionTile.load_hint``)."""
    return ""


class FlatTile:
    load_hint, store_hint = staticmethod(no_load_hint), ""

    def __init__(self, ref, block: int, int64: bool):
        self.ref, self.block, self.int64 = ref, block, int64

    def prologue(self, low):
        """``mask`` is all true, and Triton drops it from every load and store, when
        the blocks tile the tensor exactly (``EVEN``, computed per launch): a
        compute-bound body (GELU-tanh backward) saves the compare and the predicates."""
        w = low.w
        n = w.arg("numel", "numel", ("numel", self.ref, None))
        even = w.arg("EVEN", "flag", ("divides", self.ref, self.block))
        pid = "tl.program_id(0).to(tl.int64)" if self.int64 else "tl.program_id(0)"
        w.line(f"pid = {pid}")
        w.line("x = pid * BLOCK + tl.arange(0, BLOCK)")
        w.line(f"if {even}:")
        w.line("    mask = tl.full([BLOCK], True, tl.int1)")
        w.line("else:")
        w.line(f"    mask = x < {n}")
        w.constexprs["BLOCK"] = self.block

    def ref_index(self, low) -> Index:
        x = Coord("x", frozenset("x"))
        return Index(tuple(unravel(x, low.extents(self.ref), low.divider)), x)

    def divides_fast(self, axes) -> bool:
        """Whether index math along ``axes`` may use ``Lowering.divide``'s multiply and
        shift: not along the axis whose loads are vectorized (here: the only one)."""
        return not axes

    def mask(self, axes, preds=()):
        parts = (["mask"] if "x" in axes else []) + [f"({p})" for p in preds]
        return " & ".join(parts) if parts else None

    def shape(self, axes):
        return "[BLOCK]"

    def reduction(self, low, e, v, idx):
        raise Unsupported("a pointwise tile cannot reduce", "pointwise_reduction")

    def quads(self, lin: Coord):
        """Subsequence indices for one Philox call per 4 elements, when ``lin`` is the
        tile's own linear index (so groups of 4 are consecutive lanes)."""
        if lin.code != "x" or self.block < 4:
            return None
        return "(pid * (BLOCK // 4) + tl.arange(0, BLOCK // 4))", "[BLOCK]"


def say_multiple(w, name: str, m: int):
    """Rebind the extent ``name`` so the compiler sees that it is a multiple of ``m``
    (``schedulers.base.contiguous_multiple``): Triton then vectorizes the row starts
    and masks built from it."""
    if m > 1:
        w.comment(f"{name} is a multiple of {m}: said so, rows and their masks vectorize")
        w.line(f"{name} = {name} // {m} * {m}")


class BroadcastTile:
    """A 2-D pointwise tile: ``k`` over the reference's ``outer`` dims, ``j`` over the
    others (the contiguous last dim among them, so loads still vectorize along ``j``).
    A value that varies along one axis only is a ``[BLOCK_K, 1]`` or ``[1, BLOCK_J]``
    block, computed once for the whole tile: RoPE's cos and sin of angles shared by
    the heads, with the heads on ``k``, cost BLOCK_K times fewer evaluations than in a
    flat tile, which computes every value at every element.  Programs: axis 0 over
    ``j`` blocks, axis 1 over ``k`` blocks.  With ``grid_dims`` axis 0 also runs over
    those dims' indices, one per program (``g``, the same for the whole tile), and
    ``j`` over the remaining dims only."""

    load_hint, store_hint = staticmethod(no_load_hint), ""

    def __init__(self, ref, outer, block_k: int, block_j: int, int64: bool, contig_multiple: int = 1,
                 grid_dims=()):
        self.ref, self.outer, self.grid_dims = ref, tuple(outer), tuple(grid_dims)
        self.block_k, self.block_j, self.int64 = block_k, block_j, int64
        self.contig_multiple = contig_multiple  # J is a multiple of it (``say_multiple``)
        # One row a program: ``k`` is a scalar, and so is every value along it (a loss
        # backward's label, statistics and scale), with no row mask (the grid has one
        # program per row).  As [1, 1] blocks they carry a layout that the compiler
        # broadcasts into every lane's arithmetic (docs/TUNING.md#scalar-rows).
        self.scalar_rows = block_k == 1

    def inner(self):
        return [d for d in range(len(self.ref.shape)) if d not in self.outer and d not in self.grid_dims]

    def prologue(self, low):
        w = low.w
        w.constexprs["BLOCK_K"] = self.block_k
        w.constexprs["BLOCK_J"] = self.block_j
        K = w.arg("K", "numel", ("numel", self.ref, self.outer))
        J = w.arg("J", "numel", ("numel", self.ref, tuple(self.inner())))
        say_multiple(w, J, self.contig_multiple)
        cast = ".to(tl.int64)" if self.int64 else ""
        if self.scalar_rows:
            w.line(f"k = tl.program_id(1){cast}")
        else:
            w.line(f"k = tl.program_id(1){cast} * BLOCK_K + tl.arange(0, BLOCK_K)[:, None]")
        if self.grid_dims:
            w.line(f"jblocks = ({J} + BLOCK_J - 1) // BLOCK_J")
            w.line(f"g = tl.program_id(0){cast} // jblocks")
            w.line(f"j = (tl.program_id(0){cast} - g * jblocks) * BLOCK_J + tl.arange(0, BLOCK_J)[None, :]")
        else:
            w.line(f"j = tl.program_id(0){cast} * BLOCK_J + tl.arange(0, BLOCK_J)[None, :]")
        if not self.scalar_rows:
            w.line(f"kmask = k < {K}")
        w.line(f"jmask = j < {J}")
        w.line("mask = jmask" if self.scalar_rows else "mask = kmask & jmask")

    def ref_index(self, low) -> Index:
        ext = low.extents(self.ref)
        coords = [None] * len(ext)
        for axis, dims in (("k", self.outer), ("j", self.inner()), ("g", self.grid_dims)):
            lin = Coord(axis, frozenset() if axis == "g" else frozenset(axis))  # g: one value per program
            for d, c in zip(dims, unravel(lin, [ext[d] for d in dims], low.divider)):
                coords[d] = c
        n = len(ext)
        linear = None  # with grid dims there is no cheap one: stores ravel the coordinates
        if not self.grid_dims and self.outer == tuple(range(len(self.outer))):
            linear = Coord("(k * J + j)", frozenset("kj"))
        elif not self.grid_dims and self.outer == tuple(range(n - len(self.outer), n)):
            linear = Coord("(j * K + k)", frozenset("kj"))
        return Index(tuple(coords), linear)

    def divides_fast(self, axes) -> bool:
        """See ``FlatTile.divides_fast``: ``j`` is the vectorized axis."""
        return "j" not in axes

    def mask(self, axes, preds=()):
        if self.scalar_rows:
            axes = axes - {"k"}
        parts = ["mask" if {"k", "j"} <= axes else "kmask" if "k" in axes else "jmask" if "j" in axes else None]
        parts = [p for p in parts if p] + [f"({p})" for p in preds]
        return " & ".join(parts) if parts else None

    def shape(self, axes):
        k = "BLOCK_K" if "k" in axes and not self.scalar_rows else "1"
        return f"[{k}, {'BLOCK_J' if 'j' in axes else '1'}]"

    def reduction(self, low, e, v, idx):
        raise Unsupported("a pointwise tile cannot reduce", "pointwise_reduction")

    def quads(self, lin: Coord):
        return None  # one Philox call per element (the scheduler keeps random fusions flat)

