"""``fd.ops.take_along_axis`` and ``fd.ops.embedding_fwd``: gathers with nvFuser's
arguments (``Operators`` derives from ``GatherOps``).

take_along_axis broadcasts as ``torch.take_along_dim`` does: outside ``dim``, an
operand whose extent is 1 in the definition is expanded to the other's extent
first, so the gather itself sees equal extents.  embedding_fwd takes each option
as a Python value, a constant scalar or a runtime scalar input; runtime ones are
inputs of the expr, named by ``attrs["runtime"]``, and read when the op runs.
"""
from __future__ import annotations

from ..errors import DefinitionError, DefinitionTypeError
from ..ir import shapes as S
from ..ir.dtypes import DataType
from ..ir.values import ScalarVal, TensorVal

# embedding_fwd's options in nvFuser's (and torch's) order, with the dtypes a runtime
# scalar for each may have
EMBEDDING_OPTIONS = ("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
_OPTION_KIND = {"padding_idx": "int", "max_norm": "float", "norm_type": "float",
                "scale_grad_by_freq": "bool", "sparse": "bool"}


class GatherOps:
    def take_along_axis(self, arg1, index, dim):
        """torch.take_along_dim(arg1, index, dim): the extents outside ``dim`` broadcast."""
        b = self._b
        t = b.check_val("take_along_axis", "arg1", arg1, tensor=True)
        i = b.check_val("take_along_axis", "index", index, tensor=True)
        if t.rank != i.rank:
            raise DefinitionError(f"take_along_axis: index must have the input's rank {t.rank}, got rank {i.rank}")
        d = S.norm_dim("take_along_axis", "dim", _number(dim), t.rank)
        t, i = self._broadcast_outside(t, i, d)
        return self._index_dim("take_along_axis", t, i, d)

    def _broadcast_outside(self, t, i, d):
        """Expand ``t`` and ``i`` to a common extent in every dim but ``d``, where one
        of them has extent 1 and the other does not."""
        t_shape, i_shape = [], []
        for k, (a, c) in enumerate(zip(t.shape, i.shape)):
            if k == d or a == c:
                t_shape.append(-1)
                i_shape.append(-1)
            elif a == 1:
                t_shape.append(c if c is not None else self.size(i, k))
                i_shape.append(-1)
            elif c == 1:
                t_shape.append(-1)
                i_shape.append(a if a is not None else self.size(t, k))
            elif a is not None and c is not None:
                raise DefinitionError(f"take_along_axis: extents of input {list(t.shape)} and index "
                                      f"{list(i.shape)} in dim {k} do not broadcast ({a} and {c})")
            else:
                t_shape.append(-1)
                i_shape.append(-1)
        if any(x != -1 for x in t_shape):
            t = self.expand(t, [x if x != -1 else self.size(t, k) for k, x in enumerate(t_shape)])
        if any(x != -1 for x in i_shape):
            i = self.expand(i, [x if x != -1 else self.size(i, k) for k, x in enumerate(i_shape)])
        return t, i

    def embedding_fwd(self, input, weight, padding_idx=None, max_norm=None, norm_type=None,
                      scale_grad_by_freq=None, sparse=None):
        """nvFuser's embedding_fwd: torch.nn.functional.embedding.  Each option is None
        (torch's default), a Python value, or a scalar (constant or runtime input)."""
        op = "embedding_fwd"
        b = self._b
        i = b.check_val(op, "input", input, tensor=True)
        if i.dtype not in (DataType.Int, DataType.Int32):
            raise DefinitionTypeError(f"{op}: input must be an Int or Int32 tensor, got {i.dtype}")
        w = b.check_val(op, "weight", weight, tensor=True)
        given = dict(zip(EMBEDDING_OPTIONS, (padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)))
        attrs, scalars, runtime = {}, [], []
        for name, x in given.items():
            if isinstance(x, ScalarVal) and not x.is_constant:
                b.check_val(op, name, x, tensor=False)
                attrs[name] = None
                scalars.append(x)
                runtime.append(name)
                continue
            if isinstance(x, TensorVal):
                raise DefinitionTypeError(f"{op}: {name} must be a Python value or a scalar, got tensor {x.name}")
            attrs[name] = _option(op, name, _number(x))
        if attrs["norm_type"] is None and "norm_type" not in runtime:
            attrs["norm_type"] = 2.0
        attrs["runtime"] = tuple(runtime)
        parts = [i.name, w.name] + [f"{n}={s.name}" if n in runtime else f"{n}={attrs[n]!r}" for n, s in
                                    zip(EMBEDDING_OPTIONS, [given[n] for n in EMBEDDING_OPTIONS])]
        return self._host_with_scalars(op, [i, w], scalars, attrs, ", ".join(parts), w.dtype)

    def _host_with_scalars(self, op, tensors, scalars, attrs, spelling, dtype):
        (out,) = self._record(op, list(tensors) + list(scalars), attrs, [dtype], spelling)
        return out


def _number(x):
    """A Python value from a constant scalar."""
    return x.value if isinstance(x, ScalarVal) and x.is_constant else x


def _option(op, name, x):
    kind = _OPTION_KIND[name]
    if x is None:
        return False if kind == "bool" else None
    if kind == "bool":
        if not isinstance(x, (bool, int)):
            raise DefinitionTypeError(f"{op}: {name} must be a bool, got {x!r}")
        return bool(x)
    if kind == "int":
        if not isinstance(x, int) or isinstance(x, bool):
            raise DefinitionTypeError(f"{op}: {name} must be an int, got {x!r}")
        return x
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        raise DefinitionTypeError(f"{op}: {name} must be a number, got {x!r}")
    return float(x)
