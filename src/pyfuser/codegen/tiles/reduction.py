"""The reduction tile: a 2-D block, ``k`` over the kept elements and ``j`` over the
reduced ones (any set of reduced dims: each is unravelled from ``j``).  ``inner``
puts ``j`` on the contiguous tile axis (softmax rows), ``outer`` puts ``k`` there
(column sums).  ``persistent`` holds the whole reduced extent in one block;
otherwise the reductions run in passes over ``j`` chunks, one pass per level of
dependent reductions (max before sum(exp(x - max))), chunk results combined with
Chan's formula for var_mean, and a last pass writes the outputs.

Split (``split`` > 1, outer multi-pass tiles only): a column sum over [16384, 4096]
has 4096 / BLOCK_K programs, too few to keep a large GPU busy, each walking 16384 rows.
A second grid axis cuts the reduced extent into ``split`` ranges.  Each program
stores its partial results to a scratch buffer and increments a per-column-strip
counter; the program that finds it is the last of its strip folds the partials in
a fixed order (so results do not depend on which program finishes last), writes
the outputs and resets the counter for the next launch.  Sums, products, max and
min load all SPLIT partials as one block and reduce it as a tree (``_fold_block``);
var_mean's Chan steps fold them one by one.  Pointwise outputs that
need no reduction result are written by every program for its own rows.

Prefetch (``prefetch``, peeled persistent rows only): a row of 30522 fp16 held on
16-32 warps is one program per SM, which loads, reduces, then stores, so while its
stores drain and its reductions run the SM has no loads in flight.  With ``prefetch``
the grid has one program per SM, each walking rows ``pid, pid + G, ...``; the loads
of the next row (its head, tail and aligned body) are issued at the top of each
iteration and carried into the next one as loop values (``carried_load``), so they
arrive while this row is reduced and stored.  Two rows then share the registers.
For some fusions they fit only if the fp32 row the first pass converts is not also
held through the later ones (``rewiden``, fp16 rows: the last ``rewiden`` passes
widen the carried row for themselves, through inline PTX that the compiler cannot
merge with another conversion); for others each extra conversion is what spills.
Which is which is left to the spill check (``reduction.prefetch_pays``;
docs/TUNING.md#reduction-tiles).
"""
from __future__ import annotations

import math

from ...errors import Unsupported
from ...ir.dtypes import TRITON_NAME, DataType
from ...ir.ops import OPS
from ..index import ZERO, Coord, Index, unravel
from ..lower import compute_dtype
from .flat import say_multiple


# PTX that widens a carried fp16 row to fp32 (``ReductionTile.carried_load``).  A bf16
# row is not widened again: ``cvt.f32.bf16`` runs on the conversion unit (slower than
# reusing the fp32 row), and moving its bits to the upper half of an fp32 instead
# spills (docs/TUNING.md#reduction-tiles).
_WIDEN = {DataType.Half: "cvt.f32.f16 $0, $1;"}


class ReductionTile:
    def __init__(self, ref, red_dims, inner: bool, persistent: bool, block_k: int, block_j: int, int64: bool,
                 quad_rng: bool = False, align: int = 1, online: bool = False, split: int = 1,
                 aligned_rows: bool = False, stages: int = 1, out_reversed: bool = False, contig_multiple: int = 1,
                 prefetch: bool = False, rewiden: int = 0):
        if split > 1 and (inner or persistent):
            raise Unsupported("a split reduction needs an outer, multi-pass tile", "split_tile")
        self.split = split  # programs along the reduced extent (see the module docstring)
        self.quad_rng = quad_rng  # J % 4 == 0: random numbers one Philox call per 4 elements
        self.online = online  # multi-pass: fuse max and sum(exp(a - max)) into one pass
        self.ref, self.red_dims = ref, tuple(red_dims)
        n = len(ref.shape)
        # The reduced dims are the last ones: a row is J consecutive elements.
        self.trailing = trailing = self.red_dims == tuple(range(n - len(self.red_dims), n))
        # Peeling: a row that does not start on a 16-byte boundary is split into a head
        # (up to the first aligned element), an aligned body and a tail, so the body's
        # loads and stores are provably aligned and vectorize.  One row per program.
        self.align = align
        self.peeled = align > 1 and inner and block_k == 1 and trailing
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
        # lanes) the body's 8 elements per thread to combine them: log-softmax
        # [8192, 30522] fp16 -> fp16 + fp32 compiled to 787 PTX instructions (with the
        # constant row mask below), 638 with scalars (sm_90, offline).
        self.scalar_rows = inner and block_k == 1 and split == 1
        self.last_pass = False  # set while emitting a multi-pass row's output pass
        self.out_reversed = out_reversed  # that pass walks the chunks last to first
        # The contiguous axis's extent (J inner, K outer) is a multiple of this
        # (``schedulers.base.contiguous_multiple``): the prologue says so to the compiler.
        self.contig_multiple = contig_multiple
        # Rows walked by one program per SM, the next row loaded ahead (module docstring).
        self.prefetch = prefetch
        if prefetch and not (self.peeled and persistent and not self.aligned_rows):
            raise Unsupported("prefetching the next row needs a peeled persistent row of contiguous tensors",
                              "prefetch_tile")
        # The last ``rewiden`` passes widen the carried fp16 row for themselves (inline
        # PTX: only where the kernel runs compiled, ``emit_reduction``); the others share
        # the first pass's conversion.
        self.rewiden = rewiden
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
        """Declare ``J``: a compile-time constant for a row narrower than its block
        (``constant_row``), else a runtime size said to be a multiple of what it is."""
        w = low.w
        constant = self.constant_row(low)
        w.arg("J", "flag" if constant else "numel", ("numel", self.ref, self.red_dims))
        if not constant:
            self.say_multiple(w)

    def constant_row(self, low) -> bool:
        """Whether the row length ``J`` is a compile-time constant (Triton compiles one
        kernel per value): for a row held in one block wider than the row.  The
        compiler then knows which lanes past ``J`` are masked for every row and drops
        their loads, math and stores instead of predicating them off at run time (fewer
        registers, a faster padded row).  The price is a compile per distinct row
        length, where a runtime length serves them all.  The inner-outer tile keeps a
        runtime length: a constant one gained nothing there.
        docs/TUNING.md#reduction-tiles"""
        if not (self.inner and self.persistent and not self.peeled and not self.prefetch):
            return False
        shape = low.shapes[self.ref]
        return math.prod(shape[d] for d in self.red_dims) < self.block_j

    # -- rows walked with the next one loaded ahead (``prefetch``) ----------------------
    def open_rows(self, low):
        """Open the loop over this program's rows (row ``r``'s coordinates and aligned
        body); ``close_rows`` ends it.  Returns where the loop starts."""
        w = low.w
        before = len(w.lines)
        w.line("for r in range(pid, K, G):")
        w.indent += 1
        w.line(f"k = r + tl.arange(0, BLOCK_K){self._axis('k')}")
        for stmt in self._row_body("r * J", ""):
            w.line(stmt)
        return before

    @staticmethod
    def _row_body(row0: str, s: str) -> list[str]:
        """Statements for the aligned body [bstart, bend) of the row starting at element
        ``row0``, names suffixed ``s``."""
        return [f"row0{s} = {row0}",
                f"bstart{s} = tl.multiple_of((row0{s} + ALIGN - 1) // ALIGN * ALIGN, ALIGN)",
                f"bend{s} = tl.multiple_of((row0{s} + J) // ALIGN * ALIGN, ALIGN)"]

    @staticmethod
    def _edge_lanes(s: str) -> tuple[str, str]:
        """The head and tail's flat indices (lanes [0, ALIGN): the head; [ALIGN, 2 *
        ALIGN): the tail) of the row whose coordinates are suffixed ``s``, and the test
        that a lane holds one of the row's elements (``le{s}`` named)."""
        return (f"tl.where(edge < ALIGN, row0{s} + edge, bend{s} + edge - ALIGN)",
                f"tl.where(edge < ALIGN, le{s} < tl.minimum(bstart{s}, row0{s} + J), "
                f"(le{s} >= bstart{s}) & (le{s} < row0{s} + J))")

    @classmethod
    def _row_chunks(cls, s: str, live: str | None) -> list[str]:
        """Statements for the head and tail lanes (``le``) and the aligned body (``lb``)
        of the row whose coordinates are suffixed ``s``, and their masks; ``live``: the
        condition that the row exists."""
        guard = f" & ({live})" if live else ""
        le, in_row = cls._edge_lanes(s)
        return [f"le{s} = {le}", f"mask_e{s} = {in_row}{guard}",
                f"lb{s} = bstart{s} + tl.arange(0, BLOCK_J)[None, :]", f"mask_b{s} = (lb{s} < bend{s}){guard}"]

    def carried_load(self, w, ptr: str, off: str, mask: str | None, dt: DataType) -> str | None:
        """The loop-carried value standing for ``tl.load(ptr + off, mask)``, as this
        pass reads it, if it loads the row's head and tail or its aligned body; else
        None (load it).  The last ``rewiden`` passes read an fp16 row widened to fp32
        afresh (module docstring); every use of such a value computes in fp32
        (``compute_dtype``) or stores it, so the wider value changes no result."""
        if not self.prefetch or (off, mask) not in (("le", "mask_e"), ("lb", "mask_b")):
            return None
        name = self.carried.setdefault((ptr, dt, off[1]), f"c{len(self.carried)}")
        if dt not in _WIDEN or self.pass_no == 0 or self.pass_no < self.passes - self.rewiden:
            return name
        # one PTX text per pass: identical inline assembly on the same value would be merged
        return w.tmp(f'tl.inline_asm_elementwise("{_WIDEN[dt]}  // pass {self.pass_no}", "=r,h", [{name}], '
                     "dtype=tl.float32, is_pure=True, pack=1)", "x")

    def close_rows(self, low, before: int, top: int):
        """End the row loop: pass each next-row load on to the next iteration, and put
        the loads in place, the next row's at ``top`` and the first row's before the
        loop (known only now that the body has asked for them).  The head and tail are
        carried as the body is: loaded in the loop, after the next row's loads had been
        issued, they made every pass wait for those (ptxas gives the loads a shared
        scoreboard), slower than no prefetching (docs/TUNING.md#reduction-tiles)."""
        w = low.w
        for name in self.carried.values():
            w.line(f"{name} = n{name}")
        w.indent -= 1
        inside, outside = "    " * (w.indent + 1), "    " * w.indent
        ahead = ["# the next row, loaded now: it arrives while this row is reduced and stored",
                 *self._row_body("(r + G) * J", "_n"), *self._row_chunks("_n", "r + G < K")]
        first = ["# this program's first row", *self._row_body("pid * J", ""),
                 "edge = tl.arange(0, 2 * ALIGN)[None, :]", *self._row_chunks("", None)]
        for (ptr, _, c), name in self.carried.items():
            ahead.append(f"n{name} = tl.load({ptr} + l{c}_n, mask=mask_{c}_n)")
            first.append(f"{name} = tl.load({ptr} + l{c}, mask=mask_{c})")
        w.lines[top:top] = [inside + x for x in ahead]
        w.lines[before:before] = [outside + x for x in first]

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

    def acc_dtype(self, e) -> DataType:
        out = e.outputs[-1].dtype  # var_mean's mean / the reduction's result
        return compute_dtype(out)

    def init(self, low, e):
        """Accumulator names (multi-pass) or None (persistent: the single chunk is the result)."""
        return None if self.persistent else self._accumulators(low, e, block=True)

    def init_accumulators(self, low, e):
        """Accumulators even for a persistent tile: a peeled row combines its edges and its
        body.  Each is one block, reduced once, so the accumulator holds the row's value
        only (a block-shaped one would cost an elementwise fold per element for nothing)."""
        return self._accumulators(low, e, block=False)

    def row_shape(self) -> str:
        """The shape of a row's statistic (an accumulator, a reduction's result)."""
        return "[]" if self.scalar_rows else self.shape("k")

    def row_reduce(self, x: str, combine: str) -> str:
        """``x`` reduced over the tile's reduced axis: one value per kept index."""
        if self.scalar_rows:
            return f"tl.reduce({x}, None, {combine})"
        return f"tl.reduce({x}, {self.raxis}, {combine}, keep_dims=True)"

    def _accumulators(self, low, e, block: bool):
        w = low.w
        dt = self.acc_dtype(e)
        tn = TRITON_NAME[dt]
        shp = self.row_shape()
        if OPS[e.op].reduction.welford:
            return self._init_welford(low, shp, tn)
        ident = self.identity(e.op, dt)
        name = f"acc{len(w.lines)}"
        w.line(f"{name} = tl.full({shp}, {ident}, {tn})")
        if not block or dt is DataType.Bool:
            return [name]
        # Loop chunks fold elementwise into a block-shaped accumulator, reduced once
        # after the loop: one cross-warp reduction per pass instead of one per block.
        w.line(f"{name}_vec = tl.full({self.shape(frozenset('kj'))}, {ident}, {tn})")
        return [name, f"{name}_vec"]

    def _init_welford(self, low, shp, tn):
        w = low.w
        base = f"acc{len(w.lines)}"
        names = [f"{base}_n", f"{base}_mean", f"{base}_m2"]
        for n in names:
            w.line(f"{n} = tl.full({shp}, 0.0, {tn})")
        return names

    @staticmethod
    def identity(op, dt: DataType) -> str:
        """Reduction ``op``'s start value in accumulator dtype ``dt`` (the op table's row)."""
        return OPS[op].reduction.identity(dt)

    def chunk(self, low, e, acc, first=False, c="j"):
        """Reduce chunk ``c`` of ``e``'s input and fold it into ``acc``."""
        w = low.w
        mask = self.mask(frozenset(("k", c)))
        x, _ = low.value(e.inputs[0], self.ref_index(low, c))
        in_dt = e.inputs[0].dtype
        dt = self.acc_dtype(e)
        tn = TRITON_NAME[dt]
        xs = x if in_dt is dt else f"({x}).to({tn})"
        if acc is not None and len(acc) == 2 and c in ("j", "b"):
            vec = acc[1]
            ident = self.identity(e.op, dt)
            w.line(f"{vec} = {self.fold(e.op, dt, vec, f'tl.where({mask}, {xs}, {ident})')}")
            return acc
        if not OPS[e.op].reduction.welford:
            # a bool accumulator reduces its block as int32 (Triton reduces no int1)
            src = xs if dt is not DataType.Bool else f"({xs}).to(tl.int32)"
            ident = self.identity(e.op, dt if dt is not DataType.Bool else DataType.Int32)
            comb = self.combine(w, e.op, dt if dt is not DataType.Bool else DataType.Int32)
            r = w.tmp(self.row_reduce(f"tl.where({mask}, {src}, {ident})", comb), "red")
            if dt is DataType.Bool:
                r = w.tmp(f"{r} != 0", "red")
            if acc is None:
                return [r]
            w.line(f"{acc[0]} = {self.fold(e.op, dt, acc[0], r)}")
            return acc
        # var / var_mean: chunk mean and M2, folded with Chan's parallel formula.
        if self.persistent and not self.peeled:
            cnt = w.tmp(f"tl.cast(J, {tn})", "red")  # J may be a constant (``constant_row``)
        else:
            cnt = w.tmp(self.row_reduce(f"({mask}).to({tn})", "tl.standard._sum_combine"), "red")
        mean = self._chunk_mean(w, mask, xs, cnt, c)
        d = w.tmp(f"tl.where({mask}, {xs} - {mean}, 0.0)", "red")
        m2 = w.tmp(self.row_reduce(f"{d} * {d}", "tl.standard._sum_combine"), "red")
        if acc is None:
            return [cnt, mean, m2]
        self.chan(w, acc, cnt, mean, m2)
        return acc

    def _chunk_mean(self, w, mask, xs, cnt, c) -> str:
        """The sum of x * 2**-k over n, 2**k >= the chunk's width: it cannot overflow
        where the mean is finite (16 x 1.7e38: eager's Welford mean is finite), and,
        both scalings being exact, it is sum(x) / n wherever that sum is finite and
        x * 2**-k normal.  (A branch to the scaled sum only where a sum overflowed
        cost more than the multiply: docs/CODEGEN.md.)"""
        scale = repr(2.0 ** -math.ceil(math.log2(2 * self.align if c == "e" else self.block_j)))
        s = w.tmp(self.row_reduce(f"tl.where({mask}, {xs} * {scale}, 0.0)", "tl.standard._sum_combine"), "red")
        return w.tmp(f"{s} / (tl.maximum({cnt}, 1.0) * {scale})", "red")

    @staticmethod
    def chan(w, acc, cnt, mean, m2):
        """Fold a part's (count, mean, M2) into the accumulators ``acc`` (Chan et al.)."""
        n, mu, M2 = acc
        delta = w.tmp(f"{mean} - {mu}", "red")
        tot = w.tmp(f"{n} + {cnt}", "red")
        w.line(f"{mu} = {mu} + {delta} * ({cnt} / tl.maximum({tot}, 1.0))")
        # delta * (delta * w): with nothing folded yet (n = 0) the term is 0 even for a
        # mean past 1.8e19, whose square alone would overflow (inf * 0 = nan).
        w.line(f"{M2} = {M2} + {m2} + {delta} * ({delta} * ({n} * {cnt} / tl.maximum({tot}, 1.0)))")
        w.line(f"{n} = {tot}")

    # -- online max + sum(exp(a - max)): one pass instead of two ---------------------
    # Elements of a row chunk that share one running max in an inner tile's online pass:
    # each thread's contiguous run, reduced in registers before the rescale, so a chunk
    # costs 1 + 1/ONLINE_GROUP exponentials per element instead of 2.  The exponentials
    # bound the statistics-only row, where 8 gained most
    # (docs/TUNING.md#reduction-tiles).
    ONLINE_GROUP = 8

    def _online_grouped(self) -> bool:
        return self.inner and self.block_j % self.ONLINE_GROUP == 0

    def init_online(self, low, m_expr):
        w = low.w
        tn = TRITON_NAME[self.acc_dtype(m_expr)]
        base = f"acc{len(w.lines)}"
        names = [f"{base}_m", f"{base}_s", f"{base}_mv", f"{base}_sv"]
        vec = f"[BLOCK_K, BLOCK_J // {self.ONLINE_GROUP}]" if self._online_grouped() else self.shape("kj")
        for n, ident, shp in zip(names, ("float('-inf')", "0.0") * 2, [self.row_shape()] * 2 + [vec] * 2):
            w.line(f"{n} = tl.full({shp}, {ident}, {tn})")
        return names

    def online_chunk(self, low, m_expr, a, acc, c):
        """Fold chunk ``c`` of ``a`` into the running max and the running sum of
        exp(a - max), rescaling the sum whenever the max grows (Milakov & Gimelshein)."""
        w = low.w
        m_row, s_row, m_vec, s_vec = acc
        mask = self.mask(frozenset(("k", c)))
        x, _ = low.value(a, self.ref_index(low, c))
        am = w.tmp(f"tl.where({mask}, {x}, float('-inf'))", "red")
        if c in ("j", "b") and self._online_grouped():
            g = self.ONLINE_GROUP
            am3 = w.tmp(f"tl.reshape({am}, [BLOCK_K, BLOCK_J // {g}, {g}])", "red")
            gm = w.tmp(f"tl.reduce({am3}, 2, {self.combine(w, 'max', DataType.Float)})", "red")
            new = w.tmp(f"tl.maximum({m_vec}, {gm}, propagate_nan=tl.PropagateNan.ALL)", "red")
            live = w.tmp(f"{new} != float('-inf')", "red")
            base = w.tmp(f"tl.where({live}, {new}, 0.0)", "red")
            add = w.tmp(f"tl.reduce(tl.exp({am3} - {base}[:, :, None]), 2, tl.standard._sum_combine)", "red")
            w.line(f"{s_vec} = {s_vec} * tl.where({live}, tl.exp({m_vec} - {base}), 0.0) + {add}")
            w.line(f"{m_vec} = {new}")
            return
        if c in ("j", "b"):
            new = w.tmp(f"tl.maximum({m_vec}, {am}, propagate_nan=tl.PropagateNan.ALL)", "red")
            scale = f"tl.where({new} == float('-inf'), 0.0, tl.exp({m_vec} - {new}))"
            add = f"tl.where({new} == float('-inf'), 0.0, tl.exp({am} - {new}))"
            w.line(f"{s_vec} = {s_vec} * {scale} + {add}")
            w.line(f"{m_vec} = {new}")
            return
        cm = w.tmp(self.row_reduce(am, self.combine(w, "max", DataType.Float)), "red")
        new = w.tmp(f"tl.maximum({m_row}, {cm}, propagate_nan=tl.PropagateNan.ALL)", "red")
        part = w.tmp(self.row_reduce(f"tl.where({new} == float('-inf'), 0.0, tl.exp({am} - {new}))",
                                     "tl.standard._sum_combine"), "red")
        w.line(f"{s_row} = {s_row} * tl.where({new} == float('-inf'), 0.0, tl.exp({m_row} - {new})) + {part}")
        w.line(f"{m_row} = {new}")

    def online_finish(self, low, m_expr, s_expr, acc):
        w = low.w
        m_row, s_row, m_vec, s_vec = acc
        mv = w.tmp(self.row_reduce(m_vec, self.combine(w, "max", DataType.Float)), "red")
        M = w.tmp(f"tl.maximum({m_row}, {mv}, propagate_nan=tl.PropagateNan.ALL)", "red")
        sv = w.tmp(self.row_reduce(f"{s_vec} * tl.exp({m_vec} - {M})", "tl.standard._sum_combine"), "red")
        S = w.tmp(f"{s_row} * tl.exp({m_row} - {M}) + {sv}", "red")
        out = []
        for e, val in ((m_expr, M), (s_expr, S)):
            o = e.outputs[0]
            dt = self.acc_dtype(e)
            out.append([w.tmp(f"({val}).to({TRITON_NAME[o.dtype]})", "red") if o.dtype is not dt else val])
        return out

    # -- split: partial results across programs -----------------------------------------
    def split_slots(self, exprs) -> int:
        return sum(3 if OPS[e.op].reduction.welford else 1 for e in exprs)

    def split_combine(self, low, exprs, accs):
        """Store this program's partials of ``exprs`` (accumulators ``accs``), count the
        program in, and open the block that only the strip's last program runs, in
        which ``self.results`` are set to the folded partials.  The caller writes the
        kept outputs inside the block, then calls ``split_close``."""
        w = low.w
        K = w.args["K"].name
        n_slots = self.split_slots(exprs)
        ws = w.arg("ws_ptr", "ptr", ("scratch", n_slots * self.split, self.ref, tuple(self.kept_dims()), 1,
                                     "float32", False))
        cnt = w.arg("cnt_ptr", "ptr", ("scratch", 1, self.ref, tuple(self.kept_dims()), self.block_k, "int32", True))
        parts = {}
        slot = 0
        for e in exprs:
            vals = self._partials(low, e, accs[e])
            parts[e] = []
            for v in vals:
                w.line(f"tl.store({ws} + ({slot} * SPLIT + ps) * {K} + k, {v}, mask=kmask)")
                parts[e].append(slot)
                slot += 1
        w.comment("every partial is written before the count; the last program of the strip folds them")
        w.line("tl.debug_barrier()")
        w.line(f"done = tl.atomic_add({cnt} + pid, 1, sem='acq_rel', scope='gpu')")
        w.line("if done == SPLIT - 1:")
        w.indent += 1
        low.push()
        block = self.split & (self.split - 1) == 0 and not self.inner
        for e in exprs:
            if block and not OPS[e.op].reduction.welford:
                self.results[e] = self._fold_block(low, e, ws, parts[e][0], K)
                continue
            loaded = []
            for sl in parts[e]:
                loaded.append(f"tl.load({ws} + ({sl} * SPLIT + s) * {K} + k, mask=kmask, other=0.0, "
                              f"cache_modifier='.cg')")
            self.results[e] = self._fold(low, e, loaded)
        self._cnt = cnt

    def split_close(self, low):
        w = low.w
        w.line(f"tl.atomic_xchg({self._cnt} + pid, 0, sem='relaxed', scope='gpu')  # ready for the next launch")
        low.pop()
        w.indent -= 1

    def _partials(self, low, e, acc) -> list:
        """This program's partial result(s) of ``e`` in the accumulator dtype:
        [value] or, for var/var_mean, [count, mean, M2]."""
        w = low.w
        dt = self.acc_dtype(e)
        if OPS[e.op].reduction.welford:
            return list(acc)
        return [self.combined(w, e, acc)]

    def _fold_block(self, low, e, ws, slot, K) -> list:
        """The partials of a sum, prod, max or min loaded as one [SPLIT, BLOCK_K] block
        and reduced over it: every load in flight at once.  Folded one program after
        another (``_fold``), each load waited for the previous one, a tail of SPLIT
        dependent L2 round trips at the end of the kernel.  The tree over the block has
        a fixed shape, so the result does not depend on which program finished last."""
        w = low.w
        dt = self.acc_dtype(e)
        ident = self.identity(e.op, dt)
        parts = w.tmp(f"tl.load({ws} + ({slot} * SPLIT + tl.arange(0, SPLIT)[:, None]) * {K} + k, "
                      f"mask=kmask, other={ident}, cache_modifier='.cg')", "p")
        folded = w.tmp(f"tl.reduce({parts}, 0, {self.combine(w, e.op, dt)}, keep_dims=True)", "p")
        return self.finish(low, e, [folded])

    def _fold(self, low, e, loaded) -> list:
        """The partials of ``e`` folded in program order, finished into its outputs."""
        w = low.w
        dt = self.acc_dtype(e)
        tn = TRITON_NAME[dt]
        shp = self.shape("k")
        base = f"fold{len(w.lines)}"  # accumulators: fresh names, never shared by CSE
        if OPS[e.op].reduction.welford:
            n, mu, M2 = (f"{base}_{x}" for x in ("n", "mean", "m2"))
            for name in (n, mu, M2):
                w.line(f"{name} = tl.full({shp}, 0.0, {tn})")
            w.line("for s in range(SPLIT):")
            w.indent += 1
            self.chan(w, [n, mu, M2], *(w.tmp(x, "p") for x in loaded))
            w.indent -= 1
            w.forget_scope(w.indent + 1)
            return self.finish(low, e, [n, mu, M2])
        acc = base
        w.line(f"{acc} = tl.full({shp}, {self.identity(e.op, dt)}, {tn})")
        w.line("for s in range(SPLIT):")
        w.indent += 1
        w.line(f"{acc} = {self.fold(e.op, dt, acc, w.tmp(loaded[0], 'p'))}")
        w.indent -= 1
        w.forget_scope(w.indent + 1)
        return self.finish(low, e, [acc])

    def combined(self, w, e, acc) -> str:
        """A multi-pass accumulator pair (row value, block-shaped vector) as one value."""
        dt = self.acc_dtype(e)
        r = w.tmp(self.row_reduce(acc[1], self.combine(w, e.op, dt)), "red")
        return w.tmp(self.fold(e.op, dt, acc[0], r), "red")

    @staticmethod
    def fold(op, dt: DataType, a: str, b: str) -> str:
        """``a`` and ``b`` combined by reduction ``op`` (the op table's row)."""
        return OPS[op].reduction.fold(dt, a, b)

    @staticmethod
    def combine(w, op, dt: DataType) -> str:
        """The tl.reduce combine function of reduction ``op`` (the op table's row), defined
        next to the kernel (``w.helper``) when it is not a Triton builtin."""
        fn = OPS[op].reduction.combine(dt)
        return fn.name if fn.source is None else w.helper(fn.name, fn.source)

    def finish(self, low, e, acc):
        """Turn accumulators into the op's outputs (in the outputs' dtypes)."""
        w = low.w
        outs = e.outputs
        red = OPS[e.op].reduction
        if len(acc) == 2 and not red.welford:
            acc = [self.combined(w, e, acc)]
        vals = red.finish(w, acc, e.attrs) if red.finish is not None else [acc[0]]
        res = []
        for o, val in zip(outs, vals):
            dt = self.acc_dtype(e)
            res.append(w.tmp(f"({val}).to({TRITON_NAME[o.dtype]})", "red") if o.dtype is not dt else val)
        return res
