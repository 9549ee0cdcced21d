"""The body of an inner-outer kernel: the row loop, then the two-level fold of the
column sums, or in the groups' walk their store (the tile and the design:
``tiles.inner_outer``).  The tile's own module holds what the lowering asks of it;
this one, beside ``emit``, the order of the generated code.
"""
from __future__ import annotations

from ..errors import Unsupported
from ..ir.dtypes import DataType
from ..ir.analysis import computed_from as _computed_from
from ..ir.shapes import reduce_shape
from .tiles.inner_outer import InnerOuterTile


def output_kinds(outputs, shapes, tile: InnerOuterTile, full) -> tuple:
    """(row_shapes, col_shapes, rows, cols): the shapes of a row result and of a column
    result (shape -> keepdim), and the outputs of each kind (``full``: the outputs
    shaped like the reference)."""
    ref_shape = shapes[tile.ref]
    row_shapes = {reduce_shape(ref_shape, tile.red_dims, False): False,
                  reduce_shape(ref_shape, tile.red_dims, True): True}
    summed = tile.col_dims if tile.grouped else tuple(tile.kept_dims())
    col_shapes = {reduce_shape(ref_shape, summed, False): False, reduce_shape(ref_shape, summed, True): True}
    from_cols = _computed_from(outputs, tile.outer)
    # Column results: the values computed from a column sum, and the values shaped like
    # one though computed without (a first layer that returns the row-major copy of
    # the position bias it reads): a value of that shape cannot vary along the summed dims,
    # so the programs storing the column sums store it too, once.
    cols = [o for o in outputs if o in from_cols or (
        o not in full and shapes[o] not in row_shapes and shapes[o] in col_shapes)]
    rows = [o for o in outputs if o not in full and o not in cols]
    return row_shapes, col_shapes, rows, cols


def check_inner_outer_outputs(outputs, shapes, tile: InnerOuterTile, full):
    """Every output full-size, a row result or a column result, and none full-size
    computed from a column sum: raises ``Unsupported`` otherwise.  Needs no walk
    (``emit.check_outputs``)."""
    row_shapes, col_shapes, rows, cols = output_kinds(outputs, shapes, tile, full)
    for o in cols:
        if shapes[o] not in col_shapes:
            raise Unsupported(f"output {o.name} is computed from a column sum but is not shaped like one",
                              "column_output_shape")
    for o in rows:
        if shapes[o] not in row_shapes:
            raise Unsupported(f"output {o.name} is neither full-size, a row result nor a column result",
                              "row_output_shape")
    from_cols = _computed_from(outputs, tile.outer)
    for o in full:
        if o in from_cols:
            raise Unsupported(f"full-size output {o.name} needs a column sum", "full_output_column")


def emit_inner_outer_body(low, outputs, shapes, tile: InnerOuterTile, full, store_walked, store):
    """The kernel body after the prologue (see the module docstring), for outputs that
    passed ``check_inner_outer_outputs``.  ``full``: the outputs shaped like the
    reference; ``store_walked`` and ``store`` are emit's."""
    w = low.w
    row_shapes, col_shapes, rows, cols = output_kinds(outputs, shapes, tile, full)

    accs = []
    for n, e in enumerate(tile.outer):
        accs.append(f"cacc{n}")
        w.line(f"cacc{n} = tl.full([BLOCK_K, BLOCK_J], 0.0, tl.float32)")
    tile.open_rows(low)
    low.push()
    tile.in_rows = True
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
    if tile.grouped:
        _store_groups(low, tile, accs, cols, col_shapes, shapes, store)
    else:
        _fold_and_store(low, tile, accs, cols, col_shapes, shapes, store)


def _store_groups(low, tile, accs, cols, col_shapes, shapes, store):
    """The groups' walk: each accumulator row is its group's column sum; the column
    results are stored from it, [BLOCK_K, BLOCK_J] at once."""
    w = low.w
    low.push()
    w.line("kmask = fmask")
    tile.open_j(low, "0")
    _store_columns(low, tile, accs, cols, col_shapes, shapes, store, frozenset("kj"))
    low.pop()


def _store_columns(low, tile, sums, cols, col_shapes, shapes, store, axes):
    """Finish each column sum from its code in ``sums`` and store the outputs computed
    from them, whose values vary along ``axes`` (``j``; ``k`` too in the groups' walk)."""
    for e, total in zip(tile.outer, sums):
        tile.results[e] = tile.finish(low, e, [total])
    for o in cols:
        o_idx = low.normalize(o, tile.outer_index(low, col_shapes[shapes[o]]))
        val, along = low.value(o, o_idx)
        store(low, o, o_idx, val, along | axes)


def _fold_and_store(low, tile, accs, cols, col_shapes, shapes, store):
    """The folded walk: per-program partial rows to scratch, folded in two levels by
    the last program of each group, then by the last group, which stores the column
    results."""
    w = low.w
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
    _store_columns(low, tile, totals, cols, col_shapes, shapes, store, frozenset("j"))
    w.line(f"tl.atomic_xchg({cnt} + NGROUP, 0, sem='relaxed', scope='gpu')")
    w.indent -= 2
    low.pop()
