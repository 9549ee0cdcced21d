"""DataType: nvFuser's dtype names, and their mapping to torch and Triton.

nvFuser scripts spell dtypes as ``DataType.Half`` etc.; pyfuser keeps the names so
those scripts run unchanged.  ``Null`` means "no dtype given" (reductions use it to
say "keep the input's dtype").  Promotion rules are not written here: they are
PyTorch's, obtained by asking torch itself (see ``ir.ops``).
"""
from __future__ import annotations

import enum

import torch

from ..errors import DefinitionTypeError


class DataType(enum.Enum):
    Double = "Double"
    Float = "Float"
    Half = "Half"
    BFloat16 = "BFloat16"
    Int = "Int"
    Int32 = "Int32"
    Bool = "Bool"
    ComplexFloat = "ComplexFloat"
    ComplexDouble = "ComplexDouble"
    # fp8 (Hopper's): tensors of them are read and written, and cast to and from;
    # kernels compute on them in fp32 (``codegen.dtype_policy.compute_dtype``)
    Float8_e4m3fn = "Float8_e4m3fn"
    Float8_e5m2 = "Float8_e5m2"
    # torch's uint64 has few ops: tensors of it are inputs and outputs, the random
    # state that attention's backward takes (``ir.attention``)
    UInt64 = "UInt64"
    Null = "Null"

    def __repr__(self) -> str:
        return f"DataType.{self.value}"

    __str__ = __repr__

    def __call__(self) -> "DataType":
        """nvFuser's ``TensorView.dtype()`` is a method; pyfuser's ``t.dtype`` is this
        DataType, and calling it returns it, so scripts that call it run unchanged."""
        return self

    @property
    def torch(self) -> torch.dtype:
        if self is DataType.Null:
            raise ValueError("DataType.Null has no torch dtype")
        return _TO_TORCH[self]

    @property
    def is_float(self) -> bool:
        return self in (DataType.Double, DataType.Float, DataType.Half, DataType.BFloat16) or self.is_fp8

    @property
    def is_fp8(self) -> bool:
        return self in (DataType.Float8_e4m3fn, DataType.Float8_e5m2)

    @property
    def is_int(self) -> bool:
        return self in (DataType.Int, DataType.Int32, DataType.UInt64)

    @property
    def is_complex(self) -> bool:
        """Complex dtypes have no Triton type: exprs on them run in torch (``ir.ops.runs_on_host``)."""
        return self in (DataType.ComplexFloat, DataType.ComplexDouble)

    @property
    def kind(self) -> str:
        """"complex", "float", "int" or "bool": dtypes of one kind are what nvFuser calls
        similar (``hasSimilarDtype``), e.g. a Double pad value for a Half tensor."""
        if self.is_complex:
            return "complex"
        if self.is_float:
            return "float"
        if self.is_int:
            return "int"
        return "bool" if self is DataType.Bool else "none"

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.torch).element_size()


_TO_TORCH = {
    DataType.Double: torch.float64,
    DataType.Float: torch.float32,
    DataType.Half: torch.float16,
    DataType.BFloat16: torch.bfloat16,
    DataType.Int: torch.int64,
    DataType.Int32: torch.int32,
    DataType.Bool: torch.bool,
    DataType.ComplexFloat: torch.complex64,
    DataType.ComplexDouble: torch.complex128,
    DataType.Float8_e4m3fn: torch.float8_e4m3fn,
    DataType.Float8_e5m2: torch.float8_e5m2,
    DataType.UInt64: torch.uint64,
}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}

# Triton spelling of each dtype, used by the code generator.
TRITON_NAME = {
    DataType.Double: "tl.float64",
    DataType.Float: "tl.float32",
    DataType.Half: "tl.float16",
    DataType.BFloat16: "tl.bfloat16",
    DataType.Int: "tl.int64",
    DataType.Int32: "tl.int32",
    DataType.Bool: "tl.int1",
    DataType.Float8_e4m3fn: "tl.float8e4nv",
    DataType.Float8_e5m2: "tl.float8e5",
    DataType.UInt64: "tl.uint64",
}


def from_torch(dtype: torch.dtype) -> DataType:
    try:
        return _FROM_TORCH[dtype]
    except KeyError:
        supported = ", ".join(str(d) for d in _FROM_TORCH)
        raise TypeError(f"torch dtype {dtype} is not supported by pyfuser (supported: {supported})") from None


def to_datatype(x) -> DataType:
    """Accept a DataType, a torch.dtype, or the DataType's name."""
    if isinstance(x, DataType):
        return x
    if isinstance(x, torch.dtype):
        return from_torch(x)
    if isinstance(x, str) and x in DataType.__members__:
        return DataType[x]
    raise DefinitionTypeError(f"expected a DataType (e.g. DataType.Float), got {x!r}")


def python_scalar_dtype(value) -> DataType:
    """The DataType nvFuser gives a Python number: bool -> Bool, int -> Int, float -> Double,
    complex -> ComplexDouble."""
    if isinstance(value, bool):
        return DataType.Bool
    if isinstance(value, int):
        return DataType.Int
    if isinstance(value, float):
        return DataType.Double
    if isinstance(value, complex):
        return DataType.ComplexDouble
    raise TypeError(f"expected a Python bool, int, float or complex, got {type(value).__name__} {value!r}")
