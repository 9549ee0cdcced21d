"""Drive a tile over a segment: prologue, reduction passes, output stores.

``emit_kernel`` is the one place that decides the *order* of the generated code;
what each value costs is the lowering's business, and which tile to use is the
scheduler's.  Outputs come in three kinds:

* full: shaped like the reference, stored at the tile's coordinates;
* kept: shaped like a reduction result, stored once per kept element;
* reached: smaller tensors met on the way (the report's T11, a [64,1,1,128] mask
  that is broadcast into the scores).  A one-block row tile computes and stores them
  over rows of their own (``_store_own_rows``); other tiles store them where the walk
  reached them, with the broadcast-collapsed coordinates pinned to 0 so each element
  is written once, in the programs that hold such rows (``_rows_guard``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.analysis import after_reductions as _after_reductions
from ..ir.analysis import is_reduction as _is_reduction
from ..ir.analysis import live_exprs_for, online_softmax_pairs, reduction_levels, split_eligible  # noqa: F401
from ..ir.dtypes import DataType
from ..ir.shapes import reduce_shape
from ..ir.values import TensorVal
from ..errors import Unsupported
from .lower import Lowering
from .inner_outer import check_inner_outer_outputs, emit_inner_outer_body
from .tiles.flat import BroadcastTile, FlatTile
from .tiles.inner_outer import InnerOuterTile
from .tiles.protocol import Tile
from .tiles.reduction import ReductionTile
from .writer import KernelArg, KernelWriter


@dataclass
class KernelSource:
    name: str
    source: str
    args: list  # KernelArg, in signature order
    constexprs: dict
    outputs: list  # TensorVals the kernel writes
    tile: object = field(repr=False, default=None)


def _store(low, o, idx, val, axes):
    w, tile = low.w, low.tile
    ptr = w.arg(f"{o.name}_out", "ptr", ("output", o))
    off = low.linear_of(o, idx)
    dedup = []
    dropped_axes = frozenset()
    for c in idx.dropped:
        if c.code != "0" and f"({c.code}) == 0" not in dedup:
            dedup.append(f"({c.code}) == 0")
            dropped_axes |= c.axes
    # A value reached below a pad or cat exists only where the predicates that guard
    # its loads hold: outside them its coordinates run past its own extents.
    all_axes = axes | off.axes | dropped_axes | idx.pred_axes
    mask = tile.mask(all_axes, list(idx.pred) + dedup)
    p = f"{ptr} + {off.code}"
    if not all_axes <= off.axes:
        p = f"tl.broadcast_to({p}, {tile.shape(all_axes)})"
    guard = _rows_guard(low, dedup, dropped_axes)
    if guard:
        w.line(f"if {guard}:")
        w.indent += 1
    w.line(f"tl.store({p}, {val}{', mask=' + mask if mask else ''}{tile.store_hint})")
    if guard:
        w.indent -= 1


def _rows_guard(low, dedup, dropped_axes) -> str | None:
    """A program-level condition for a store that keeps only the rows whose collapsed
    coordinates are 0 (an output broadcast over some kept dims, such as an attention
    fusion's [B, 1, 1, S] mask computed on a multi-pass [B, H, S, S] tile): whether
    any row of the program's tile is one of them.  The other programs skip the store
    and the layout change before it (docs/TUNING.md#own-rows; one-block tiles now
    store such outputs over their own rows, ``_store_own_rows``).  Only for rows of a reduction tile, where the test is a
    reduction over ``BLOCK_K`` row flags; a flat tile's stores keep their element mask
    alone."""
    if not dedup or not isinstance(low.tile, ReductionTile) or dropped_axes != {"k"}:
        return None
    rows = " & ".join(f"({d})" for d in dedup)
    return low.w.tmp(f"tl.reduce(tl.where(kmask & {rows}, 1, 0), None, tl.standard._sum_combine) > 0", "g")


def _store_walked(low, outputs, ref_idx, full, reached):
    for o in full:
        val, axes = low.value(o, ref_idx)
        _store(low, o, low.normalize(o, ref_idx), val, axes)
    for o in reached:
        idx = low.reached.get(o)
        if idx is None:
            raise Unsupported(f"output {o.name} is not reached from the reference tensor {low.tile.ref.name}",
                              "output_not_reached")
        if o in low.windowed and o not in low.covered:
            raise Unsupported(f"output {o.name} is reached only below a slice: the walk over "
                              f"{low.tile.ref.name} covers part of it", "output_below_slice")
        val, axes = low.value(o, idx)
        _store(low, o, idx, val, axes)


def emit_kernel(name: str, outputs, shapes, inputs_info, tile: Tile, header: list[str], values=None) -> KernelSource:
    """``values``: ``Segment.values``, for layout ops with runtime arguments.  Raises
    ``Unsupported`` where ``tile`` cannot compute ``outputs``: ``check_outputs`` before
    a line is written, the walk (``Lowering``) for the rest."""
    check_outputs(outputs, shapes, tile)
    w = KernelWriter(name)
    low = Lowering(w, shapes, inputs_info, tile, values or {}, outputs)
    tile.prologue(low)
    full = _full(outputs, shapes, tile)
    if isinstance(tile, (FlatTile, BroadcastTile)):
        _store_walked(low, outputs, tile.ref_index(low), full, [o for o in outputs if o not in full])
    elif isinstance(tile, InnerOuterTile):
        emit_inner_outer_body(low, outputs, shapes, tile, full, _store_walked, _store)
    else:
        _emit_reduction_body(low, outputs, shapes, tile, full)
    read = sorted({a.source[1].name for a in w.args.values() if a.kind == "ptr" and a.source[0] == "tensor"})
    header = header + [f"reads {', '.join(read) or 'nothing'} once; writes {', '.join(o.name for o in outputs)} once"]
    args = list(w.args.values())
    return KernelSource(name, w.source(header), args, dict(w.constexprs), list(outputs), tile)


def check_outputs(outputs, shapes, tile: Tile) -> None:
    """What ``tile`` asks of the segment that needs no walk, raising its ``Unsupported``:
    an inner-outer tile's outputs are full-size, row or column results
    (``inner_outer.check_inner_outer_outputs``); a split reduction has one level of
    reductions accumulated in float32, and pointwise outputs it writes in its one pass
    (``split_levels``, ``split_dtype``, ``split_outputs``).  The schedulers' run-time
    checks call it before the walk (``schedulers.base.checked_emit``), so a segment it
    refuses costs no source."""
    full = _full(outputs, shapes, tile)
    if isinstance(tile, InnerOuterTile):
        check_inner_outer_outputs(outputs, shapes, tile, full)
    elif isinstance(tile, ReductionTile) and tile.split > 1:
        levels = reduction_levels(live_exprs_for(outputs))
        if len(set(levels.values())) != 1:
            raise Unsupported("a split reduction cannot feed one reduction into another", "split_levels")
        if any(tile.acc_dtype(e) is not DataType.Float for e in levels):
            raise Unsupported("a split reduction accumulates in float32 only", "split_dtype")
        _, reached = _kept_and_reached(outputs, shapes, tile, full)
        if (full or reached) and not _early(outputs, full, reached):
            raise Unsupported("a split reduction cannot write outputs that need its result at every row",
                              "split_outputs")


def _full(outputs, shapes, tile: Tile) -> list:
    """The outputs shaped like the reference and not a reduction's result."""
    return [o for o in outputs if shapes[o] == shapes[tile.ref] and not _is_reduction(o)]


def _kept_and_reached(outputs, shapes, tile: ReductionTile, full) -> tuple[dict, list]:
    """(kept shapes -> keepdim, the outputs neither full nor kept) of a reduction tile."""
    ref_shape = shapes[tile.ref]
    kept_shapes = {reduce_shape(ref_shape, tile.red_dims, False): False,
                   reduce_shape(ref_shape, tile.red_dims, True): True}
    return kept_shapes, [o for o in outputs if o not in full and shapes[o] not in kept_shapes]


def _early(outputs, full, reached) -> bool:
    """Whether a multi-pass tile writes the pointwise outputs in its first pass: they
    need no reduction result (a gradient stored beside its column sum), so that pass
    writes them from the values it loads anyway, instead of a last pass that would
    read the inputs again."""
    return bool(full or reached) and not (set(full + reached) & _after_reductions(outputs))


def _emit_reduction_body(low, outputs, shapes, tile: ReductionTile, full):
    w = low.w
    kept_shapes, reached = _kept_and_reached(outputs, shapes, tile, full)
    kept = [o for o in outputs if o not in full and shapes[o] in kept_shapes]

    def store_kept():
        for o in kept:
            idx = low.normalize(o, tile.kept_index(low, kept_shapes[shapes[o]]))
            val, axes = low.value(o, idx)
            _store(low, o, idx, val, axes)

    def store_chunk(c):
        low.clear_reached()
        _store_walked(low, outputs, tile.ref_index(low, c), full, reached)

    if tile.persistent and not tile.peeled:  # one block: reductions computed where first used
        tile.open_j(low, "0")
        after = _after_reductions(outputs)
        own = [o for o in reached if _own_rows_fit(low, tile, o) and o not in after]
        _store_walked(low, outputs, tile.ref_index(low), full, [o for o in reached if o not in own])
        store_kept()
        for o in own:
            _store_own_rows(low, tile, o)
        return
    levels = reduction_levels(live_exprs_for(outputs))
    if tile.persistent:  # peeled: all chunks stay live, in registers, for the whole program
        if tile.prefetch:
            before = tile.open_rows(low)
        for c in tile.chunk_names():
            tile.open_chunk(low, c, "bstart")
        top = len(w.lines)  # where a prefetching tile's loads go
        n_passes = len(set(levels.values())) + 1
        for n, lvl in enumerate(sorted(set(levels.values()))):
            with _pass_scope(low, tile, n, n_passes):
                for e in [e for e, l in levels.items() if l == lvl]:
                    acc = tile.init_accumulators(low, e)
                    for c in tile.chunk_names():
                        tile.chunk(low, e, acc, c=c)
                    tile.results[e] = tile.finish(low, e, acc)
        with _pass_scope(low, tile, n_passes - 1, n_passes):
            store_kept()
            for c in tile.chunk_names():
                store_chunk(c)
        if tile.prefetch:
            tile.close_rows(low, before, top)
        return
    early = _early(outputs, full, reached)
    if tile.split > 1:
        _emit_split_body(low, tile, levels, store_kept, full, reached, early)
        return
    online = online_softmax_pairs(levels) if tile.online else {}  # sum expr -> (max expr, a)
    for s_expr, (m_expr, _) in online.items():
        levels[s_expr] = levels[m_expr]
    for lvl in sorted(set(levels.values())):
        exprs = [e for e, l in levels.items() if l == lvl]
        pairs = [(online[e][0], e, online[e][1]) for e in exprs if e in online]
        plain = [e for e in exprs if e not in online and all(e is not m for m, _, _ in pairs)]
        accs = {e: tile.init(low, e) for e in plain}
        oaccs = {m: tile.init_online(low, m) for m, _, _ in pairs}
        first = lvl == min(levels.values())
        for c in tile.chunk_names():
            with _chunk_scope(low, tile, c):
                low.clear_reached()
                for e in plain:
                    tile.chunk(low, e, accs[e], c=c)
                tile.flush_sums(low, plain, accs, c)
                for m, _, a in pairs:
                    tile.online_chunk(low, m, a, oaccs[m], c)
                if early and first:
                    _store_walked(low, outputs, tile.ref_index(low, c), full, reached)
        for e in plain:
            tile.results[e] = tile.finish(low, e, accs[e])
        for m, s_expr, _ in pairs:
            tile.results[m], tile.results[s_expr] = tile.online_finish(low, m, s_expr, oaccs[m])
    store_kept()
    if (full or reached) and not early:
        tile.last_pass = True
        for c in tile.chunk_names():
            with _chunk_scope(low, tile, c):
                store_chunk(c)


def _own_rows_fit(low, tile, o) -> bool:
    """Whether the output ``o`` can be stored over its own rows (``_store_own_rows``)
    if nothing of it comes from a reduction: a one-block row tile (no prefetching),
    ``o`` of the reference's rank and as long along the reduced dims."""
    ref, so = low.shapes[tile.ref], low.shapes[o]
    return (tile.inner and not tile.prefetch and tile.split == 1 and len(so) == len(ref)
            and all(so[d] == ref[d] for d in tile.red_dims))


def _store_own_rows(low, tile, o):
    """Store ``o``, which differs from the reference along the kept dims (an attention
    fusion's [64,1,1,128] scaled mask on the [64,12,128,128] tile), over rows of its
    own: program ``pid`` computes o's rows ``pid, pid + G, ...`` (``G`` programs) from
    its inputs, and the programs past o's rows skip the loop.  A row at a time is a
    [1, BLOCK_J] block, one value per thread, stored in the layout it is computed in.

    Stored where the walk met it instead, every program had to find out whether its
    rows held any of o's elements (a reduction over its rows: shared memory and a
    barrier), and those that did converted o's values to the store's layout, which
    was slower (docs/TUNING.md#own-rows).  The loop also
    covers an ``o`` with more rows than the tile has (a padded output walked through
    a slice of it)."""
    w = low.w
    rows = w.arg(f"{o.name}_rows", "numel", ("numel", o, tuple(tile.kept_dims())))
    w.line(f"for k_o in range(pid, {rows}, tl.num_programs(0)):")
    w.indent += 1
    with low.apart():  # nothing the walk computed: it was at other rows
        idx = tile.own_row_index(low, o, "k_o")
        val, axes = low.value(o, idx)
        _store(low, o, idx, val, axes)
    w.indent -= 1


def _emit_split_body(low, tile, levels, store_kept, full, reached, early):
    """A split reduction (see ``tiles.split``): one pass accumulates this program's rows,
    the strip's last program folds the partials and writes the kept outputs; every
    program writes the pointwise outputs of its own rows (``check_outputs`` said that it
    can)."""
    exprs = list(levels)
    accs = {e: tile.init(low, e) for e in exprs}
    outputs = full + reached
    with _chunk_scope(low, tile, "j"):
        low.clear_reached()
        for e in exprs:
            tile.chunk(low, e, accs[e], c="j")
        if early:
            _store_walked(low, outputs, tile.ref_index(low, "j"), full, reached)
    tile.split_combine(low, exprs, accs)
    store_kept()
    tile.split_close(low)


class _pass_scope:
    """Pass ``n`` of ``passes`` over a prefetching tile's row (the last one stores the
    outputs): values computed in a pass are forgotten after it, so a pass can read
    the carried row afresh (``tiles.rows`` module docstring: ``rewiden``).  A no-op for
    other tiles."""

    def __init__(self, low, tile, n: int, passes: int):
        self.low, self.tile, self.n, self.passes = low, tile, n, passes

    def __enter__(self):
        if self.tile.prefetch:
            self.tile.pass_no, self.tile.passes = self.n, self.passes
            self.low.push()
        return self

    def __exit__(self, *exc):
        if self.tile.prefetch:
            self.low.pop()
        return False


class _chunk_scope:
    """A pass over chunk ``c``: a loop over BLOCK_J blocks for the row's body (``j`` or
    ``b``), a single block for a peeled row's edges (head and tail).  Values computed inside are
    forgotten at the end, so the next pass recomputes (re-reads) what it needs."""

    def __init__(self, low, tile, c):
        self.low, self.tile, self.c = low, tile, c

    def __enter__(self):
        w = self.low.w
        if self.c in ("j", "b"):
            lo, hi = (("jlo", "jhi") if self.tile.split > 1 else ("0", "J")) if self.c == "j" else ("bstart", "bend")
            backwards = self.tile.last_pass and self.tile.out_reversed
            if backwards:
                # The first reads are the chunks the statistics pass loaded last, the
                # likeliest to be still in L2 (``InnerChunked.out_reversed``).
                nb = w.tmp(f"({hi} - {lo} + BLOCK_J - 1) // BLOCK_J", "nb")
                w.line(f"for i0 in range(0, {nb}):")
            elif self.tile.stages > 1:
                w.line(f"for j0 in tl.range({lo}, {hi}, BLOCK_J, num_stages={self.tile.stages}):")
            else:
                w.line(f"for j0 in range({lo}, {hi}, BLOCK_J):")
            w.indent += 1
            self.tile.chunk_lo = lo
            if backwards:
                w.line(f"j0 = {lo} + ({nb} - 1 - i0) * BLOCK_J")
        self.low.push()
        self.tile.open_chunk(self.low, self.c, "j0")
        return self

    def __exit__(self, *exc):
        self.low.pop()
        if self.c in ("j", "b"):
            self.low.w.indent -= 1
        return False


__all__ = ["KernelSource", "KernelArg", "emit_kernel", "live_exprs_for", "reduction_levels"]
