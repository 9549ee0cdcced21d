"""Shared machinery of the op builders: argument checks, constants, dtype probing.

Dtype inference asks PyTorch: the op's reference implementation is run on
one-element CPU tensors of the right dtypes (or Python numbers for scalars), which
gives exactly eager PyTorch's promotion, including its errors for unsupported
dtypes, which we turn into messages naming the op.  (``meta`` tensors would not do:
their kernels promote but skip the dtype checks, so e.g. ``abs`` of a bool tensor
or ``silu`` of an int tensor would pass there and fail in eager.)
"""
from __future__ import annotations

import math
import warnings

import torch

from ..errors import DefinitionError, DefinitionTypeError
from ..ir.dtypes import DataType, from_torch, python_scalar_dtype
from ..ir.values import FusionIR, ScalarVal, TensorVal, Val, VectorVal

_SAMPLE = {DataType.Bool: True, DataType.Int: 3, DataType.Int32: 3,
           DataType.Double: 1.5, DataType.Float: 1.5, DataType.Half: 1.5, DataType.BFloat16: 1.5,
           DataType.ComplexFloat: 1.5 + 0.5j, DataType.ComplexDouble: 1.5 + 0.5j,
           DataType.Float8_e4m3fn: 1.5, DataType.Float8_e5m2: 1.5}


# Scalar dtypes a shape argument takes: nvFuser casts an extent to its index type.
_SHAPE_DTYPES = (DataType.Int, DataType.Int32, DataType.Double, DataType.Float)
_INDEX_DTYPES = (DataType.Int, DataType.Int32)


def is_number(x) -> bool:
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, Val)


def scalar_promotion(x: DataType, y: DataType) -> DataType:
    """nvFuser's common dtype of two scalars (csrc/type_promotion.cpp): one dtype stays
    itself; two differ: Half and BFloat16 count as Float, then the usual lattice."""
    if x is y:
        return x
    wide = [DataType.Float if d in (DataType.Half, DataType.BFloat16) else d for d in (x, y)]
    return from_torch(torch.promote_types(wide[0].torch, wide[1].torch))


def int_entry(op: str, arg: str, x, xs, want: str, allow_neg1: bool) -> int:
    """One entry of a list of sizes or dims.  Each entry is an int64, as in nvFuser's
    bindings: anything else (a float, a bool, an int past int64) is the wrong kind of
    argument, a TypeError; a negative size is a wrong value."""
    if not isinstance(x, int) or isinstance(x, bool):
        raise DefinitionTypeError(f"{op}: {arg} entries must be {want}, got {type(x).__name__} {x!r} in {xs!r}")
    if not -2**63 <= x < 2**63:
        raise DefinitionTypeError(f"{op}: {arg} entries must be int64 values, got {x} in {xs!r} "
                                  f"(outside [-2**63, 2**63 - 1])")
    if x < 0 and not (allow_neg1 and x == -1):
        raise DefinitionError(f"{op}: {arg} entries must be {want}, got {x!r} in {xs!r}")
    return x


class Builder:
    """Records exprs into one FusionIR on behalf of FusionDefinition and its ops."""

    def __init__(self, ir: FusionIR, owner):
        self.ir = ir
        self.owner = owner  # the FusionDefinition, for error messages

    # -- argument checks ---------------------------------------------------------
    def check_val(self, op: str, arg: str, v, *, tensor=None, allow_number=True) -> Val:
        """Return ``v`` as a Val of this fusion, making constants of Python numbers."""
        self.ir.check_open(op)
        if isinstance(v, torch.Tensor):
            raise DefinitionTypeError(f"{op}: {arg} must be a value of this FusionDefinition "
                                      f"(from define_tensor or another op), got a torch.Tensor")
        if is_number(v) and allow_number and tensor is not True:
            return self.constant(v, what=f"{op}: {arg}")
        if not isinstance(v, Val):
            want = "a tensor" if tensor else ("a tensor or a scalar" if tensor is None else "a scalar")
            raise DefinitionTypeError(f"{op}: {arg} must be {want} of this FusionDefinition, "
                                      f"got {type(v).__name__} {v!r}")
        if v.fusion is not self.ir:
            raise DefinitionError(f"{op}: {arg} {v.name} belongs to another FusionDefinition")
        if isinstance(v, VectorVal):
            want = "a tensor" if tensor else ("a tensor or a scalar" if tensor is None else "a scalar")
            raise DefinitionTypeError(f"{op}: {arg} must be {want}, got Vector {v.name} "
                                      f"(fd.ops.at(vector, index) gives one entry)")
        if tensor is True and not isinstance(v, TensorVal):
            raise DefinitionTypeError(f"{op}: {arg} must be a tensor, got scalar {v.name}")
        if tensor is False and not isinstance(v, ScalarVal):
            raise DefinitionTypeError(f"{op}: {arg} must be a scalar, got tensor {v.name}")
        return v

    def check_int_list(self, op: str, arg: str, xs, *, allow_neg1=False) -> list[int]:
        if isinstance(xs, tuple):
            xs = list(xs)
        if not isinstance(xs, list):
            raise DefinitionTypeError(f"{op}: {arg} must be a list of ints, got {xs!r}")
        want = "ints >= 0" + (" or -1" if allow_neg1 else "")
        out = []
        for x in xs:
            if isinstance(x, ScalarVal) and x.is_constant:
                x = x.value
            out.append(int_entry(op, arg, x, xs, want, allow_neg1))
        return out

    def shape_arg(self, op: str, arg: str, xs, *, allow_neg1=False, vector_ok=True, float_ok=True):
        """A shape argument as attrs keep it (``ir.extents``): a Vector of this fusion,
        or a tuple of ints and scalars (sizes, arithmetic on them, runtime Int inputs);
        constant scalars become ints.  A floating scalar (``float_ok``) is taken as
        nvFuser takes it, cast to an index, provided its value is whole
        (``extents.resolve_shape``)."""
        xs = self._list_or_vector(op, arg, xs, vector_ok)
        if isinstance(xs, VectorVal):
            return xs
        whole = " (or floating ones of whole value)" if float_ok else ""
        want = "ints >= 0" + (" or -1" if allow_neg1 else "") + ", or Int scalars" + whole
        dtypes = _SHAPE_DTYPES if float_ok else _INDEX_DTYPES
        out = []
        for i, x in enumerate(xs):
            if isinstance(x, ScalarVal) and x.is_constant:
                whole_float = float_ok and isinstance(x.value, float) and x.value.is_integer()
                x = int(x.value) if whole_float else x.value
            if isinstance(x, Val):
                out.append(self._scalar_entry(op, arg, i, x, xs, dtypes, want))
                continue
            out.append(int_entry(op, arg, x, xs, want, allow_neg1))
        return tuple(out)

    def index_arg(self, op: str, arg: str, xs):
        """An index argument as attrs keep it (slice's indices and strides, pad's
        widths): a Vector of this fusion, or a tuple of ints and Int scalars (runtime
        inputs, sizes, arithmetic on them), which execute resolves; constant scalars
        become ints.  Any int is an index here: the op's shape rule checks ranges."""
        xs = self._list_or_vector(op, arg, xs, vector_ok=True)
        if isinstance(xs, VectorVal):
            return xs
        want = "ints or Int scalars"
        out = []
        for i, x in enumerate(xs):
            if isinstance(x, ScalarVal) and x.is_constant:
                x = x.value
            if isinstance(x, Val):
                out.append(self._scalar_entry(op, arg, i, x, xs, _INDEX_DTYPES, want))
                continue
            if not isinstance(x, int) or isinstance(x, bool):
                raise DefinitionTypeError(f"{op}: {arg} entries must be {want}, got {x!r} at index {i} of {xs!r}")
            out.append(x)
        return tuple(out)

    def _list_or_vector(self, op: str, arg: str, xs, vector_ok: bool):
        """``xs`` as a list, or the Vector of this fusion it is (``vector_ok``)."""
        if isinstance(xs, VectorVal) and vector_ok:
            if xs.fusion is not self.ir:
                raise DefinitionError(f"{op}: {arg} {xs.name} belongs to another FusionDefinition")
            return xs
        if isinstance(xs, tuple):
            xs = list(xs)
        if not isinstance(xs, list):
            also = ", or a Vector" if vector_ok else ""
            raise DefinitionTypeError(f"{op}: {arg} must be a list of ints and Int scalars{also}, got {xs!r}")
        return xs

    def _scalar_entry(self, op: str, arg: str, i: int, x, xs, dtypes, want: str):
        """Entry ``i`` of ``xs``, a value of the fusion: a scalar of one of ``dtypes``."""
        if x.fusion is not self.ir:
            raise DefinitionError(f"{op}: {arg} entry {i} ({x.name}) belongs to another FusionDefinition")
        if not isinstance(x, ScalarVal) or x.dtype not in dtypes:
            what = (f"scalar {x.name} of dtype {x.dtype}" if isinstance(x, ScalarVal) else
                    f"{'tensor' if isinstance(x, TensorVal) else 'Vector'} {x.name}")
            raise DefinitionTypeError(f"{op}: {arg} entries must be {want}, got {what} at index {i} of {xs!r}")
        return x

    def fill_value(self, op: str, arg: str, v, like: DataType) -> ScalarVal:
        """A value written into a tensor of dtype ``like`` (pad's value), of ``like``'s kind
        as nvFuser requires (a Double value pads a Half tensor, not a ComplexFloat one).  A
        Python number is converted to that kind here, as torch's ``F.pad`` casts its value
        (2.5 pads an integer tensor with 2), so the printed definition states the value
        the kernel writes."""
        if is_number(v):
            if isinstance(v, complex) and like.kind != "complex":
                raise DefinitionTypeError(f"{op}: {arg} {v!r} is complex, but the tensor is {like!r}: expected a "
                                          f"real value")
            cast = {"bool": bool, "int": int, "complex": complex}.get(like.kind, float)
            try:
                value = cast(v)
            except (OverflowError, ValueError):  # int(inf), int(nan), float(10**400)
                raise DefinitionError(f"{op}: {arg} {v!r} has no value in {like!r}") from None
            scalar_dtype = {"complex": DataType.ComplexDouble, "float": DataType.Double,
                            "int": DataType.Int, "bool": DataType.Bool}[like.kind]
            return self.constant(value, scalar_dtype, what=f"{op}: {arg}")
        v = self.check_val(op, arg, v, tensor=False)
        if v.dtype.kind != like.kind:
            raise DefinitionTypeError(f"{op}: {arg} {v.name} has dtype {v.dtype!r}, but the tensor is {like!r}: "
                                      f"expected a {like.kind} dtype, as the tensor's")
        return v

    def check_constant(self, op: str, arg: str, v: ScalarVal, *, nonzero=False):
        """A constant ``v`` must be finite (and not 0 with ``nonzero``); a runtime scalar
        is taken as given, as nvFuser takes it."""
        if not v.is_constant or isinstance(v.value, bool):
            return
        if isinstance(v.value, complex):
            raise DefinitionTypeError(f"{op}: {arg} must be a real number, got {v.value!r}")
        if not math.isfinite(v.value):
            raise DefinitionError(f"{op}: {arg} must be a finite number, got {v.value!r}")
        if nonzero and v.value == 0:
            raise DefinitionError(f"{op}: {arg} must not be 0, got {v.value!r}")

    # -- values --------------------------------------------------------------------
    def constant(self, value, dtype: DataType | None = None, what: str = "define_scalar") -> ScalarVal:
        if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
            raise DefinitionError(f"{what}: the integer constant {value} is outside int64's range "
                                  f"[-2**63, 2**63 - 1]")
        if dtype is None:
            dtype = python_scalar_dtype(value)
        if isinstance(value, complex) and not dtype.is_complex:
            # Dropping the imaginary part silently would change the result; nvFuser's
            # complex DataTypes are the only ones that hold such a value.
            raise DefinitionTypeError(f"{what}: the complex value {value!r} needs dtype DataType.ComplexFloat or "
                                      f"DataType.ComplexDouble, got {dtype!r}")
        if dtype.is_complex:
            value = complex(value)  # a real number given a complex dtype: torch then computes in complex
        return self.ir.new_scalar(dtype, value)

    # -- dtype probing ---------------------------------------------------------------
    def probe_dtype(self, op: str, fn, args, **kw) -> DataType:
        """Result dtype of ``fn`` on stand-ins for ``args``, as eager PyTorch gives it."""
        all_scalars = not any(isinstance(a, TensorVal) for a in args)
        stand_ins = []
        for a in args:
            if isinstance(a, TensorVal):
                stand_ins.append(torch.full((1,) * a.rank, _SAMPLE[a.dtype], dtype=a.dtype.torch))
            elif isinstance(a, ScalarVal):
                stand_ins.append(torch.tensor(_SAMPLE[a.dtype], dtype=a.dtype.torch) if all_scalars
                                 else _SAMPLE[a.dtype])
            else:
                stand_ins.append(a)
        try:
            with warnings.catch_warnings():  # e.g. var's "degrees of freedom <= 0" on one element
                warnings.simplefilter("ignore")
                r = fn(*stand_ins, **kw)
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as err:
            dtypes = ", ".join(str(a.dtype) for a in args if isinstance(a, Val))
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DefinitionError(f"{op}: not defined for inputs of dtype {dtypes} (PyTorch says: {msg})") from None
        if isinstance(r, tuple):
            r = r[0]
        dt = r.dtype if isinstance(r, torch.Tensor) else torch.tensor(r).dtype
        if all_scalars:
            if dt.is_floating_point or dt.is_complex:
                return DataType.ComplexDouble if dt.is_complex else DataType.Double
            if dt == torch.bool:
                return DataType.Bool
            return DataType.Int
        return from_torch(dt)
