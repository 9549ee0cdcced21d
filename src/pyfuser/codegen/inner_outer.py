"""Row reductions and column sums of the same tensor in one kernel (the inner-outer tile).

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
   sums (and whatever the fusion computes from them: a cast, a scale).

Counters live in the scratch buffer and are reset by the programs that used them,
so the next launch finds zeros.  Every fold adds rows in a fixed order, so the
result does not depend on which program finishes last.  Measured numbers and the
sizing rules: ``schedulers/inner_outer.py``.
"""
from __future__ import annotations

from ..errors import Unsupported
from ..ir.dtypes import TRITON_NAME, DataType
from ..ir.analysis import computed_from as _computed_from
from ..ir.shapes import reduce_shape
from .index import ZERO, Coord, Index
from .tiles.reduction import ReductionTile


class InnerOuterTile(ReductionTile):
    """The persistent inner tile over ``ref`` (rows reduced over ``red_dims``), plus the
    column sums ``outer`` (reductions over the kept dims), see the module docstring."""

    def __init__(self, ref, red_dims, block_k: int, block_j: int, int64: bool, quad_rng: bool, outer,
                 nprog: int, group: int, fold_rows: int, stages: int = 1, contig_multiple: int = 1):
        super().__init__(ref, red_dims, True, True, block_k, block_j, int64, quad_rng,
                         contig_multiple=contig_multiple)
        self.outer = list(outer)  # the column-sum exprs, in slot order
        self.nprog, self.group, self.fold_rows = nprog, group, fold_rows
        self.ngroup = -(-nprog // group)
        self.stages = stages
        self.in_rows = False  # inside the row loop: column sums are not available yet

    def prologue(self, low):
        w = low.w
        w.constexprs.update(BLOCK_K=self.block_k, BLOCK_J=self.block_j, NPROG=self.nprog, GROUP=self.group,
                            NGROUP=self.ngroup, FOLD_ROWS=self.fold_rows)
        w.arg("K", "numel", ("numel", self.ref, tuple(self.kept_dims())))
        w.arg("J", "numel", ("numel", self.ref, self.red_dims))
        self.say_multiple(w)
        w.line(f"pid = {'tl.program_id(0).to(tl.int64)' if self.int64 else 'tl.program_id(0)'}")

    # -- column sums ----------------------------------------------------------------------
    def outer_index(self, low, keepdim: bool) -> Index:
        """Where a column sum's element lives: the row's coordinates along the reduced
        dims, 0 (keepdim) or nothing along the kept ones; linear index ``j``."""
        coords = self._unravel_ref(low)
        kept = set(self.kept_dims())
        if keepdim:
            out = [ZERO if d in kept else c for d, c in enumerate(coords)]
        else:
            out = [c for d, c in enumerate(coords) if d not in kept]
        return Index(tuple(out), Coord("j", frozenset("j")))

    def reduction(self, low, e, v, idx: Index):
        if e not in self.outer:
            return super().reduction(low, e, v, idx)
        if self.in_rows or e not in self.results:
            raise Unsupported(f"column sum {v.name} is used inside the rows it sums", "column_sum_in_rows")
        want = low.normalize(v, self.outer_index(low, e.attrs.get("keepdim", False)))
        if tuple(c.code for c in idx.coords) != tuple(c.code for c in want.coords):
            raise Unsupported(f"column sum {v.name} is used at coordinates other than its own column",
                              "column_coordinates")
        return self.results[e][0], frozenset("j")

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


def emit_inner_outer_body(low, outputs, shapes, tile: InnerOuterTile, full, store_walked, store):
    """The kernel body after the prologue (see the module docstring).  ``full``: the
    outputs shaped like the reference; ``store_walked`` and ``store`` are emit's."""
    w = low.w
    ref_shape = shapes[tile.ref]
    row_shapes = {reduce_shape(ref_shape, tile.red_dims, False): False,
                  reduce_shape(ref_shape, tile.red_dims, True): True}
    kept_dims = tuple(tile.kept_dims())
    col_shapes = {reduce_shape(ref_shape, kept_dims, False): False, reduce_shape(ref_shape, kept_dims, True): True}
    from_cols = _computed_from(outputs, tile.outer)
    cols = [o for o in outputs if o in from_cols]
    rows = [o for o in outputs if o not in full and o not in cols]
    for o in cols:
        if shapes[o] not in col_shapes:
            raise Unsupported(f"output {o.name} is computed from a column sum but is not shaped like one",
                              "column_output_shape")
    for o in rows:
        if shapes[o] not in row_shapes:
            raise Unsupported(f"output {o.name} is neither full-size, a row result nor a column result",
                              "row_output_shape")
    for o in full:
        if o in from_cols:
            raise Unsupported(f"full-size output {o.name} needs a column sum", "full_output_column")

    accs = []
    for n, e in enumerate(tile.outer):
        accs.append(f"cacc{n}")
        w.line(f"cacc{n} = tl.full([BLOCK_K, BLOCK_J], 0.0, tl.float32)")
    w.comment("this program's rows: blocks pid, pid + NPROG, ...")
    if tile.stages > 1:
        w.line(f"for kb in tl.range(pid * BLOCK_K, K, NPROG * BLOCK_K, num_stages={tile.stages}):")
    else:
        w.line("for kb in range(pid * BLOCK_K, K, NPROG * BLOCK_K):")
    w.indent += 1
    low.push()
    tile.in_rows = True
    w.line("k = kb + tl.arange(0, BLOCK_K)[:, None]")
    w.line("kmask = k < K")
    tile.open_j(low, "0")
    low.clear_reached()
    idx = tile.ref_index(low)
    store_walked(low, outputs, idx, full, [])
    for o in rows:
        o_idx = low.normalize(o, tile.kept_index(low, row_shapes[shapes[o]]))
        val, axes = low.value(o, o_idx)
        store(low, o, o_idx, val, axes)
    for acc, e in zip(accs, tile.outer):
        x, _ = low.value(e.inputs[0], idx)
        xs = x if e.inputs[0].dtype is DataType.Float else f"({x}).to(tl.float32)"
        w.line(f"{acc} += tl.where(mask, {xs}, 0.0)")
    tile.in_rows = False
    low.pop()
    w.indent -= 1

    n_out = len(tile.outer)
    stride = "(NPROG + NGROUP)"  # scratch rows per column sum: one per program, one per group
    ws = w.arg("ws_ptr", "ptr", ("scratch", n_out * (tile.nprog + tile.ngroup), tile.ref, tile.red_dims, 1,
                                 "float32", False))
    cnt = w.arg("cnt_ptr", "ptr", ("scratch", tile.ngroup + 1, tile.ref, (), 1, "int32", True))
    low.push()
    w.line("j = tl.arange(0, BLOCK_J)[None, :]")
    w.line("jmask = j < J")
    for n, acc in enumerate(accs):
        w.line(f"tl.store({ws} + ({n} * {stride} + pid) * J + j, "
               f"tl.reduce({acc}, 0, tl.standard._sum_combine, keep_dims=True), mask=jmask)")
    w.comment("level 1: the last program of each group folds the group's rows")
    w.line("tl.debug_barrier()")
    w.line("g = pid // GROUP")
    w.line(f"arrived = tl.atomic_add({cnt} + g, 1, sem='acq_rel', scope='gpu')")
    w.line("members = tl.minimum(NPROG - g * GROUP, GROUP)")
    w.line("if arrived == members - 1:")
    w.indent += 1
    parts = tile._fold(low, ws, [f"{n} * {stride} + g * GROUP" for n in range(n_out)], "members")
    for n, part in enumerate(parts):
        w.line(f"tl.store({ws} + ({n} * {stride} + NPROG + g) * J + j, {part}, mask=jmask)")
    w.line(f"tl.atomic_xchg({cnt} + g, 0, sem='relaxed', scope='gpu')  # ready for the next launch")
    w.comment("level 2: the last group folds the group rows and writes the column results")
    w.line("tl.debug_barrier()")
    w.line(f"groups = tl.atomic_add({cnt} + NGROUP, 1, sem='acq_rel', scope='gpu')")
    w.line("if groups == NGROUP - 1:")
    w.indent += 1
    totals = tile._fold(low, ws, [f"{n} * {stride} + NPROG" for n in range(n_out)], "NGROUP")
    for e, total in zip(tile.outer, totals):
        tile.results[e] = tile.finish(low, e, [total])
    for o in cols:
        o_idx = low.normalize(o, tile.outer_index(low, col_shapes[shapes[o]]))
        val, axes = low.value(o, o_idx)
        store(low, o, o_idx, val, axes | frozenset("j"))
    w.line(f"tl.atomic_xchg({cnt} + NGROUP, 0, sem='relaxed', scope='gpu')")
    w.indent -= 2
    low.pop()
