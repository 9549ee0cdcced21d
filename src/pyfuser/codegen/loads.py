"""Reads of tensors: the load of a fusion input at any coordinates, and gathers
(``take_along_axis``, ``index_select``), whose coordinates come from an index tensor.

A mixin of ``lower.Lowering``.  A contiguous input is read at its linear offset, a
strided one through its stride arguments; the tile supplies masks, load hints and
loop-carried rows.
"""
from __future__ import annotations

from ..errors import Unsupported
from ..ir.dtypes import DataType
from ..ir.values import TensorVal
from .dtype_policy import bf16_constant
from .index import Coord, Index, ravel


class Loads:
    def load(self, v: TensorVal, idx: Index):
        w = self.w
        ptr = w.arg(f"{v.name}_ptr", "ptr", ("tensor", v))
        info = self.inputs_info[v]
        if info["contiguous"]:
            off = idx.linear if idx.linear is not None else ravel(idx.coords, self.extents(v))
        else:
            terms, axes = [], frozenset()
            for d, c in enumerate(idx.coords):
                if c.code == "0":
                    continue
                st = w.arg(f"{v.name}_st{d}", "stride", ("stride", v, d))
                terms.append(f"{c.code} * {st}")
                axes |= c.axes
            off = Coord(" + ".join(terms) if terms else "0", axes)
        if not off.axes:  # one element for every lane (a 0-d or all-broadcast tensor): always in bounds
            return w.tmp(f"tl.load({ptr} + {off.code})", "x"), frozenset()
        # A predicate guards one coordinate (a pad's, a cat's, a gather's index) and the
        # value read where it fails is replaced (tl.where) above the load.  If the
        # offset does not vary along the predicate's axes, it does not use that
        # coordinate and the address is valid without it: a per-row value under a pad
        # of the columns is read once per row, not once per element.
        preds = tuple(p for p, a in zip(idx.pred, idx.pred_each, strict=True) if a <= off.axes)
        mask = self.tile.mask(off.axes, preds)
        # A row loaded one iteration ahead (``tiles.rows``, prefetch) is a loop-carried value.
        carried = getattr(self.tile, "carried_load", None)
        held = carried(w, ptr, off.code, mask, v.dtype) if carried is not None else None
        if held is not None:
            return held, off.axes
        m = f", mask={mask}" if mask else ""
        return w.tmp(f"tl.load({ptr} + {off.code}{m}{self.tile.load_hint(off.axes)})", "x"), off.axes

    def lower_gather(self, e, v, idx):
        """``x`` read where the index says along ``dim``: the output's coordinates with
        that dim's replaced by the index value (index_select: the index at the
        output's coordinate in ``dim``).  Out-of-range indices read nothing: NaN."""
        x, index = e.inputs
        if not x.dtype.is_float:
            raise Unsupported(f"{e.op} of a {x.dtype} tensor runs in torch", "dtype_in_torch")
        rank = len(self.shapes[x])
        d = e.attrs["dim"] % max(rank, 1)
        if e.op == "index_select":
            at = Index((idx.coords[d],) if len(self.shapes[index]) == 1 else (), None, idx.pred, idx.pred_each)
        else:
            at = Index(idx.coords, idx.linear if self.shapes[index] == self.shapes[v] else None, idx.pred,
                       idx.pred_each)
        ival, iax = self.value(index, self.normalize(index, at))
        w = self.w
        valid = w.tmp(f"({ival} >= 0) & ({ival} < {self.ext(x, d)})", "m")
        itype = "tl.int64" if self.tile.int64 else "tl.int32"
        safe = w.tmp(f"tl.where({valid}, {ival}, 0).to({itype})", "i")
        coords = list(idx.coords)
        coords[d] = Coord(safe, iax)
        inner = self.with_coords(idx.guarded(valid, iax), coords)
        val, vax = self.value(x, inner)
        nan = bf16_constant("float('nan')") if x.dtype is DataType.BFloat16 else "float('nan')"
        return w.tmp(f"tl.where({valid}, {val}, {nan})"), vax | iax
