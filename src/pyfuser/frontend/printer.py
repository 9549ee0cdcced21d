"""``repr(fd)``: a runnable ``nvfuser_fusion`` function that rebuilds the same fusion.

A current-API definition prints in nvFuser's ``nvfuser_direct`` form (``direct_printer``:
``tv<i>`` names, constants inline, no default arguments); a 2022 one
(``FusionDefinition(fusion)``) in the form below, as that API printed it.

The printer uses the current API's spelling whatever era the definition was written
in (a 2022 ``view`` prints as ``reshape`` with its resolved shape), so the output runs
with ``with FusionDefinition() as fd: nvfuser_fusion(fd)``.  The name is nvFuser's
(``nvfuser_direct``): it carries no fusion id, so two fusions that record the same ops
print the same text; the 2022 frontend's ``nvfuser_fusion_id<N>`` did.  Dumps and logs
that show several fusions name each one beside its definition (``# fusion<N>``).
"""
from __future__ import annotations

from ..ir.values import ScalarVal, TensorVal
from .ops import fmt

FUNCTION = "nvfuser_fusion"
FD_METHODS = ("define_vector",)  # recorded like ops, spelled fd.<name>(...) as nvFuser prints them


def python_definition(fd) -> str:
    if not getattr(fd, "legacy_api", False):
        from .direct_printer import direct_definition

        return direct_definition(fd, FUNCTION, FD_METHODS)
    return legacy_definition(fd)


def legacy_definition(fd) -> str:
    """The 2022 API's form: every value in the order it was defined, named T<i>/S<i>, with
    each op's arguments as they were given."""
    ir = fd.ir
    lines = [f"def {FUNCTION}(fd : FusionDefinition) -> None :"]
    printed: set[int] = set()
    exprs_by_first_out = {id(e.outputs[0]): e for e in ir.program if e.outputs}
    for v in ir.vals:
        if id(v) in printed:
            continue
        if v in ir.inputs and isinstance(v, TensorVal):
            lines.append(f"    {v.name} = fd.define_tensor({v.spelling})")
        elif isinstance(v, ScalarVal) and v.definition is None:
            if v.is_constant:
                lines.append(f"    {v.name} = fd.define_scalar({fmt(v.value)}, dtype={v.dtype!r})")
            else:
                lines.append(f"    {v.name} = fd.define_scalar(None, dtype={v.dtype!r})")
        elif id(v) in exprs_by_first_out:
            e = exprs_by_first_out[id(v)]
            outs = ", ".join(o.name for o in e.outputs)
            op = getattr(e, "printed_op", e.op)  # a hint recorded as another op (frontend.hints)
            call = f"fd.{op}" if op in FD_METHODS else f"fd.ops.{op}"
            lines.append(f"    {outs} = {call}({e.spelling})")
            printed.update(id(o) for o in e.outputs)
        printed.add(id(v))
    from .direct_printer import closed

    return closed(lines, ir, lambda v: v.name)


