"""The inner-outer tile: row reductions and column sums of the same tensor in one kernel.

A normalization backward needs two kinds of reduction of the same [K, J] tensors:
per row (layer norm's sum(dy * w) and sum(dy * w * xhat), over j) for dx, and per
column (dw = sum(dy * xhat), db = sum(dy), over k).  As two kernels the second reads
dy and x again.  Here each of ``NPROG`` programs walks row blocks ``pid, pid +
NPROG, ...`` with the persistent inner tile (the row reductions, dx and the other
full-size outputs, exactly as ``inner_normalization`` computes them) and adds each
block's values into a [BLOCK_K, BLOCK_J] float32 accumulator, elementwise; the
accumulator's rows are summed once, after the row loop (summing a block's rows every
iteration crosses warps wherever the layout spreads the rows over warps, as a 1-byte
dropout mask makes it: 5x slower with two rows per block).  A program then stores its
column sums to a scratch row, and the partial rows are folded in two levels so no
single program reads them all:

1. programs are counted into groups of ``GROUP``; the group's last program to
   arrive folds the group's ``GROUP`` rows into one row;
2. the last group to finish folds the ``NGROUP`` group rows and writes the column
   sums (and whatever the fusion computes from them: a cast, a scale; and the values
   shaped like them, which cannot vary along the summed rows).

Counters live in the scratch buffer and are reset by the programs that used them,
so the next launch finds zeros.  Every fold adds rows in a fixed order, so the
result does not depend on which program finishes last.

Column sums over only the leading row dims (``col_dims``: a shared position bias's
gradient sums [batch, heads, q, k] score gradients over the batch) keep a row per
*group*, the rows sharing their trailing coordinates: row ``k = s * F + f`` is row
``s`` of group ``f``.  Then each program takes ``BLOCK_K`` consecutive groups and walks
``s = 0 .. S``, adding every row into its group's accumulator row, and stores the
block of column sums itself: no scratch, no counters, no folds, and the sum's order
is fixed by ``s``.

Measured numbers and the sizing rules: ``schedulers/inner_outer.py``; the kernel
body: ``codegen.inner_outer.emit_inner_outer_body``.
"""
from __future__ import annotations

from ...errors import Unsupported
from ..index import ZERO, Coord, Index, unravel
from .reduction import ReductionTile


class InnerOuterTile(ReductionTile):
    """The persistent inner tile over ``ref`` (rows reduced over ``red_dims``), plus the
    column sums ``outer`` (reductions over the kept dims), see the module docstring."""

    def __init__(self, ref, red_dims, block_k: int, block_j: int, int64: bool, quad_rng: bool, outer,
                 nprog: int, group: int, fold_rows: int, stages: int = 1, contig_multiple: int = 1,
                 col_dims=None):
        super().__init__(ref, red_dims, True, True, block_k, block_j, int64, quad_rng,
                         contig_multiple=contig_multiple)
        self.outer = list(outer)  # the column-sum exprs, in slot order
        self.nprog, self.group, self.fold_rows = nprog, group, fold_rows
        # The leading row dims the column sums add up, when not all of them: the groups'
        # walk (module docstring); None: the folded walk.
        self.col_dims = None if col_dims is None else tuple(col_dims)
        self.ngroup = -(-nprog // group) if group else 0
        self.stages = stages
        self.in_rows = False  # inside the row loop: column sums are not available yet

    @property
    def grouped(self) -> bool:
        return self.col_dims is not None

    def group_dims(self) -> list:
        """The row dims the column sums keep (the groups' walk)."""
        return [d for d in self.kept_dims() if d not in self.col_dims]

    def prologue(self, low):
        w = low.w
        w.constexprs.update(BLOCK_K=self.block_k, BLOCK_J=self.block_j)
        if not self.grouped:
            w.constexprs.update(NPROG=self.nprog, GROUP=self.group, NGROUP=self.ngroup, FOLD_ROWS=self.fold_rows)
        w.arg("K", "numel", ("numel", self.ref, tuple(self.kept_dims())))
        w.arg("J", "numel", ("numel", self.ref, self.red_dims))
        self.say_multiple(w)
        w.line(f"pid = {'tl.program_id(0).to(tl.int64)' if self.int64 else 'tl.program_id(0)'}")
        if self.grouped:
            w.arg("F", "numel", ("numel", self.ref, tuple(self.group_dims())))
            w.arg("S", "numel", ("numel", self.ref, self.col_dims))
            w.comment("this program's groups: rows f, F + f, 2 * F + f, ... are summed into column row f")
            w.line("f = pid * BLOCK_K + tl.arange(0, BLOCK_K)[:, None]")
            w.line("fmask = f < F")

    def open_rows(self, low):
        """The row loop's header and the rows ``k`` (with ``kmask``) of one iteration."""
        w = low.w
        if self.grouped:
            loop = "s in tl.range(0, S, num_stages={})".format(self.stages) if self.stages > 1 else "s in range(0, S)"
            w.line(f"for {loop}:")
            w.indent += 1
            w.line("k = s * F + f")
            w.line("kmask = fmask")
            return
        w.comment("this program's rows: blocks pid, pid + NPROG, ...")
        if self.stages > 1:
            w.line(f"for kb in tl.range(pid * BLOCK_K, K, NPROG * BLOCK_K, num_stages={self.stages}):")
        else:
            w.line("for kb in range(pid * BLOCK_K, K, NPROG * BLOCK_K):")
        w.indent += 1
        w.line("k = kb + tl.arange(0, BLOCK_K)[:, None]")
        w.line("kmask = k < K")

    def _unravel_ref(self, low, c="j"):
        """The reference's coordinates; in the groups' walk the summed dims unravel from
        ``s`` and the kept ones from ``f``, not both from ``k``: the group's part is the
        same on every iteration."""
        if not self.grouped:
            return super()._unravel_ref(low, c)
        ext = low.extents(self.ref)
        coords = [None] * len(ext)
        for c0, dims in ((Coord("s", frozenset()), self.col_dims), (Coord("f", frozenset("k")), self.group_dims()),
                         (Coord("j", frozenset("j")), self.red_dims)):
            for d, x in zip(dims, unravel(c0, [ext[d] for d in dims], low.divider)):
                coords[d] = x
        return coords

    # -- column sums ----------------------------------------------------------------------
    def outer_index(self, low, keepdim: bool) -> Index:
        """Where a column sum's element lives: the row's coordinates along the reduced
        dims, 0 (keepdim) or nothing along the summed ones, and the group's along the
        ones the groups' walk keeps; linear index ``j`` (``f * J + j`` grouped)."""
        coords = self._unravel_ref(low)
        summed = set(self.col_dims) if self.grouped else set(self.kept_dims())
        if keepdim:
            out = [ZERO if d in summed else c for d, c in enumerate(coords)]
        else:
            out = [c for d, c in enumerate(coords) if d not in summed]
        linear = Coord("(f * J + j)", frozenset("kj")) if self.grouped else Coord("j", frozenset("j"))
        return Index(tuple(out), linear)

    def reduction(self, low, e, v, idx: Index):
        if e not in self.outer:
            return super().reduction(low, e, v, idx)
        if self.in_rows or e not in self.results:
            raise Unsupported(f"column sum {v.name} is used inside the rows it sums", "column_sum_in_rows")
        want = low.normalize(v, self.outer_index(low, e.attrs.get("keepdim", False)))
        if tuple(c.code for c in idx.coords) != tuple(c.code for c in want.coords):
            raise Unsupported(f"column sum {v.name} is used at coordinates other than its own column",
                              "column_coordinates")
        return self.results[e][0], frozenset("kj") if self.grouped else frozenset("j")

    def _fold(self, low, ws: str, firsts: list, count: str) -> list:
        """For each start in ``firsts``, rows ``start .. start + count`` of the scratch
        matrix summed in order, ``FOLD_ROWS`` at a time, every column sum in one loop:
        [1, BLOCK_J] float32 values.  The folds are the kernel's serial tail, a fifth
        of a layer-norm backward's time (docs/TUNING.md#inner-outer)."""
        w = low.w
        accs = []
        for _ in firsts:
            accs.append(f"fold{len(w.lines)}")
            w.line(f"{accs[-1]} = tl.full([1, BLOCK_J], 0.0, tl.float32)")
        w.line(f"for r0 in range(0, {count}, FOLD_ROWS):")
        w.indent += 1
        w.line("r = r0 + tl.arange(0, FOLD_ROWS)[:, None]")
        w.line(f"rmask = (r < {count}) & jmask")
        rows = []
        for n, first in enumerate(firsts):
            rows.append(f"rows{n}")
            w.line(f"rows{n} = tl.load({ws} + ({first} + r) * J + j, mask=rmask, other=0.0, cache_modifier='.cg')")
        for acc, row in zip(accs, rows):
            w.line(f"{acc} += tl.reduce({row}, 0, tl.standard._sum_combine, keep_dims=True)")
        w.indent -= 1
        w.forget_scope(w.indent + 1)
        return accs
