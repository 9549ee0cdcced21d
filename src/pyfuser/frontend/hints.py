"""``fd.ops.stride_order`` and ``fd.ops.segment_set``: nvFuser's layout and
segmentation hints (``Operators`` derives from ``HintOps``).

Both record an identity (a cast to the same dtype) that prints under the hint's
name, so ``repr(fd)`` rebuilds the same definition.

- ``stride_order(arg, stride_order)``: the values are ``arg``'s; an output that is
  this op's result is returned with that memory layout (``stride_order[i]`` is the
  rank of dim i's stride, 0 the innermost, as ``define_tensor`` spells it).  Kernels
  write outputs in row-major order; ``execute`` lays such an output out afterwards.
- ``segment_set(arg)``: nvFuser's request to end a kernel at ``arg``.  pyfuser's
  segmenter decides its own cuts (docs/SEGMENTATION.md) and treats the hint as the
  identity: results are the same either way.
"""
from __future__ import annotations

from ..errors import DefinitionError


class HintOps:
    def _identity(self, op, arg, spelling_tail=""):
        t = self._b.check_val(op, "arg", arg, tensor=True)
        (out,) = self._record("cast", [t], {"dtype": t.dtype}, [t.dtype], f"{t.name}{spelling_tail}")
        out.definition.printed_op = op
        return out

    def stride_order(self, arg, stride_order):
        t = self._b.check_val("stride_order", "arg", arg, tensor=True)
        so = list(stride_order) if isinstance(stride_order, (list, tuple)) else stride_order
        if (not isinstance(so, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in so)
                or sorted(so) != list(range(t.rank))):
            raise DefinitionError(f"stride_order: stride_order must be a permutation of 0..{t.rank - 1} "
                                  f"(one entry per dim of {t.name}), got {stride_order!r}")
        out = self._identity("stride_order", t, f", stride_order={so!r}")
        self._b.ir.output_layouts[out] = tuple(so)
        return out

    def segment_set(self, arg):
        return self._identity("segment_set", arg)
