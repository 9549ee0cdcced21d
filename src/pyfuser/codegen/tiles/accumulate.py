"""Accumulators of a reduction tile: one per row statistic, folded chunk by chunk
(var_mean by Chan's formula, max and sum(exp(a - max)) online in one pass) and
finished into the reduction's outputs.  What is op-specific (identities, folds,
combine functions, finishes) is the op table's (``ir.reductions``).
"""
from __future__ import annotations

import math

from ...ir.dtypes import TRITON_NAME, DataType
from ...ir.ops import OPS
from ..lower import compute_dtype


class Accumulators:
    """The accumulating part of ``reduction.ReductionTile``: it reads the tile's
    geometry (``persistent``, ``peeled``, ``inner``, ``block_j``, ``align``, ``mask``,
    ``shape``, ``ref_index``, ``row_shape``, ``row_reduce``)."""

    def acc_dtype(self, e) -> DataType:
        out = e.outputs[0].dtype  # the reduction's result; var_mean's var, welford's avg (not its Int count)
        return compute_dtype(out)

    def init(self, low, e):
        """Accumulator names (multi-pass) or None (persistent: the single chunk is the result)."""
        return None if self.persistent else self._accumulators(low, e, block=True)

    def init_accumulators(self, low, e):
        """Accumulators even for a persistent tile: a peeled row combines its edges and its
        body.  Each is one block, reduced once, so the accumulator holds the row's value
        only (a block-shaped one would cost an elementwise fold per element for nothing)."""
        return self._accumulators(low, e, block=False)

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

    def flush_sums(self, low, exprs, accs, c):
        """Every ``flush`` chunks of a row's body, fold each float sum's block-shaped
        accumulator into the row's sum and restart it: a lane's chain of additions, whose
        rounding errors grow with its length, stays some ``flush`` long however long the
        row (``reduction.flush_chunks``)."""
        sums = [(e, accs[e]) for e in exprs if accs[e] is not None and len(accs[e]) == 2 and e.op == "sum"
                and self.acc_dtype(e) in (DataType.Float, DataType.Double)]
        if not self.flush or c not in ("j", "b") or not sums:
            return
        w = low.w
        start = "j0" if self.chunk_lo == "0" else f"(j0 - {self.chunk_lo})"
        w.line(f"if ({start} // BLOCK_J) % {self.flush} == {self.flush - 1}:")
        w.indent += 1
        for e, (row, vec) in sums:
            dt = self.acc_dtype(e)
            r = w.tmp(self.row_reduce(vec, self.combine(w, e.op, dt)), "red")
            w.line(f"{row} = {self.fold(e.op, dt, row, r)}")
            w.line(f"{vec} = tl.full({self.shape(frozenset('kj'))}, {self.identity(e.op, dt)}, {TRITON_NAME[dt]})")
        w.indent -= 1

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
