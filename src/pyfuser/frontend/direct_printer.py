"""``repr(fd)`` of a current-API definition, in the form nvFuser's ``nvfuser_direct`` prints.

nvFuser prints the fusion it holds, not the calls that built it, and pyfuser follows it
where the two spellings differ only in form:

* tensors are ``tv<i>`` (the i-th tensor of the fusion), other scalars ``c<i>``; a
  constant whose dtype is its Python literal's (Int, Double, Bool, ComplexDouble) is
  written inline (``fd.ops.mul(tv2, 3.00000)``), doubles with six significant digits
  when that is exact and with every digit needed otherwise, so the text rebuilds the
  same values;
* inputs come first, then each op after the ops it reads, in a depth-first walk from
  the outputs (ops no output needs are left out);
* default arguments are left out (``keepdim=False``, ``dtype=DataType.Null``); a sum
  names the dtype of its result; a slice whose constant indices are already in range
  prints ``manual_normalization=True``; a sum over dims of extent 1 that keeps the dtype
  is held as the squeeze it is (``ops.sum``), and prints as one.

The 2022 API's definitions (``FusionDefinition(fusion)``) print as that API did
(``printer.py``).
"""
from __future__ import annotations

import math
import re

from ..ir.dtypes import DataType, python_scalar_dtype
from ..ir.values import ScalarVal, TensorVal, Val, attr_vals

_NAME = re.compile(r"\b[TSV]\d+\b")
_SUM_LIKE = ("sum", "prod")


def literal(value) -> str:
    """A Python literal for a constant, as nvFuser prints it where that is exact."""
    if isinstance(value, bool) or isinstance(value, int):
        return repr(value)
    if isinstance(value, complex):
        return f"complex({literal(value.real)}, {literal(value.imag)})"
    if math.isinf(value):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    if math.isnan(value):
        return 'float("nan")'
    short = f"{value:#g}"
    return short if float(short) == value else repr(value)


def _inline(v: Val) -> bool:
    if not (isinstance(v, ScalarVal) and v.is_constant and v.definition is None):
        return False
    try:
        return python_scalar_dtype(v.value) is v.dtype
    except TypeError:
        return False


def _reads(e) -> list:
    """Every value ``e``'s printed call names: its inputs, shape arguments and scalar
    attributes (topk's k, ...)."""
    return [x for x in list(e.inputs) + list(getattr(e, "shape_args", ())) + list(attr_vals(e.attrs))
            if isinstance(x, Val)]


def _names(ir, order) -> dict:
    """Names of the values printed, numbered in the order they were defined (values no
    output needs take no number, so a printed definition prints itself again)."""
    printed = {id(v) for v in ir.inputs} | {id(v) for e in order for v in e.outputs}
    printed |= {id(x) for e in order for x in _reads(e)}
    names, tensors, scalars = {}, 0, 0
    for v in ir.vals:
        if id(v) not in printed:
            if isinstance(v, ScalarVal) and v.is_constant:  # an attribute's value (topk's k), in its text only
                names[v.name] = literal(v.value)
            continue
        if isinstance(v, TensorVal):
            names[v.name] = f"tv{tensors}"
            tensors += 1
        elif _inline(v):
            names[v.name] = literal(v.value)
        else:
            names[v.name] = f"c{scalars}"
            scalars += 1
    return names


def _order(ir) -> list:
    """The exprs the outputs need, each after the exprs it reads (depth first)."""
    done, order = set(), []
    stack = [(o, False) for o in reversed(ir.outputs)]
    while stack:
        v, expanded = stack.pop()
        e = v.definition if isinstance(v, Val) else None
        if e is None or id(e) in done:
            continue
        if expanded:
            done.add(id(e))
            order.append(e)
            continue
        stack.append((v, True))
        stack.extend((x, False) for x in reversed(_reads(e)))
    return order


def _leaf_scalars(order) -> list:
    """Constants that are not inlined, in first-use order: each gets a define_scalar line."""
    seen, out = set(), []
    for e in order:
        for x in _reads(e):
            if isinstance(x, ScalarVal) and x.definition is None and x.is_constant and not _inline(x) \
                    and id(x) not in seen:
                seen.add(id(x))
                out.append((e, x))
    return out


def _drop_defaults(text: str) -> str:
    return text.replace(", keepdim=False", "").replace(", dtype=DataType.Null", "")


def _rewrite(e, text: str) -> tuple[str, str]:
    """(op, arguments) as nvFuser prints them."""
    if e.op == "squeeze":  # also a sum over extent-1 dims, held as the squeeze it is (ops.sum)
        return "squeeze", f"{e.inputs[0].name}, dims={list(e.attrs['dims'])}"
    op = getattr(e, "printed_op", e.op)
    if op in _SUM_LIKE and "dims" in e.attrs and not e.attrs.get("keepdim"):
        text = re.sub(r", dtype=DataType\.\w+", "", text) + f", dtype={e.outputs[0].dtype!r}"
    if op == "slice" and not e.attrs.get("manual") and _in_range(e):
        text += ", manual_normalization=True"
    return op, _drop_defaults(text)


def _in_range(e) -> bool:
    t, a = e.inputs[0], e.attrs
    if not all(isinstance(a[k], (tuple, list)) for k in ("starts", "ends", "steps")):  # a Vector: runtime values
        return False
    for ext, lo, hi, step in zip(t.shape, a["starts"], a["ends"], a["steps"]):
        if not all(isinstance(x, int) for x in (ext, lo, hi, step)):
            return False
        if not (0 <= lo <= hi <= ext and step >= 1):
            return False
    return True


def direct_definition(fd, function: str, fd_methods: tuple) -> str:
    ir = fd.ir
    order = _order(ir)
    names = _names(ir, order)

    def rename(text: str) -> str:
        return _NAME.sub(lambda m: names.get(m.group(0), m.group(0)), text)

    lines = [f"def {function}(fd : FusionDefinition) -> None :"]
    for v in ir.inputs:
        if isinstance(v, TensorVal):
            lines.append(f"    {names[v.name]} = fd.define_tensor({v.spelling})")
        else:
            lines.append(f"    {names[v.name]} = fd.define_scalar(None, dtype={v.dtype!r})")
    constants = {}
    for e, x in _leaf_scalars(order):
        constants.setdefault(id(e), []).append(x)
    for e in order:
        for x in constants.get(id(e), ()):
            lines.append(f"    {names[x.name]} = fd.define_scalar({literal(x.value)}, dtype={x.dtype!r})")
        op, text = _rewrite(e, e.spelling)
        call = f"fd.{op}" if op in fd_methods else f"fd.ops.{op}"
        outs = ", ".join(names[o.name] for o in e.outputs)
        lines.append(f"    {outs} = {call}({rename(text)})")
    return closed(lines, ir, lambda v: names[v.name])


def closed(lines: list, ir, name) -> str:
    """A printed definition's body ended: its ``add_output`` calls (an alias as the second
    argument), each value spelled by ``name``, and ``pass`` for an empty body."""
    for pos, o in enumerate(ir.outputs):
        alias = ir.output_aliases.get(pos)
        lines.append(f"    fd.add_output({name(o)}{', ' + name(alias) if alias is not None else ''})")
    if len(lines) == 1:
        lines.append("    pass")
    return "\n".join(lines) + "\n"


__all__ = ["direct_definition", "literal", "DataType"]
