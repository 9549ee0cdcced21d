"""Split reductions: partial results across the programs of a column strip.

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
"""
from __future__ import annotations

from ...ir.dtypes import TRITON_NAME
from ...ir.ops import OPS


class SplitFold:
    """The split part of ``reduction.ReductionTile`` (its ``split``, ``results`` and
    accumulators: ``accumulate.Accumulators``)."""

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
