"""Index maps: the extents of a value, divisions of an index by extents, and the
layout ops (broadcast, reshape, permute, squeeze, slice, pad, cat) as maps from an
output's coordinates to their input's.

A layout op copies nothing: ``Lowering.value`` of its output is the value of its
input at mapped coordinates (``index.Index``), so a value read through a permute or
a slice is computed, or loaded, where it is needed.  Pad and cat guard each input's
coordinates with predicates and pick the value with ``tl.where``.  A mixin of
``lower.Lowering``: every method walks on through ``self.value``.
"""
from __future__ import annotations

import math

from ..ir.dtypes import TRITON_NAME, DataType
from ..ir.infer import pad_widths, slice_bounds
from ..ir.shapes import reshape_groups
from ..ir.values import TensorVal
from .dtype_policy import bf16_constant, convert, literal, scalar_cast
from .index import ZERO, Coord, Index, plain_div, ravel, unravel


class IndexMaps:
    # -- extents, indices -------------------------------------------------------------
    def ext(self, v: TensorVal, d: int) -> str:
        if self.shapes[v][d] == 1:
            return "1"
        return self.w.arg(f"{v.name}_s{d}", "size", ("size", v, d))

    def extents(self, v) -> list[str]:
        return [self.ext(v, d) for d in range(len(self.shapes[v]))]

    def divider(self, axes):
        """``index.unravel``'s division for an int32 index varying along ``axes``
        (``divide``); None for int64 indices (Triton's ``//`` and ``%``)."""
        if self.tile.int64:
            return None
        on_vector_axis = not self.tile.divides_fast(axes)
        return lambda code, divisors: self.divide(code, divisors, on_vector_axis)

    def divide(self, code: str, divisors: list[str], on_vector_axis: bool = False) -> str:
        """``code // prod(divisors)`` for a non-negative int32 index and extents that are
        size arguments: ``(code * M) >> P`` with ``index.div_magic``'s constants, which
        the launcher computes once per shape.  Along the tile's contiguous axis
        (``tile.divides_fast``) only when the divisor is not a multiple of 16 at the
        shapes planned for: there Triton's alignment analysis reads ``x // s`` and
        ``x % s`` for sizes it knows to be multiples of 16 and keeps loads vectorized
        (a bias + GELU's bias index ``x % 4096`` was slower with the multiply:
        docs/TUNING.md#index-math); other divisors allow no vector access anyway.  Any divisor gives
        correct results either way: the choice is only speed."""
        sources = [self.w.args[d].source if d in self.w.args else None for d in divisors]
        if any(s is None or s[0] != "size" for s in sources):
            return plain_div(code, divisors)
        if on_vector_axis and math.prod(self.shapes[s[1]][s[2]] for s in sources) % 16 == 0:
            return plain_div(code, divisors)
        dims = tuple((s[1], s[2]) for s in sources)
        key = "_".join(divisors)
        m = self.w.arg(f"{key}_dm", "divmagic", ("divmagic", dims, 0))
        p = self.w.arg(f"{key}_dp", "divmagic", ("divmagic", dims, 1))
        return f"(({convert(code, 'tl.uint64')} * {m}) >> {p}).to(tl.int32)"

    def normalize(self, v, idx: Index) -> Index:
        shape = self.shapes[v]
        coords = tuple(ZERO if shape[d] == 1 else c for d, c in enumerate(idx.coords))
        return Index(coords, idx.linear, idx.pred, idx.pred_each, idx.dropped)

    def linear_of(self, v, idx: Index) -> Coord:
        if idx.linear is not None:
            return idx.linear
        lin = ravel(idx.coords, self.extents(v))
        return Coord(self.w.tmp(lin.code, "i"), lin.axes) if not lin.code.isidentifier() and lin.code != "0" else lin

    def with_coords(self, idx: Index, coords, linear=None, dropped=()) -> Index:
        return Index(tuple(coords), linear, idx.pred, idx.pred_each, idx.dropped + tuple(dropped))

    def bcast_index(self, idx: Index, out_shape, in_shape) -> Index:
        off = len(out_shape) - len(in_shape)
        coords, dropped = [], []
        for d in range(len(out_shape)):
            c = idx.coords[d]
            if d < off:
                if out_shape[d] != 1:
                    dropped.append(c)
                continue
            if in_shape[d - off] == 1:
                coords.append(ZERO)
                if out_shape[d] != 1:
                    dropped.append(c)
            else:
                coords.append(c)
        same = tuple(out_shape) == tuple(in_shape)
        return self.with_coords(idx, coords, idx.linear if same else None, dropped)

    # -- layout ops -------------------------------------------------------------------------
    def lower_broadcast_in_dim(self, e, v, idx):
        x = e.inputs[0]
        in_shape, out_shape = self.shapes[x], self.shapes[v]
        bdims = e.attrs["broadcast_dims"]
        coords = []
        for i, d in enumerate(bdims):
            coords.append(ZERO if in_shape[i] == 1 else idx.coords[d])
        kept = {d for i, d in enumerate(bdims) if in_shape[i] != 1}
        dropped = [idx.coords[d] for d in range(len(out_shape)) if d not in kept and out_shape[d] != 1]
        same = self._numel(in_shape) == self._numel(out_shape)
        return self.value(x, self.with_coords(idx, coords, idx.linear if same else None, dropped))

    @staticmethod
    def _numel(shape):
        n = 1
        for s in shape:
            n *= s
        return n

    def lower_reshape(self, e, v, idx):
        """Each group of dims the reshape merges or splits (``shapes.reshape_groups``) is
        re-ravelled on its own: [B, S, 768] -> [B, S, 12, 64] costs ``c // 64`` and
        ``c % 64`` of the last coordinate only, which varies along one tile axis, where
        going through the linear index divides it, at every element, by B*S*768 and
        S*768 too (attention's Q/K/V bias gradients: docs/TUNING.md#reshape-groups)."""
        x = e.inputs[0]
        groups = reshape_groups(self.shapes[x], self.shapes[v])
        if groups is None:  # an empty tensor: the linear index, as it comes
            lin = self.linear_of(v, idx)
            return self.value(x, self.with_coords(idx, unravel(lin, self.extents(x), self.divider), lin))
        x_ext, v_ext = self.extents(x), self.extents(v)
        coords = [ZERO] * len(x_ext)
        for ins, outs in groups:
            if len(outs) == 1:
                lin = idx.coords[outs[0]]
            else:
                lin = ravel([idx.coords[o] for o in outs], [v_ext[o] for o in outs])
                if not lin.code.isidentifier():
                    lin = Coord(self.w.tmp(lin.code, "i"), lin.axes)
            parts = [lin] if len(ins) == 1 else unravel(lin, [x_ext[i] for i in ins], self.divider)
            for d, c in zip(ins, parts):
                coords[d] = c
        return self.value(x, self.with_coords(idx, coords, idx.linear))

    def lower_permute(self, e, v, idx):
        x = e.inputs[0]
        dims = e.attrs["dims"]
        coords = [None] * len(dims)
        for k, d in enumerate(dims):
            coords[d] = idx.coords[k]
        ident = list(dims) == sorted(dims)
        return self.value(x, self.with_coords(idx, coords, idx.linear if ident else None))

    def lower_squeeze(self, e, v, idx):
        x = e.inputs[0]
        it = iter(idx.coords)
        coords = [ZERO if d in e.attrs["dims"] else next(it) for d in range(len(self.shapes[x]))]
        return self.value(x, self.with_coords(idx, coords, idx.linear))

    def lower_slice(self, e, v, idx):
        x = e.inputs[0]
        _, norm = slice_bounds(e, self.shapes[x], self.values.__getitem__)
        coords = []
        for c, (a, _, s) in zip(idx.coords, norm):
            code = c.code if s == 1 else f"{c.code} * {s}"
            code = code if a == 0 else f"({code} + {a})"
            coords.append(Coord(code, c.axes) if c.code != "0" or a else ZERO)
        return self.in_window(self.shapes[v] != self.shapes[x], x, self.with_coords(idx, coords))

    def in_window(self, windowed: bool, x, idx):
        """``self.value(x, idx)``, counted as a partial walk of ``x`` when ``windowed``."""
        self.window_depth += windowed
        try:
            return self.value(x, idx)
        finally:
            self.window_depth -= windowed

    def lower_pad(self, e, v, idx):
        x, pad_value = e.inputs
        widths = pad_widths(e, self.values.__getitem__)
        rank = len(self.shapes[x])
        coords, preds, axes = list(idx.coords), [], frozenset()
        guarded = idx
        for k in range(len(widths) // 2):
            d = rank - 1 - k
            lo = widths[2 * k]
            c = idx.coords[d]
            shifted = Coord(c.code if lo == 0 else f"({c.code} - {lo})", c.axes)
            coords[d] = shifted
            preds.append(f"({shifted.code} >= 0) & ({shifted.code} < {self.ext(x, d)})")
            guarded = guarded.guarded(preds[-1], c.axes)
            axes |= c.axes
        inner = self.with_coords(guarded, coords)
        val, vax = self.in_window(any(wd < 0 for wd in widths), x, inner)
        pv, _ = self.scalar(pad_value)
        cond = self.w.tmp(" & ".join(f"({p})" for p in preds), "m") if preds else "True"
        pv = literal(pad_value.value, v.dtype) if pad_value.is_constant else scalar_cast(pv, v.dtype)
        if pad_value.is_constant and v.dtype is DataType.BFloat16:
            pv = bf16_constant(pv)
        return self.w.tmp(f"tl.where({cond}, {val}, {pv})"), vax | axes

    def lower_cat(self, e, v, idx):
        dim = e.attrs["dim"]
        c = idx.coords[dim]
        start = "0"
        parts = []
        for x in e.inputs:
            ext = self.ext(x, dim)
            lo, hi = start, (ext if start == "0" else f"({start} + {ext})")
            pred = self.w.tmp(f"({c.code} >= {lo}) & ({c.code} < {hi})", "m")
            coords = list(idx.coords)
            coords[dim] = Coord(c.code if start == "0" else f"({c.code} - {start})", c.axes)
            inner = self.with_coords(idx.guarded(pred, c.axes), coords)
            val, ax = self.value(x, inner)
            if x.dtype is not v.dtype:
                val = convert(val, TRITON_NAME[v.dtype])
            parts.append((pred, val, ax))
            start = hi
        code = parts[-1][1]
        axes = c.axes
        for pred, val, ax in reversed(parts[:-1]):
            code = f"tl.where({pred}, {val}, {code})"
            axes |= ax
        return self.w.tmp(code), axes | parts[-1][2]
