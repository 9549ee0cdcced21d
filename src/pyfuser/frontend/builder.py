"""Shared machinery of the op builders: argument checks, constants, dtype probing.

Dtype inference asks PyTorch: the op's reference implementation is run on
one-element CPU tensors of the right dtypes (or Python numbers for scalars), which
gives exactly eager PyTorch's promotion, including its errors for unsupported
dtypes, which we turn into messages naming the op.  (``meta`` tensors would not do:
their kernels promote but skip the dtype checks, so e.g. ``abs`` of a bool tensor
or ``silu`` of an int tensor would pass there and fail in eager.)
"""
from __future__ import annotations

import warnings

import torch

from ..errors import DefinitionError, DefinitionTypeError
from ..ir.dtypes import DataType, from_torch, python_scalar_dtype
from ..ir.values import FusionIR, ScalarVal, TensorVal, Val, VectorVal

_SAMPLE = {DataType.Bool: True, DataType.Int: 3, DataType.Int32: 3,
           DataType.Double: 1.5, DataType.Float: 1.5, DataType.Half: 1.5, DataType.BFloat16: 1.5,
           DataType.ComplexFloat: 1.5 + 0.5j, DataType.ComplexDouble: 1.5 + 0.5j}


def is_number(x) -> bool:
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, Val)


def scalar_promotion(x: DataType, y: DataType) -> DataType:
    """nvFuser's common dtype of two scalars (csrc/type_promotion.cpp): one dtype stays
    itself; two differ: Half and BFloat16 count as Float, then the usual lattice."""
    if x is y:
        return x
    wide = [DataType.Float if d in (DataType.Half, DataType.BFloat16) else d for d in (x, y)]
    return from_torch(torch.promote_types(wide[0].torch, wide[1].torch))


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
        out = []
        for x in xs:
            if isinstance(x, ScalarVal) and x.is_constant:
                x = x.value
            if not isinstance(x, int) or isinstance(x, bool) or (x < 0 and not (allow_neg1 and x == -1)):
                want = "ints >= 0" + (" or -1" if allow_neg1 else "")
                raise DefinitionError(f"{op}: {arg} entries must be {want}, got {x!r} in {xs!r}")
            out.append(x)
        return out

    def shape_arg(self, op: str, arg: str, xs, *, allow_neg1=False, vector_ok=True):
        """A shape argument as attrs keep it (``ir.extents``): a Vector of this fusion,
        or a tuple of ints and Int scalars (sizes, arithmetic on them, runtime Int
        inputs); constant scalars become ints."""
        if isinstance(xs, VectorVal) and vector_ok:
            if xs.fusion is not self.ir:
                raise DefinitionError(f"{op}: {arg} {xs.name} belongs to another FusionDefinition")
            return xs
        if isinstance(xs, tuple):
            xs = list(xs)
        if not isinstance(xs, list):
            also = ", or a Vector" if vector_ok else ""
            raise DefinitionTypeError(f"{op}: {arg} must be a list of ints and Int scalars{also}, got {xs!r}")
        want = "ints >= 0" + (" or -1" if allow_neg1 else "") + ", or Int scalars"
        out = []
        for i, x in enumerate(xs):
            if isinstance(x, ScalarVal) and x.is_constant:
                x = x.value
            if isinstance(x, Val):
                if x.fusion is not self.ir:
                    raise DefinitionError(f"{op}: {arg} entry {i} ({x.name}) belongs to another FusionDefinition")
                if not isinstance(x, ScalarVal) or x.dtype not in (DataType.Int, DataType.Int32):
                    what = (f"scalar {x.name} of dtype {x.dtype}" if isinstance(x, ScalarVal) else
                            f"{'tensor' if isinstance(x, TensorVal) else 'Vector'} {x.name}")
                    raise DefinitionTypeError(f"{op}: {arg} entries must be {want}, got {what} at index {i} "
                                              f"of {xs!r}")
                out.append(x)
                continue
            if not isinstance(x, int) or isinstance(x, bool) or (x < 0 and not (allow_neg1 and x == -1)):
                raise DefinitionError(f"{op}: {arg} entries must be {want}, got {x!r} in {xs!r}")
            out.append(x)
        return tuple(out)

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
