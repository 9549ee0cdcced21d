"""The fusion IR: values (tensors and scalars), expressions, and the Fusion graph.

A ``FusionIR`` is a straight-line program in SSA form, recorded in the order the user
called the ops.  Tensor shapes are partially known at definition time: each extent is
an ``int`` when the definition fixes it and ``None`` when it is symbolic (nvFuser's
``-1``); ``concretize`` (in ``ir.shapes``) binds every extent from the inputs given to
``execute``.  Names follow nvFuser's printer: one counter for all values, ``T<n>`` for
tensors, ``S<n>`` for scalars and ``V<n>`` for vectors (lists of int scalars, the
shape arguments), so dumps line up with nvFuser's.

Two kinds of expressions: ``exprs``, the kernel graph (tensor ops, and scalar
arithmetic on runtime scalars), and ``extent_exprs``: sizes of tensors (``size``,
``shape``, ``at``, ``define_vector``) and scalar arithmetic on them.  Extent values
depend only on the inputs' sizes, constants and the scalar inputs that shapes name;
``concretize`` evaluates them before any kernel runs, and to the kernel graph they are
leaves, like runtime scalars, so segmentation and code generation never see a tensor
behind a size.  ``program`` holds both kinds in recording order.
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

    # nvFuser's Val kind queries: code written for nvFuser branches on them (an op on two
    # scalars gives a scalar, which is not a fusion output).
    def is_tensor(self) -> bool:
        return isinstance(self, TensorVal)

    def is_scalar(self) -> bool:
        return isinstance(self, ScalarVal)


class Extents(tuple):
    """A tensor's definition-time extents (``int``, or ``None`` when symbolic), which
    is also nvFuser's ``T.shape()``: calling it records ``fd.ops.shape(T)``, a Vector
    of the sizes known at execute time."""

    def __new__(cls, extents, tensor):
        self = super().__new__(cls, extents)
        self.tensor = tensor
        return self

    def __call__(self):
        return self.tensor.fusion.ops.shape(self.tensor)


class TensorVal(Val):
    prefix = "T"

    def __init__(self, fusion, index, dtype, shape, contiguity=None, stride_order=None):
        super().__init__(fusion, index, dtype)
        self.shape: tuple[int | None, ...] = Extents(shape, self)
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
        """nvFuser's ``T.size(dim)``: ``fd.ops.size(T, dim)``, an Int scalar (the extent
        is known at execute time; ``T.shape[dim]`` is what the definition knows)."""
        return self.fusion.ops.size(self, dim)


class ScalarVal(Val):
    prefix = "S"

    def __init__(self, fusion, index, dtype, value=None):
        super().__init__(fusion, index, dtype)
        self.value = value  # a Python number for constants; None for runtime scalar inputs
        # What the definition knows of the value: a constant's value, or an extent's when
        # the sizes it derives from are fixed.  Only shape inference reads it; kernels
        # take extents as arguments, never as literals.
        self.known = value

    @property
    def is_constant(self) -> bool:
        return self.value is not None


class VectorVal(Val):
    """nvFuser's Vector: a fixed number of Int scalars, as ``fd.ops.shape`` and
    ``fd.define_vector`` make them; a shape argument of reshape, full, ..."""

    prefix = "V"

    def __init__(self, fusion, index, length: int):
        super().__init__(fusion, index, DataType.Int)
        self.length = length
        self.known: tuple = (None,) * length  # per entry, as ScalarVal.known

    @property
    def size(self) -> int:
        """nvFuser's ``Vector.size``: the number of entries."""
        return self.length

    def at(self, index: int):
        return self.fusion.ops.at(self, index)

    __getitem__ = at


@dataclass(eq=False)
class Expr:
    """One op application: ``outputs = op(inputs, **attrs)``."""

    op: str  # the name of a row of ir.ops.OPS
    inputs: list[Any]  # Vals (or, for cat, nested lists flattened into Vals)
    outputs: list[Val]
    attrs: dict = field(default_factory=dict)
    extent: bool = False  # in FusionIR.extent_exprs: evaluated from sizes before any kernel
    shape_args: tuple = ()  # Vals named by attrs (extents in a shape argument): needed for shapes only


def attr_vals(attrs: dict) -> tuple:
    """The Vals that attribute values (shape arguments) name."""
    out = []
    for a in attrs.values():
        for x in a if isinstance(a, (tuple, list)) else (a,):
            if isinstance(x, Val):
                out.append(x)
    return tuple(out)


class FusionIR:
    """The recorded program: values, expressions, and which values are inputs/outputs."""

    def __init__(self):
        self.vals: list[Val] = []
        self.exprs: list[Expr] = []
        self.inputs: list[Val] = []
        self.outputs: list[TensorVal] = []
        # nvFuser's add_output(out, alias): position in ``outputs`` -> the input whose
        # storage receives that output; such outputs are computed but not returned
        self.output_aliases: dict[int, TensorVal] = {}
        # fd.ops.stride_order results: the memory layout execute gives them as outputs
        self.output_layouts: dict[TensorVal, tuple[int, ...]] = {}
        self.extent_exprs: list[Expr] = []
        self.program: list[Expr] = []  # exprs and extent_exprs, in recording order
        self.ops = None  # the frontend's fd.ops, for nvFuser's T.size(d) and V[i] spellings
        self._shape_scalars = (None, ())
        self._scalar_tensors = (None, ())
        # Set when the definition's `with` block ends: compiled plans and caches describe
        # the program as it was then, so a later edit would be silently ignored.
        self.sealed = False

    def check_open(self, what: str) -> None:
        """Raise if the program is sealed; ``what`` names the attempted edit."""
        if self.sealed:
            from ..errors import DefinitionError

            raise DefinitionError(f"{what}: the fusion is already defined (its `with FusionDefinition()` block "
                                  f"ended), so it cannot be changed; build a new FusionDefinition instead")

    def _next_index(self) -> int:
        self.check_open("defining a new value")
        return len(self.vals)

    def new_tensor(self, dtype, shape, **kw) -> TensorVal:
        t = TensorVal(self, self._next_index(), dtype, shape, **kw)
        self.vals.append(t)
        return t

    def new_scalar(self, dtype, value=None) -> ScalarVal:
        s = ScalarVal(self, self._next_index(), dtype, value)
        self.vals.append(s)
        return s

    def new_vector(self, length: int) -> VectorVal:
        v = VectorVal(self, self._next_index(), length)
        self.vals.append(v)
        return v

    def add_expr(self, op: str, inputs, outputs, attrs=None, extent=False) -> Expr:
        self.check_open(op)
        attrs = dict(attrs or {})
        e = Expr(op, list(inputs), list(outputs), attrs, extent, attr_vals(attrs))
        for o in outputs:
            o.definition = e
        (self.extent_exprs if extent else self.exprs).append(e)
        self.program.append(e)
        return e

    def bound_exprs(self) -> list[Expr]:
        """What binding the inputs evaluates, in program order: the exprs the outputs
        need, the extent exprs that their shape arguments name, and the exprs of the
        tensors those extents measure."""
        needed: set[int] = {id(o) for o in self.outputs}
        out = []
        for e in reversed(self.program):
            if any(id(o) in needed for o in e.outputs):
                out.append(e)
                needed.update(id(v) for v in e.inputs)
                needed.update(id(v) for v in e.shape_args)
        return out[::-1]

    def shape_scalar_inputs(self) -> tuple[int, ...]:
        """Positions (in ``inputs``) of the runtime scalars that a shape or an extent
        depends on: their values decide sizes, so they key cached launches as the
        tensors' sizes do."""
        key = (len(self.program), len(self.inputs))
        if self._shape_scalars[0] == key:
            return self._shape_scalars[1]
        stack = [v for e in self.program for v in e.shape_args]
        stack += [v for e in self.extent_exprs for v in e.inputs if not isinstance(v, TensorVal)]
        seen: set[int] = set()
        found = set()
        while stack:
            v = stack.pop()
            if id(v) in seen or isinstance(v, TensorVal):
                continue
            seen.add(id(v))
            if v.definition is not None:
                stack.extend(v.definition.inputs)
            elif not (isinstance(v, ScalarVal) and v.is_constant):
                found.add(id(v))
        positions = tuple(i for i, v in enumerate(self.inputs) if id(v) in found)
        self._shape_scalars = (key, positions)
        return positions

    def scalar_tensor_inputs(self) -> tuple[int, ...]:
        """Positions (in ``inputs``) of the 0-dim tensor inputs, which may be given as
        CPU tensors beside GPU tensors (``concretize.cpu_scalars_on_device``)."""
        if self._scalar_tensors[0] != len(self.inputs):
            positions = tuple(i for i, v in enumerate(self.inputs) if isinstance(v, TensorVal) and not v.shape)
            self._scalar_tensors = (len(self.inputs), positions)
        return self._scalar_tensors[1]

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
