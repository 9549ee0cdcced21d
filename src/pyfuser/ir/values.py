"""The fusion IR: values (tensors and scalars), expressions, and the Fusion graph.

A ``FusionIR`` is a straight-line program in SSA form, recorded in the order the user
called the ops.  Tensor shapes are partially known at definition time: each extent is
an ``int`` when the definition fixes it and ``None`` when it is symbolic (nvFuser's
``-1``); ``concretize`` (in ``ir.shapes``) binds every extent from the inputs given to
``execute``.  Names follow nvFuser's printer: one counter for all values, ``T<n>`` for
tensors and ``S<n>`` for scalars, so dumps line up with nvFuser's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dtypes import DataType


class Val:
    """A value in one FusionIR.  ``index`` is its number in the printed name."""

    def __init__(self, fusion: "FusionIR", index: int, dtype: DataType):
        self.fusion = fusion
        self.index = index
        self.dtype = dtype
        self.definition: Expr | None = None  # the expr that produced it (None for inputs/constants)

    @property
    def name(self) -> str:
        return f"{self.prefix}{self.index}"

    def __repr__(self) -> str:
        return self.name


class TensorVal(Val):
    prefix = "T"

    def __init__(self, fusion, index, dtype, shape, contiguity=None, stride_order=None):
        super().__init__(fusion, index, dtype)
        self.shape: tuple[int | None, ...] = tuple(shape)
        # Only meaningful for fusion inputs: nvFuser's contiguity flags (True/False/None
        # per dim, None for broadcast dims) and stride order (stride_order[i] is the rank
        # of dim i's stride, 0 = innermost).
        self.contiguity = contiguity
        self.stride_order = stride_order

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def size(self, dim: int):
        """nvFuser's ``T.size(d)``: the extent if known at definition time, else None."""
        return self.shape[dim]


class ScalarVal(Val):
    prefix = "S"

    def __init__(self, fusion, index, dtype, value=None):
        super().__init__(fusion, index, dtype)
        self.value = value  # a Python number for constants; None for runtime scalar inputs

    @property
    def is_constant(self) -> bool:
        return self.value is not None


@dataclass(eq=False)
class Expr:
    """One op application: ``outputs = op(inputs, **attrs)``."""

    op: str  # the name of a row of ir.ops.OPS
    inputs: list[Any]  # Vals (or, for cat, nested lists flattened into Vals)
    outputs: list[Val]
    attrs: dict = field(default_factory=dict)


class FusionIR:
    """The recorded program: values, expressions, and which values are inputs/outputs."""

    def __init__(self):
        self.vals: list[Val] = []
        self.exprs: list[Expr] = []
        self.inputs: list[Val] = []
        self.outputs: list[TensorVal] = []

    def _next_index(self) -> int:
        return len(self.vals)

    def new_tensor(self, dtype, shape, **kw) -> TensorVal:
        t = TensorVal(self, self._next_index(), dtype, shape, **kw)
        self.vals.append(t)
        return t

    def new_scalar(self, dtype, value=None) -> ScalarVal:
        s = ScalarVal(self, self._next_index(), dtype, value)
        self.vals.append(s)
        return s

    def add_expr(self, op: str, inputs, outputs, attrs=None) -> Expr:
        e = Expr(op, list(inputs), list(outputs), dict(attrs or {}))
        for o in outputs:
            o.definition = e
        self.exprs.append(e)
        return e

    def uses(self) -> dict[Val, list[Expr]]:
        out: dict[Val, list[Expr]] = {v: [] for v in self.vals}
        for e in self.exprs:
            for v in e.inputs:
                out[v].append(e)
        return out

    def live_exprs(self, outputs=None) -> list[Expr]:
        """Exprs that ``outputs`` (default: the fusion's) depend on, in program order."""
        needed: set[int] = {id(o) for o in (self.outputs if outputs is None else outputs)}
        live = []
        for e in reversed(self.exprs):
            if any(id(o) in needed for o in e.outputs):
                live.append(e)
                needed.update(id(v) for v in e.inputs)
        return live[::-1]
