"""The op table's rows for nvFuser's ops that run in torch on the slow path.

Scans (``cumsum``, ``cumprod``, ``cummax``, ``cummin``), sorts (``argsort``, ``topk``),
``scatter``, the complex constructors (``complex``, ``real``, ``imag``), attention
(``sdpfa_fwd``, ``sdpfa_bwd``) and ``grouped_mm`` have no code generator: each is a host
op (``ir.host_ops``, ``ir.attention``), so the planner cuts the segment around it,
upstream kernels store its inputs and downstream kernels load its results
(docs/SEGMENTATION.md, "Slow-path host ops").  So does every op on a complex value,
Triton having no complex type (``touches_complex``).  Unlike matmul, which torch runs
as fast as anything pyfuser could generate, these are slower than one fused kernel
would be: the planner warns once per op (``slow_path_cause``).

``rows`` makes the op table's rows of ``ROWS`` (``(name, ref, shape)`` triples), and
``welford``'s, a reduction row (``ir.reductions.WELFORD_ROW``) that runs in a generated
kernel; ``ir.ops`` passes its classes in, so this module needs no import of it.
"""
from __future__ import annotations

from . import attention as A
from . import host_ops as H
from . import reductions as R
from .dtypes import DataType
from .values import TensorVal

ROWS = (
    ("cumsum", H.cumsum_ref, H.scan_shape),
    ("cumprod", H.cumprod_ref, H.scan_shape),
    ("cummax", H.cummax_ref, H.scan_shape),
    ("cummin", H.cummin_ref, H.scan_shape),
    ("argsort", H.argsort_ref, H.argsort_shape),
    ("topk", H.topk_ref, H.topk_shape),
    ("scatter", H.scatter_ref, H.scatter_shape),
    ("complex", H.complex_ref, H.broadcast_shape),
    ("real", lambda x: x.real.clone() if x.is_complex() else x.clone(), H.same_shape),
    ("imag", lambda x: x.imag.clone(), H.same_shape),
    ("sdpfa_fwd", A.sdpfa_fwd_ref, A.sdpfa_fwd_shape),
    ("sdpfa_bwd", A.sdpfa_bwd_ref, A.sdpfa_bwd_shape),
    ("grouped_mm", A.grouped_mm_ref, A.grouped_mm_shape),
)



def rows(OpDef, OpKind) -> list:
    welford = OpDef("welford", OpKind.VAR_MEAN, R.welford_ref, reduction=R.WELFORD_ROW)
    return [welford] + [OpDef(name, OpKind.HOST, ref, shape=shape) for name, ref, shape in ROWS]


SLOW_OPS = frozenset(name for name, _, _ in ROWS)

# nvFuser ops with no torch equivalent over pyfuser's dtypes: fd.ops raises at definition
# time, naming the op and why.
UNSUPPORTED = {
    "scaled_mm": "it multiplies float8/float4 matrices with block scales, and pyfuser has no float8 matmul "
                 "(fp8 tensors are cast only) and no float4 DataType",
    "nv_block_quantize": "it produces float4_e2m1fn values and float8 block scales, and pyfuser has no float8 "
                         "block quantization and no float4 DataType",
}


_COMPLEX = (DataType.ComplexFloat, DataType.ComplexDouble)


def touches_complex(e) -> bool:
    """Whether expr ``e`` makes a tensor and reads or makes a complex value.  Arithmetic
    on scalars alone is not one: it runs before any kernel, in torch on 0-d tensors
    (``ir.extents.scalar_result``), and a kernel reads its real result as it reads any
    scalar."""
    return (any(isinstance(o, TensorVal) for o in e.outputs)
            and any(getattr(v, "dtype", None) in _COMPLEX for v in (*e.inputs, *e.outputs)))


def slow_path_cause(e) -> str | None:
    """The op name a host step on the slow path is warned about (None: not one)."""
    if e.op in SLOW_OPS:
        return e.op
    if touches_complex(e):
        return f"{e.op} on complex values"
    return None
