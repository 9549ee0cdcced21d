"""``fd.ops.size``, ``fd.ops.shape`` and ``fd.ops.at``: tensor sizes as values.

They record extent exprs (``ir.extents``): Int scalars and Vectors that shape
arguments, scalar arithmetic and kernel math take, evaluated when ``execute`` binds
the inputs.  ``fd.define_vector`` (in ``definition``) records through ``_extent`` too.
"""
from __future__ import annotations

from ..errors import DefinitionError, DefinitionTypeError
from ..ir import shapes as S
from ..ir.dtypes import DataType
from ..ir.extents import infer_known
from ..ir.values import ScalarVal, TensorVal, VectorVal


class SizeOps:
    """The size ops of ``fd.ops`` (``Operators`` derives from this)."""

    def _extent(self, op, inputs, attrs, spelling, length=None):
        """Record an extent op: an Int scalar, or a Vector of ``length`` entries."""
        ir = self._b.ir
        out = ir.new_scalar(DataType.Int) if length is None else ir.new_vector(length)
        e = ir.add_expr(op, inputs, [out], attrs, extent=True)
        e.spelling = spelling
        k = infer_known(e)
        out.known = k if length is None or k is not None else (None,) * length
        return out

    def size(self, arg, dim):
        """nvFuser's size: the extent of ``arg``'s dim ``dim`` (negative counts from the
        end), an Int scalar known at execute time."""
        t = self._b.check_val("size", "arg", arg, tensor=True)
        d = dim.value if isinstance(dim, ScalarVal) and dim.is_constant else dim
        if not isinstance(d, int) or isinstance(d, bool):
            raise DefinitionTypeError(f"size: dim must be an int, got {describe(d)}")
        if t.rank == 0:
            raise DefinitionError(f"size: dim {d} is out of range for {t.name}, a tensor of rank 0 (it has no dims)")
        d = S.norm_dim("size", "dim", d, t.rank)
        return self._extent("size", [t], {"dim": d}, f"{t.name}, dim={d}")

    def shape(self, arg):
        """nvFuser's shape: a Vector of ``arg``'s extents."""
        t = self._b.check_val("shape", "arg", arg, tensor=True)
        return self._extent("shape", [t], {}, t.name, length=t.rank)

    def at(self, arg, index):
        """nvFuser's at: entry ``index`` (negative counts from the end) of a Vector."""
        if not isinstance(arg, VectorVal):
            raise DefinitionTypeError(f"at: arg must be a Vector (from fd.ops.shape or fd.define_vector), "
                                      f"got {describe(arg)}")
        if arg.fusion is not self._b.ir:
            raise DefinitionError(f"at: arg {arg.name} belongs to another FusionDefinition")
        i = index.value if isinstance(index, ScalarVal) and index.is_constant else index
        if not isinstance(i, int) or isinstance(i, bool):
            raise DefinitionTypeError(f"at: index must be an int, got {describe(i)}")
        n = arg.length
        if not -n <= i < n:
            want = f"expected {-n} <= index < {n}" if n else "it is empty"
            raise DefinitionError(f"at: index {i} is out of range for {arg.name}, a Vector of size {n} ({want})")
        return self._extent("at", [arg], {"index": i % n}, f"{arg.name}, index={i % n}")


def describe(x) -> str:
    """An argument as error messages name it."""
    if isinstance(x, TensorVal):
        return f"tensor {x.name}"
    if isinstance(x, ScalarVal):
        return f"{'constant' if x.is_constant else 'runtime'} scalar {x.name}"
    if isinstance(x, VectorVal):
        return f"Vector {x.name}"
    return f"{type(x).__name__} {x!r}"
