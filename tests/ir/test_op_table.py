"""The op table's structure: every row's kind is an ``OpKind``, and every dispatch
over kinds handles each member (a new kind without a shape rule or a reference
implementation fails here, not in some later fusion)."""
from __future__ import annotations

import inspect

from pyfuser import reference
from pyfuser.ir import infer
from pyfuser.ir.ops import OPS, OpKind


def test_every_row_kind_is_an_opkind():
    for row in OPS.values():
        assert isinstance(row.kind, OpKind), f"{row.name}: kind {row.kind!r}"


def test_every_opkind_has_a_row():
    assert {row.kind for row in OPS.values()} == set(OpKind)


def test_every_opkind_is_handled():
    """The shape rules and the reference executor name every kind; extents are sizes,
    evaluated before any kernel (``ir.extents``), so neither runs them."""
    for fn in (infer.output_shapes, reference.run_expr):
        src = inspect.getsource(fn)
        missing = [k for k in OpKind if k is not OpKind.EXTENT and f"OpKind.{k.name}" not in src]
        assert not missing, f"{fn.__module__}.{fn.__name__} does not handle {missing}"


def test_every_kernel_kind_has_a_lowering():
    """Each kind a kernel computes has a ``lower_<kind>`` handler; host ops run in torch
    between kernels and extents before them."""
    from pyfuser.codegen.lower import Lowering

    for k in OpKind:
        if k not in (OpKind.HOST, OpKind.EXTENT):
            assert callable(getattr(Lowering, f"lower_{k}", None)), f"no lower_{k} in codegen.lower"


def test_every_reduction_row_has_a_reduction():
    from pyfuser.ir.ops import REDUCTION_KINDS

    for row in OPS.values():
        assert (row.reduction is not None) == (row.kind in REDUCTION_KINDS), row.name
        if row.reduction is not None and not row.reduction.welford:
            assert row.reduction.identity and row.reduction.combine and row.reduction.fold, row.name
