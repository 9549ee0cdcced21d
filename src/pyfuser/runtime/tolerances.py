"""nvFuser's validation tolerances (``getTolerance``), the second rule of ``fd.validate``.

nvFuser measured, for sums of ``n`` unit-scale ``randn`` values, the largest absolute
error of fp32 and of fp16 accumulation against fp64, and validates an output at the
absolute error of the next larger size measured (twice the largest past the table),
with a relative tolerance of 1% of that; ``n`` is the product of the reduced extents
on the output's longest chain of reductions (matmul and linear contract their K).
bf16 takes ten times the fp16 figures.  An output with no reduction takes the table's
first entries.  These are absolute errors of unit-scale data: for outputs computed
through a narrow (fp16/bf16) intermediate whose rounding the kernel and torch may
flip by one unit, which a later matmul and a cancellation then magnify, they are the
margin nvFuser's own validation gives; an output far past them still fails.
"""
from __future__ import annotations

import math

import torch

from ..ir.ops import OPS, REDUCTION_KINDS

# (terms, largest absolute error measured): nvFuser's ValidationConstants
SUM_FLOAT = ((4, 1.68222e-06), (8, 2.23704e-06), (16, 2.95788e-06), (32, 4.4778e-06), (64, 6.75395e-06),
             (128, 8.57934e-06), (256, 1.30594e-05), (512, 2.19122e-05), (1024, 3.3451e-05), (2048, 5.78476e-05),
             (4096, 0.000108292), (8192, 0.00012207), (16384, 0.000136882), (32768, 0.000248561),
             (65536, 0.000407594), (131072, 0.000500901), (262144, 0.000923019), (524288, 0.00156909),
             (1048576, 0.00223107), (2097152, 0.00343043))
SUM_HALF = ((4, 0.00390625), (8, 0.0078125), (16, 0.0078125), (32, 0.0155334), (64, 0.0156269), (128, 0.0312042),
            (256, 0.0312548), (512, 0.0619979), (1024, 0.0625103), (2048, 0.124686), (4096, 0.12501),
            (8192, 0.24945), (16384, 0.250049), (32768, 0.498946), (65536, 0.500071), (131072, 0.985087),
            (262144, 1.00006), (524288, 1.99234), (1048576, 2.00032), (2097152, 3.99073))
_TABLE = {torch.float64: (SUM_FLOAT, 1.0), torch.float32: (SUM_FLOAT, 1.0), torch.complex64: (SUM_FLOAT, 1.0),
          torch.complex128: (SUM_FLOAT, 1.0), torch.float16: (SUM_HALF, 1.0), torch.bfloat16: (SUM_HALF, 10.0)}


def nvfuser_tolerance(dtype: torch.dtype, reduction_size: int) -> tuple[float, float] | None:
    """(atol, rtol) as nvFuser's validator sets them; None for dtypes it compares exactly."""
    if dtype not in _TABLE:
        return None
    table, scale = _TABLE[dtype]
    if reduction_size <= 1:
        return table[0][1], table[1][1]  # nvFuser's no-reduction entries, unscaled
    entry = next((i for i, (n, _) in enumerate(table) if n >= reduction_size), len(table))
    atol = table[entry + 1][1] if entry + 1 < len(table) else table[-1][1] * 2.0
    return atol * scale, atol * 0.01 * scale


def reduction_sizes(ir, shapes) -> dict:
    """Val -> the product of the extents reduced on its longest chain of reductions, as
    nvFuser's ReductionSizeMapper counts them (the largest of the inputs' times its own)."""
    sizes: dict = {}
    for e in ir.live_exprs():
        inherited = max((sizes.get(v, 1) for v in e.inputs if v in shapes), default=1)
        own = 1
        if OPS[e.op].kind in REDUCTION_KINDS:
            shape = shapes[e.inputs[0]]
            own = math.prod(shape[d % len(shape)] for d in e.attrs["dims"]) if shape else 1
        elif e.op in ("matmul", "linear") and shapes.get(e.inputs[0]):
            own = shapes[e.inputs[0]][-1]
        for o in e.outputs:
            sizes[o] = inherited * own
    return sizes
