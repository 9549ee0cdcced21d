"""The reduction tile: a 2-D block, ``k`` over the kept elements and ``j`` over the
reduced ones (any set of reduced dims: each is unravelled from ``j``).  ``inner``
puts ``j`` on the contiguous tile axis (softmax rows), ``outer`` puts ``k`` there
(column sums).  ``persistent`` holds the whole reduced extent in one block;
otherwise the reductions run in passes over ``j`` chunks, one pass per level of
dependent reductions (max before sum(exp(x - max))), chunk results combined with
Chan's formula for var_mean, and a last pass writes the outputs.

The tile's jobs live in three more modules, mixed into ``ReductionTile``: ``rows``
(a peeled row's head, aligned body and tail, and the row loop that loads the next
row ahead), ``accumulate`` (accumulators, Welford/Chan, online softmax, finishing
into the outputs) and ``split`` (partials across programs, folded by the last one).
"""
from __future__ import annotations

import math

from ...errors import Unsupported
from ..index import ZERO, Coord, Index, unravel
from .accumulate import Accumulators
from .flat import say_multiple
from .rows import RowLoads
from .split import SplitFold


def is_trailing(red_dims, rank: int) -> bool:
    """Whether the reduced dims are the last ones: a row is J consecutive elements."""
    return tuple(red_dims) == tuple(range(rank - len(red_dims), rank))


def peels(align: int, inner: bool, block_k: int, trailing: bool) -> bool:
    """Whether a row is peeled: a head up to its first 16-byte aligned element, an
    aligned body and a tail, one row per program."""
    return align > 1 and inner and block_k == 1 and trailing


class ReductionTile(RowLoads, Accumulators, SplitFold):
    def __init__(self, ref, red_dims, inner: bool, persistent: bool, block_k: int, block_j: int, int64: bool,
                 quad_rng: bool = False, align: int = 1, online: bool = False, split: int = 1,
                 aligned_rows: bool = False, stages: int = 1, out_reversed: bool = False, contig_multiple: int = 1,
                 prefetch: bool = False, rewiden: int = 0, flush: int = 0, constant_row: bool = False):
        if split > 1 and (inner or persistent):
            raise Unsupported("a split reduction needs an outer, multi-pass tile", "split_tile")
        self.split = split  # programs along the reduced extent (the ``split`` module docstring)
        self.quad_rng = quad_rng  # J % 4 == 0: random numbers one Philox call per 4 elements
        self.online = online  # multi-pass: fuse max and sum(exp(a - max)) into one pass
        self.ref, self.red_dims = ref, tuple(red_dims)
        n = len(ref.shape)
        # The reduced dims are the last ones: a row is J consecutive elements.
        self.trailing = trailing = is_trailing(self.red_dims, n)
        # Peeling: a row that does not start on a 16-byte boundary is split into a head
        # (up to the first aligned element), an aligned body and a tail, so the body's
        # loads and stores are provably aligned and vectorize.  One row per program.
        self.align = align
        self.peeled = peels(align, inner, block_k, trailing)
        # Rows of the streamed input start 16-byte aligned in memory (a strided input
        # whose row stride was padded): the body is [0, J rounded down), addressed
        # through each tensor's strides, and only the tail is peeled.
        self.aligned_rows = aligned_rows and self.peeled
        self.inner, self.persistent = inner, persistent
        self.stages = stages  # num_stages of the chunk loop (tl.range): loads issued ahead
        self.block_k, self.block_j, self.int64 = block_k, block_j, int64
        self.results: dict = {}  # reduction expr -> list of (code) per output slot
        self.raxis = 1 if inner else 0
        # One row per program: a row's statistics are scalars, not [1, 1] blocks.  A
        # block carries a layout, and the compiler then gives the peeled edges (16
        # lanes) the body's 8 elements per thread to combine them: about a fifth more
        # instructions (docs/TUNING.md#reduction-tiles).
        self.scalar_rows = inner and block_k == 1 and split == 1
        self.last_pass = False  # set while emitting a multi-pass row's output pass
        self.out_reversed = out_reversed  # that pass walks the chunks last to first
        # The contiguous axis's extent (J inner, K outer) is a multiple of this
        # (``schedulers.base.contiguous_multiple``): the prologue says so to the compiler.
        self.contig_multiple = contig_multiple
        # Rows walked by one program per SM, the next row loaded ahead (the ``rows`` module docstring).
        self.prefetch = prefetch
        # J is a compile-time constant (the scheduler's ``reduction.constant_row_length``)
        self.constant_row = constant_row
        if prefetch and not (self.peeled and persistent and not self.aligned_rows):
            raise Unsupported("prefetching the next row needs a peeled persistent row of contiguous tensors",
                              "prefetch_tile")
        # The last ``rewiden`` passes widen the carried fp16 row for themselves (inline
        # PTX: only where the kernel runs compiled, ``emit_reduction``); the others share
        # the first pass's conversion.
        self.rewiden = rewiden
        self.flush = flush  # float sums fold into the row every ``flush`` chunks (``InnerChunked.flush``)
        self.chunk_lo = "0"  # where the open chunk loop starts (``emit._chunk_scope``)
        self.pass_no, self.passes = 0, 1  # the pass being emitted, of how many (``emit._pass_scope``)
        self.carried: dict = {}  # (pointer, dtype, chunk "e"/"b") -> loop-carried name, in first-use order

    # -- cache hints --------------------------------------------------------------------
    def load_hint(self, axes) -> str:
        """Extra ``tl.load`` arguments for a load whose offset varies along ``axes``.

        A multi-pass row (read once per pass) asks L2 to keep what it loads, and
        ``store_hint`` lets its outputs stream past L2, so the output pass finds the
        row still there.

        A persistent unpeeled row, read once, asks the same of its row-sized loads
        (not of a weight, read by every row anyway): measured faster on every row
        tried (why, with the lines never read again, is not profiled yet).
        docs/TUNING.md#reduction-tiles"""
        if not self.inner:
            return ""
        if self.persistent:
            row_sized = {"k", "j"} <= axes and not self.peeled and not self.prefetch
            return ", eviction_policy='evict_last'" if row_sized else ""
        # The output pass is the row's last read: keeping it would push out the rows
        # later programs are still to read again.
        return ", eviction_policy='evict_first'" if self.last_pass else ", eviction_policy='evict_last'"

    @property
    def store_hint(self) -> str:
        return ", cache_modifier='.cs'" if self.inner and not self.persistent else ""

    # -- layout -------------------------------------------------------------------------
    def divides_fast(self, axes) -> bool:
        """See ``FlatTile.divides_fast``: the contiguous axis is the reduced one (j and
        its chunk axes) in an inner tile, k in an outer one."""
        return axes <= {"k"} if self.inner else "k" not in axes

    def kept_dims(self):
        return [d for d in range(len(self.ref.shape)) if d not in self.red_dims]

    def _axis(self, which):  # tile axis expression suffix
        on_dim1 = (which == "j") == self.inner
        return "[None, :]" if on_dim1 else "[:, None]"

    def shape(self, axes):
        k = "BLOCK_K" if "k" in axes else "1"
        chunk = [a for a in axes if a != "k"]
        j = "1" if not chunk else ("2 * ALIGN" if chunk[0] == "e" else "BLOCK_J")
        return f"[{k}, {j}]" if self.inner else f"[{j}, {k}]"

    def chunk_names(self):
        return ("e", "b") if self.peeled else ("j",)

    def prologue(self, low):
        w = low.w
        w.constexprs["BLOCK_K"] = self.block_k
        w.constexprs["BLOCK_J"] = self.block_j
        K = w.arg("K", "numel", ("numel", self.ref, tuple(self.kept_dims())))
        self.row_length(low)
        pid = "tl.program_id(0).to(tl.int64)" if self.int64 else "tl.program_id(0)"
        w.line(f"pid = {pid}")
        if self.prefetch:  # the rows' coordinates are set per iteration (``open_rows``)
            w.line("G = tl.num_programs(0)")
            w.line("kmask = tl.full([1, 1], True, tl.int1)")
            w.constexprs["ALIGN"] = self.align
            return
        w.line(f"k = pid * BLOCK_K + tl.arange(0, BLOCK_K){self._axis('k')}")
        if self.block_k == 1:
            # The grid has one program per kept index (none when there is none:
            # ``reduction_grid``), so every mask's row test is true; a constant lets the
            # compiler drop it from each element's mask.
            w.line("kmask = tl.full([1, 1], True, tl.int1)")
        else:
            w.line(f"kmask = k < {K}")
        if self.split > 1:
            w.constexprs["SPLIT"] = self.split
            w.comment("this program's range of the reduced extent: [jlo, jhi)")
            w.line("ps = tl.program_id(1)")
            w.line("chunk = (J + SPLIT * BLOCK_J - 1) // (SPLIT * BLOCK_J) * BLOCK_J")
            w.line("jlo = ps * chunk")
            w.line("jhi = tl.minimum(J, jlo + chunk)")
        if self.peeled:
            w.constexprs["ALIGN"] = self.align
            w.comment("the row's aligned body [bstart, bend), head before it, tail after it")
            for stmt in self._row_body("0" if self.aligned_rows else "pid * J", ""):
                w.line(stmt)

    def say_multiple(self, w):
        say_multiple(w, "J" if self.inner else "K", self.contig_multiple)

    def row_length(self, low):
        """Declare ``J``: a compile-time constant when the scheduler says so
        (``constant_row``), else a runtime size said to be a multiple of what it is."""
        w = low.w
        w.arg("J", "flag" if self.constant_row else "numel", ("numel", self.ref, self.red_dims))
        if not self.constant_row:
            self.say_multiple(w)

    def quads(self, lin: Coord):
        if not (self.quad_rng and self.inner and lin.code == "(k * J + j)" and self.block_j >= 4) or self.peeled:
            return None
        start = "0" if self.persistent else "j0"
        return f"(k * (J // 4) + ({start} // 4 + tl.arange(0, BLOCK_J // 4))[None, :])", "[BLOCK_K, BLOCK_J]"

    def open_j(self, low, start: str):
        self.open_chunk(low, "j", start)

    def open_chunk(self, low, c: str, start: str):
        """Emit the coordinates and masks of chunk ``c`` starting at ``start``."""
        w = low.w
        if c == "j":
            w.line(f"j = {start} + tl.arange(0, BLOCK_J){self._axis('j')}")
            w.line("jmask = j < J")
            w.line("mask = kmask & jmask")
            return
        if c == "e":  # lanes [0, ALIGN): the head; [ALIGN, 2 * ALIGN): the tail
            w.line("edge = tl.arange(0, 2 * ALIGN)[None, :]")
            le, in_row = self._edge_lanes("")
            w.line(f"le = {le}")
            w.line(f"jmask_e = {in_row}")
        else:
            w.line(f"lb = {start} + tl.arange(0, BLOCK_J)[None, :]")
            w.line("jmask_b = lb < bend")
        w.line(f"j{c} = l{c} - row0")
        w.line(f"mask_{c} = kmask & jmask_{c}")

    def mask(self, axes, preds=()):
        parts = []
        chunk = [a for a in axes if a != "k"]
        suffix = "" if not chunk or chunk[0] == "j" else f"_{chunk[0]}"
        if "k" in axes and chunk:
            parts.append("mask" + suffix)
        elif "k" in axes:
            parts.append("kmask")
        elif chunk:
            parts.append("jmask" + suffix)
        parts += [f"({p})" for p in preds]
        return " & ".join(parts) if parts else None

    # -- indices --------------------------------------------------------------------------
    def _unravel(self, low, v, k: Coord, j: Coord) -> list:
        """Coordinates of ``v`` with its kept dims unravelled from ``k`` and its reduced
        ones from ``j``."""
        ext = low.extents(v)
        coords = [None] * len(ext)
        for c0, dims in ((k, self.kept_dims()), (j, self.red_dims)):
            for d, c in zip(dims, unravel(c0, [ext[d] for d in dims], low.divider)):
                coords[d] = c
        return coords

    def _unravel_ref(self, low, c="j"):
        jname = "j" if c == "j" else f"j{c}"
        return self._unravel(low, self.ref, Coord("k", frozenset("k")), Coord(jname, frozenset(c)))

    def ref_index(self, low, c="j") -> Index:
        coords = self._unravel_ref(low, c)
        n = len(coords)
        linear = None
        if c != "j":  # a peeled chunk: l{c} is the flat index of the row's elements, unless rows are strided
            return Index(tuple(coords), None if self.aligned_rows else Coord(f"l{c}", frozenset(("k", c))))
        if self.trailing:
            linear = Coord("(k * J + j)", frozenset("kj"))
        elif self.red_dims == tuple(range(len(self.red_dims))):
            linear = Coord("(j * K + k)", frozenset("kj"))
        return Index(tuple(coords), linear)

    def own_row_index(self, low, v, row: str) -> Index:
        """Coordinates of row ``row`` (a scalar) of ``v``, shaped like the reference
        along the reduced dims and smaller along the kept ones, with ``j`` over the row
        (``emit._store_own_rows``; one block per row: the ``j`` chunk)."""
        coords = self._unravel(low, v, Coord(row, frozenset()), Coord("j", frozenset("j")))
        return Index(tuple(coords), Coord(f"({row} * J + j)", frozenset("j")) if self.trailing else None)

    def kept_index(self, low, keepdim: bool) -> Index:
        coords = self._unravel_ref(low)
        if keepdim:
            out = [ZERO if d in self.red_dims else c for d, c in enumerate(coords)]
        else:
            out = [c for d, c in enumerate(coords) if d not in self.red_dims]
        lin = Coord("k", frozenset("k")) if len(self.kept_dims()) else None
        return Index(tuple(out), lin)

    # -- reductions -----------------------------------------------------------------------
    def reduction(self, low, e, v, idx: Index):
        want = self.kept_index(low, e.attrs.get("keepdim", False))
        want = low.normalize(v, want)
        if tuple(c.code for c in idx.coords) != tuple(c.code for c in want.coords):
            raise Unsupported(f"{e.op} result {v.name} is used at coordinates other than its own row",
                              "row_coordinates")
        if tuple(e.inputs[0].shape) and low.shapes[e.inputs[0]] != low.shapes[self.ref]:
            raise Unsupported(f"{e.op} reduces {e.inputs[0].name}, not the reference {self.ref.name}",
                              "reduction_reference")
        if tuple(sorted(e.attrs["dims"])) != self.red_dims:
            raise Unsupported(f"{e.op} reduces dims {e.attrs['dims']}, the tile reduces {self.red_dims}",
                              "reduction_dims")
        if e not in self.results:
            if not self.persistent or self.peeled:
                raise Unsupported(f"{e.op} result {v.name} needed before its pass", "reduction_order")
            acc = self.init(low, e)
            self.results[e] = self.finish(low, e, self.chunk(low, e, acc, first=True))
        return self.results[e][e.outputs.index(v)], frozenset("k")

    def row_shape(self) -> str:
        """The shape of a row's statistic (an accumulator, a reduction's result)."""
        return "[]" if self.scalar_rows else self.shape("k")

    def row_reduce(self, x: str, combine: str) -> str:
        """``x`` reduced over the tile's reduced axis: one value per kept index."""
        if self.scalar_rows:
            return f"tl.reduce({x}, None, {combine})"
        return f"tl.reduce({x}, {self.raxis}, {combine}, keep_dims=True)"
