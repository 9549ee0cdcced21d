"""Output shapes of an expr, by its op kind: one dispatch for definition and execute time."""
from __future__ import annotations

from . import shapes as S
from .extents import known, resolve_indices, resolve_shape
from .ops import OPS, OpKind
from .values import Expr, ScalarVal


def output_shapes(e: Expr, in_shapes: list, value_of=known) -> list[tuple]:
    """``in_shapes[i]`` is the shape of ``e.inputs[i]`` (None for scalars); ``value_of``
    gives the extents a shape argument names (see ``ir.extents``)."""
    kind = OPS[e.op].kind
    a = e.attrs
    tensors = [s for s in in_shapes if s is not None]

    def shape_arg(name, allow_neg1=False):
        return resolve_shape(e.op, name, a[name], value_of, allow_neg1)

    if kind in (OpKind.UNARY, OpKind.BINARY, OpKind.TERNARY, OpKind.CAST):
        return [S.broadcast_shapes(e.op, *tensors)]
    if kind is OpKind.REDUCTION:
        return [S.reduce_shape(in_shapes[0], a["dims"], a["keepdim"])]
    if kind is OpKind.VAR_MEAN:
        out = S.reduce_shape(in_shapes[0], a["dims"], a["keepdim"])
        return [out, out, out] if e.op == "welford" else [out, out]  # (avg, var_sum, n) / (var, mean)
    if kind is OpKind.BROADCAST_IN_DIM:
        return [S.broadcast_in_dim_shape(e.op, in_shapes[0], shape_arg("shape", True), a["broadcast_dims"])]
    if kind is OpKind.RESHAPE:
        orig = a.get("original_shape")  # the 2022 view(original_shape=, new_shape=)
        if orig is not None:
            for d, (have, said) in enumerate(zip(in_shapes[0], orig)):
                if have is not None and have != said:
                    raise S.DefinitionError(f"view: original_shape {list(orig)} says dim {d} is {said}, "
                                            f"but the input's sizes are {list(in_shapes[0])}")
        return [S.reshape_shape(e.op, in_shapes[0], shape_arg("new_shape", True))]
    if kind is OpKind.PERMUTE:
        return [tuple(in_shapes[0][d] for d in a["dims"])]
    if kind is OpKind.SQUEEZE:
        shape = in_shapes[0]
        for d in a["dims"]:
            if shape[d] is not None and shape[d] != 1:
                raise S.DefinitionError(f"{e.op}: dim {d} has extent {shape[d]}, expected 1 to squeeze it")
        return [tuple(x for i, x in enumerate(shape) if i not in a["dims"])]
    if kind is OpKind.SLICE:
        return [slice_bounds(e, in_shapes[0], value_of)[0]]
    if kind is OpKind.PAD:
        return [S.pad_shape(e.op, in_shapes[0], pad_widths(e, value_of))]
    if kind is OpKind.CAT:
        return [S.cat_shape(e.op, tensors, a["dim"])]
    if kind is OpKind.FULL:
        return [shape_arg("shape")]
    if kind is OpKind.IOTA:
        return [resolve_shape(e.op, "length", (a["length"],), value_of)]
    if kind is OpKind.RANDOM:
        if "like" in a:
            return [in_shapes[0]]
        return [shape_arg("shape")]
    if kind in (OpKind.HOST, OpKind.GATHER):
        a = {k: value_of(x) if isinstance(x, ScalarVal) else x for k, x in a.items()}  # topk's k
        return [tuple(s) for s in OPS[e.op].shape(e.op, tensors, a)]
    raise AssertionError(f"no shape rule for op kind {kind}")


def slice_bounds(e: Expr, shape, value_of=known) -> tuple[tuple, list]:
    """A slice's output shape and its normalized (start, end, step) per dim
    (``shapes.slice_shape``); its indices may be runtime scalars or a Vector, which
    ``value_of`` resolves."""
    a = e.attrs
    starts, ends, steps = (resolve_indices(e.op, arg, a[key], value_of) for arg, key in
                           (("start_indices", "starts"), ("end_indices", "ends"), ("strides", "steps")))
    return S.slice_shape(e.op, shape, starts, ends, steps, a.get("manual", False))


def pad_widths(e: Expr, value_of=known) -> tuple:
    """A pad's widths as ints (runtime scalars resolved by ``value_of``)."""
    return resolve_indices(e.op, "pad_widths", e.attrs["pad_widths"], value_of)
