"""Rows of a reduction tile: a peeled row's head, aligned body and tail, and the
loop over rows that loads the next one ahead.

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

from ...ir.dtypes import DataType


# PTX that widens a carried fp16 row to fp32 (``ReductionTile.carried_load``).  A bf16
# row is not widened again: ``cvt.f32.bf16`` runs on the conversion unit (slower than
# reusing the fp32 row), and moving its bits to the upper half of an fp32 instead
# spills (docs/TUNING.md#reduction-tiles).
_WIDEN = {DataType.Half: "cvt.f32.f16 $0, $1;"}


class RowLoads:
    """The row-walking part of ``reduction.ReductionTile`` (its attributes: ``prefetch``,
    ``rewiden``, ``pass_no``, ``passes``, ``carried``)."""

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
