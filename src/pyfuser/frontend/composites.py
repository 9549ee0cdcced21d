"""``fd.ops`` builders that compose table rows: nvFuser's ``select`` and ``triu`` (built
from slices, gathers, iotas and comparisons, as nvFuser composes ``triu``), and
``threshold``, a table row whose bounds must be scalars.  ``repr(fd)`` prints the rows
they record, which rebuild the same fusion.
"""
from __future__ import annotations

from ..errors import DefinitionError, DefinitionTypeError
from ..ir import shapes as S
from ..ir.dtypes import DataType
from ..ir.values import ScalarVal

# A slice end past any extent: Python slicing clamps it (``select``'s index -1)
_END = 2**63 - 1


def _constant(x):
    """A Python value from a constant scalar; a runtime scalar stays a value."""
    return x.value if isinstance(x, ScalarVal) and x.is_constant else x


class CompositeOps:
    """The composed builders of ``fd.ops`` (``Operators`` derives from this)."""

    def threshold(self, arg, threshold, value):
        """torch.threshold: ``value`` where ``arg <= threshold``, else ``arg``; both are scalars."""
        b = self._b
        x = b.check_val("threshold", "arg", arg, tensor=True)
        limit = b.check_val("threshold", "threshold", threshold, tensor=False)
        v = b.check_val("threshold", "value", value, tensor=False)
        return self._elementwise("threshold", [x, limit, v], ["arg", "threshold", "value"])

    def select(self, arg, index, dim):
        """torch.select: the entries at ``index`` along ``dim``, which goes away; ``index``
        counts from the end when negative.  Composed from table rows: a constant index is
        a slice and a squeeze (re-indexing); a runtime Int scalar is an ``index_select``
        of a one-entry index, then a squeeze (out of range, as index_select is)."""
        b = self._b
        t = b.check_val("select", "arg", arg, tensor=True)
        if t.rank == 0:
            raise DefinitionError("select: arg must have at least one dim, got a 0-dim tensor")
        d = S.norm_dim("select", "dim", _constant(dim), t.rank)
        i = _constant(index)
        if isinstance(i, int) and not isinstance(i, bool):
            extent = t.shape[d]
            if extent is not None and not -extent <= i < extent:
                raise DefinitionError(f"select: index {i} is out of range for dim {d} of extent {extent}")
            starts, ends = [0] * t.rank, [_END] * t.rank
            starts[d], ends[d] = i, (i + 1 if i != -1 else _END)
            return self.squeeze(self.slice(t, starts, ends), [d])
        i = b.check_val("select", "index", index, tensor=False)
        if i.dtype not in (DataType.Int, DataType.Int32):
            raise DefinitionTypeError(f"select: index must be an int or an Int scalar, got {i.dtype}")
        i = self.where(self.lt(i, 0), self.add(i, self.size(t, d)), i)
        return self.squeeze(self.index_select(t, self.full([1], i, DataType.Int), d), [d])

    def triu(self, arg, diagonal=0):
        """torch.triu: zeros below the ``diagonal``-th diagonal of the last two dims.
        Composed from table rows, as nvFuser composes it: ``where(row <= col - diagonal,
        arg, 0)`` over two iotas, broadcast to the last two dims."""
        b = self._b
        t = b.check_val("triu", "arg", arg, tensor=True)
        if t.rank < 2:
            raise DefinitionError(f"triu: input tensor for triu must have 2 or more dims, but got {t.rank} dims")
        k = _constant(diagonal)
        if not isinstance(k, int) or isinstance(k, bool):
            raise DefinitionTypeError(f"triu: diagonal must be an int, got {k!r}")
        r = t.rank
        rows, cols = self.size(t, r - 2), self.size(t, r - 1)
        row = self.broadcast_in_dim(self.iota(rows, 0, 1, DataType.Int), [1] * (r - 2) + [rows, 1], [r - 2])
        col = self.broadcast_in_dim(self.iota(cols, -k, 1, DataType.Int), [1] * (r - 1) + [cols], [r - 1])
        zero = False if t.dtype is DataType.Bool else (0.0 if t.dtype.is_float else 0)
        return self.where(self.le(row, col), t, zero)
