"""docs/OPS.md, generated from the op table: ``python -m pyfuser.frontend.opdoc docs/OPS.md``
(``make ops-doc``); ``--check`` exits 1 when the file is not what the table gives
(tests/frontend/test_opdoc.py checks it too).

Every ``fd.ops`` builder gets a line: its arguments, the input dtypes it takes (asked of
the builder itself, so the dtype probe's answer, which is PyTorch's), its spelling in
nvFuser's two Python APIs, and the ATen ops the torch.compile backend maps to it.  Then
the nvFuser ops pyfuser does not define, each with the reason.
"""
from __future__ import annotations

import inspect
import pathlib
import sys

from ..errors import PyfuserError
from ..ir.dtypes import DataType
from ..ir.ops import OPS, OpKind
from .definition import FusionDefinition
from .ops import Operators

# ``fd.ops`` names of nvFuser's Python bindings (operator methods left out): the legacy
# frontend (``nvfuser``: the 2022 API, in its last form) and ``nvfuser_direct``.
LEGACY = set("""abs acos acosh add add_alpha addcmul asin asinh at atan atan2 atanh batch_norm bitwise_and
bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift bitwise_xor broadcast broadcast_in_dim cast cat ceil
clamp cos cosh div embedding_fwd eq erf erfc erfcinv erfinv exp exp2 expand expm1 floor fmod frac full gather gcd ge
gt imag index_put_accumulate index_select iota isfinite isinf isnan isneginf isposinf isreal le lerp lgamma linear log
log10 log1p log2 logical_and logical_not logical_or logical_right_shift lt matmul max maximum min minimum mod mul ne
neg nextafter normal pad permute pow prod rand_like randn_like real reciprocal relu remainder reshape round rsqrt
sdpfa_bwd sdpfa_fwd segment_set select set shape sigmoid sign signbit silu sin sinh size slice sqrt squeeze
stride_order sub sub_alpha sum take_along_axis tan tanh tensor_sizes threshold triu truediv trunc uniform var var_mean
welford where""".split())
DIRECT = set("""abs acos acosh add addcmul argsort asin asinh atan atan2 atanh bitwise_and bitwise_left_shift
bitwise_not bitwise_or bitwise_right_shift bitwise_xor broadcast broadcast_in_dim cast cat ceil clamp complex cos cosh
cummax cummin cumprod cumsum cutlass_nvfp4_grouped_mm div embedding_fwd eq erf erfc erfcinv erfinv exp exp2 expand
expm1 floor fmod frac full gather gcd ge grouped_mm gt imag index_select iota isfinite isinf isnan isneginf isposinf
isreal le lerp lgamma linear log log10 log1p log2 logical_and logical_not logical_or logical_right_shift lt matmul max
maximum min minimum mod mul ne neg nextafter normal nv_block_quantize nv_grouped_block_quantize pad permute pow
preprocess_grouped_matmul_input_sf prod rand_like randn_like real reciprocal relu remainder reshape round rsqrt
scaled_mm scatter sdpfa_bwd sdpfa_fwd segment_set select set shape sigmoid sign signbit silu sin sinh size slice sqrt
squeeze stride_order sub sum take_along_axis tan tanh threshold topk triu truediv trunc uniform var var_mean welford
where""".split())
# The 2022 spellings pyfuser keeps beside the current ones (the legacy names above are
# the 2022 API's later form; these are its first).
SPELLINGS_2022 = {"view": "view(arg, original_shape=, new_shape=)", "broadcast_in_dim": "output_shape=",
                  "sum": "axes=", "max": "axes=", "min": "axes=", "prod": "axes=", "var": "axes=",
                  "var_mean": "axes=", "reshape": "reshape(arg, original_shape, new_shape)",
                  "squeeze": "squeeze(arg, original_shape, dims)"}

# Why each nvFuser op pyfuser does not define is left out.
NOT_SUPPORTED = {
    "add_alpha": "legacy spelling of add(a, mul(b, alpha)); write that",
    "sub_alpha": "legacy spelling of sub(a, mul(b, alpha)); write that",
    "tensor_sizes": "legacy spelling of `shape`",
    "argsort": "a sort: no tile kind sorts; it would be a host step",
    "topk": "a sort: no tile kind sorts; it would be a host step",
    "batch_norm": "a legacy composite that also updates running statistics in place; compose it from `var_mean`",
    "welford": "nvFuser's raw Welford triple (mean, M2, count); `var_mean` gives the results",
    "cumsum": "a scan: no tile kind scans",
    "cumprod": "a scan: no tile kind scans",
    "cummax": "a scan: no tile kind scans",
    "cummin": "a scan: no tile kind scans",
    "scatter": "writes at computed indices: no tile kind scatters",
    "index_put_accumulate": "writes at computed indices, accumulating (atomics): no tile kind scatters",
    "sdpfa_fwd": "attention, run by nvFuser through ATen's flash attention; not a host step here",
    "sdpfa_bwd": "attention, run by nvFuser through ATen's flash attention; not a host step here",
    "grouped_mm": "grouped matmul, a CUTLASS/ATen kernel in nvFuser; not a host step here",
    "scaled_mm": "block-scaled FP8/FP4 matmul: FP4 is not among pyfuser's DataTypes, FP8 tensors are cast only",
    "cutlass_nvfp4_grouped_mm": "NVFP4 matmul: FP4 is not among pyfuser's DataTypes",
    "nv_block_quantize": "NVFP4 quantization: FP4 is not among pyfuser's DataTypes",
    "nv_grouped_block_quantize": "NVFP4 quantization: FP4 is not among pyfuser's DataTypes",
    "preprocess_grouped_matmul_input_sf": "scale-factor layout for NVFP4 matmuls (see scaled_mm)",
    "segment_set": "a segmentation hint; pyfuser's segmenter places its own cuts",
    "stride_order": "an output layout op; pyfuser allocates outputs contiguous",
}

_DTYPES = (DataType.Float, DataType.Double, DataType.Half, DataType.BFloat16, DataType.Int, DataType.Int32,
           DataType.Bool)
_SECTIONS = (
    ("Elementwise: unary", (OpKind.UNARY,)), ("Elementwise: binary", (OpKind.BINARY,)),
    ("Elementwise: ternary", (OpKind.TERNARY,)), ("Casts", (OpKind.CAST,)),
    ("Reductions", (OpKind.REDUCTION, OpKind.VAR_MEAN)),
    ("Layout (re-indexing)", (OpKind.BROADCAST_IN_DIM, OpKind.RESHAPE, OpKind.PERMUTE, OpKind.SQUEEZE, OpKind.SLICE,
                              OpKind.PAD, OpKind.CAT)),
    ("Creation and random numbers", (OpKind.FULL, OpKind.IOTA, OpKind.RANDOM)),
    ("Host steps and gathers", (OpKind.HOST, OpKind.GATHER)), ("Sizes (evaluated before any kernel)", (OpKind.EXTENT,)),
)

# How the dtype column calls a builder on a tensor ``t`` of one dtype.
_CALLS = {
    OpKind.UNARY: lambda fd, op, t: op(t), OpKind.BINARY: lambda fd, op, t: op(t, t),
    OpKind.REDUCTION: lambda fd, op, t: op(t, dims=[0]), OpKind.VAR_MEAN: lambda fd, op, t: op(t, dims=[0]),
}
_TERNARY = {"where": lambda fd, t: fd.ops.where(fd.ops.gt(t, t), t, t), "lerp": lambda fd, t: fd.ops.lerp(t, t, t),
            "addcmul": lambda fd, t: fd.ops.addcmul(t, t, t), "clamp": lambda fd, t: fd.ops.clamp(t, 0, 1),
            "threshold": lambda fd, t: fd.ops.threshold(t, 1, 0)}


def _result(build, dt):
    """The output dtype of ``build(fd, t)`` for an input of dtype ``dt``, or None."""
    try:
        with FusionDefinition() as fd:
            out = build(fd, fd.define_tensor(shape=[-1], contiguity=[True], dtype=dt))
            out = out[0] if isinstance(out, tuple) else out
            fd.add_output(out)
    except PyfuserError:
        return None
    return out.dtype


def _dtypes(row) -> str:
    if row.kind in _CALLS:
        build = lambda fd, t: _CALLS[row.kind](fd, getattr(fd.ops, row.name), t)  # noqa: E731
    elif row.name in _TERNARY:
        build = _TERNARY[row.name]
    else:
        return "any" if row.kind is not OpKind.EXTENT else "(sizes)"
    same, other = [], {}
    for dt in _DTYPES:
        out = _result(build, dt)
        if out is dt:
            same.append(dt.name)
        elif out is not None:
            other.setdefault(out, []).append(dt.name)
    parts = [", ".join(same)] if same else []
    parts += [f"{', '.join(ins)} -> {out.name}" for out, ins in other.items()]
    return "; ".join(parts) if parts else "none"


def _arguments(name, row=None) -> str:
    if row is not None and row.kind is OpKind.UNARY:
        return "arg"
    if row is not None and row.kind is OpKind.BINARY:
        return "lhs, rhs"
    if row is not None and row.name == "define_vector":
        return "values, dtype=DataType.Int (fd.define_vector)"
    params = list(inspect.signature(getattr(Operators, name)).parameters.values())[1:]
    return ", ".join(str(p) for p in params)


def _spelling(name, api) -> str:
    if api is LEGACY:
        extra = SPELLINGS_2022.get(name)
        if name in LEGACY:
            return f"`{name}`" + (f" ({extra})" if extra and "(" not in extra else "")
        return f"`{extra}`" if extra and "(" in extra else "-"
    return f"`{name}`" if name in api else "-"


def _line(name, row=None) -> str:
    aten = ", ".join(row.aten) if row is not None and row.aten else "-"
    dtypes = _dtypes(row) if row is not None else "as the rows it composes"
    return (f"| `{name}` | `{_arguments(name, row)}` | {dtypes} | {_spelling(name, LEGACY)} | "
            f"{_spelling(name, DIRECT)} | {aten} |")


_HEAD = """# Ops

Generated from the op table (`src/pyfuser/ir/ops.py`) by `make ops-doc`
(`python -m pyfuser.frontend.opdoc docs/OPS.md`); `tests/frontend/test_opdoc.py` checks that
it is current.  Do not edit by hand.

Every op is `fd.ops.<name>`.  *dtypes*: the input dtypes the builder takes, with the result
dtype where it differs (asked of the builder: PyTorch's promotion; binary ops with both
operands of that dtype).  *2022 API*: the name in nvFuser's legacy frontend (`nvfuser`),
with the 2022 keyword spellings pyfuser also takes; *nvfuser_direct*: the name in
`nvfuser_direct`.  *ATen*: the row's ATen ops, from which the torch.compile backend derives
its rules (ops with rules of their own, such as `add` or `where`: `src/pyfuser/dynamo/rules/compute_rules.py`).
Semantics: docs/SEMANTICS.md.
"""
_TABLE = "| op | arguments | dtypes | 2022 API | nvfuser_direct | ATen |\n|---|---|---|---|---|---|"


def render() -> str:
    out = [_HEAD]
    for title, kinds in _SECTIONS:
        out += [f"## {title}", "", _TABLE]
        out += [_line(r.name, r) for r in OPS.values() if r.kind in kinds]
        out.append("")
    composed = sorted(n for n in dir(Operators) if not n.startswith("_") and n not in OPS
                      and callable(getattr(Operators, n)))
    out += ["## Composed from table rows", "",
            "Builders that record other rows (`repr(fd)` prints those): see each one's docstring.", "", _TABLE]
    out += [_line(n) for n in composed]
    defined = set(OPS) | set(composed)
    missing = sorted((LEGACY | DIRECT) - defined)
    out += ["", "## nvFuser ops not supported", "", "| op | in | why not |", "|---|---|---|"]
    for n in missing:
        where = " and ".join(api for api, names in (("2022 API", LEGACY), ("nvfuser_direct", DIRECT)) if n in names)
        out.append(f"| `{n}` | {where} | {NOT_SUPPORTED.get(n, 'not yet defined')} |")
    return "\n".join(out) + "\n"


def main(argv) -> int:
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    text = render()
    if not paths:
        sys.stdout.write(text)
        return 0
    path = pathlib.Path(paths[0])
    if check:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{path} is not what the op table gives: run make ops-doc", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
