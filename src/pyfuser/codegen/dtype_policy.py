"""The dtype policy of lowered expressions: which dtype an elementwise op computes in,
how operands and constants reach it, and how constants are spelled in Triton.

fp16 and bf16 compute in fp32 (``compute_dtype``); the common dtype of an op's
operands follows PyTorch's promotion (``promote``), with an integer operand of a
16-bit float op rounded through that dtype first (``via_16_bit``).  Constants keep
their exact value in the kernel's text (``literal``, ``bf16_constant``).
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch

from ..ir.dtypes import TRITON_NAME, DataType
from ..ir.op_emit import is_number
from ..ir.values import ScalarVal

_SAMPLE = {DataType.Bool: True, DataType.Int: 1, DataType.Int32: 1}


@lru_cache(maxsize=None)
def promote(args: tuple) -> DataType:
    """PyTorch's promotion of (dtype, rank) operands (rank None: a scalar): a scalar operand (a Python
    number to torch) does not raise a tensor's dtype within its category, so
    ``fp32_tensor > 0.1`` compares in fp32, as eager does."""
    from ..ir.dtypes import from_torch

    vals = [torch.empty((1,) * is_t if is_t else (), dtype=d.torch, device="meta") if is_t is not None
            else _SAMPLE.get(d, 1.5) for d, is_t in args]
    if len(vals) == 1:
        return args[0][0]
    r = torch.result_type(vals[0], vals[1])
    for v in vals[2:]:
        r = torch.result_type(torch.empty((1,), dtype=r, device="meta"), v)
    return from_torch(r)


def scalar_cast(code: str, dt: DataType) -> str:
    """Convert a scalar kernel argument: ``tl.cast`` takes a compiled kernel's scalar
    tensor and the interpreter's plain Python number alike (``.to`` only the former)."""
    return f"tl.cast({code}, {TRITON_NAME[dt]})"


def convert(code: str, name: str) -> str:
    """``code`` converted to the Triton dtype ``name``: ``.to`` for a tensor; a constant
    (``op_emit.is_number``: an int or float literal, ``float('inf')``) has no ``.to``
    (AttributeError in the interpreter, a compile error otherwise), and ``tl.cast``
    makes it a tensor of that dtype.  Every conversion of an expression goes through here."""
    if is_number(code):
        return f"tl.cast({code}, {name})"
    return f"({code}).to({name})"


def compute_dtype(dt: DataType) -> DataType:
    return DataType.Float if dt in (DataType.Half, DataType.BFloat16) or dt.is_fp8 else dt


def via_16_bit(code: str, inp, common: DataType) -> str:
    """An integer operand of an op whose common dtype is fp16/bf16 (computed in fp32):
    rounded to the common dtype first, as nvFuser's promoteValues and torch cast it
    (70000 is inf in fp16), through fp32 as torch converts.  Float scalars are not
    rounded (nvFuser's optionalCast leaves them), nor bools (0 and 1 are exact)."""
    if isinstance(inp, ScalarVal) and inp.is_constant:
        v = inp.value
        x = torch.tensor(v) if -2**63 <= v < 2**63 else torch.tensor(float(v))
        return literal(x.to(common.torch).item(), DataType.Float)
    if isinstance(inp, ScalarVal):
        return scalar_cast(scalar_cast(scalar_cast(code, DataType.Float), common), DataType.Float)
    return f"({code}).to(tl.float32).to({TRITON_NAME[common]}).to(tl.float32)"


def literal(value, dt: DataType) -> str:
    """A constant in dtype ``dt`` (fp64 constants keep their full precision)."""
    if dt is DataType.Bool:
        return "True" if value else "False"
    if dt.is_int:  # wrapped into the dtype's range, as torch converts a number for an int tensor
        info = torch.iinfo(dt.torch)
        return repr((int(value) - info.min) % (info.max - info.min + 1) + info.min)
    v = float(value)
    if v == 0 and math.copysign(1.0, v) < 0:
        # Triton turns every constant equal to 0 into +0.0 (its null value), compiled and
        # interpreted alike: spell -0.0 as its bits
        bits, width = ("-9223372036854775808", 64) if dt is DataType.Double else ("-2147483648", 32)
        return f"tl.full([], {bits}, tl.int{width}).to(tl.float{width}, bitcast=True)"
    text = repr(v) if v == v and abs(v) != float("inf") else f"float('{v}')"
    if dt is DataType.Double:
        return f"tl.full([], {text}, tl.float64)"
    return text


def bf16_constant(text: str) -> str:
    """A bf16 constant, rounded from fp32: Triton's interpreter has no bf16 constants."""
    return f"tl.full([], {text}, tl.float32).to(tl.bfloat16)"


def constant_of(v):
    """A constant scalar's value as a float (a divisor's, for ``emit_uniform_rhs``); None
    for anything else."""
    return float(v.value) if isinstance(v, ScalarVal) and v.is_constant else None
