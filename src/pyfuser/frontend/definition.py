"""FusionDefinition and Fusion: nvFuser's user-facing API, both eras.

Current era::

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        ...
        fd.add_output(t5)
    out = fd.execute([x])

2022 era (the report)::

    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Half)
        ...
    out = fs.execute([x])

Both record into a ``FusionIR``; ``execute`` hands it to the runtime.
"""
from __future__ import annotations

import itertools

from ..errors import DefinitionError, DefinitionTypeError, EmptyFusionError, InputTypeError
from ..ir.dtypes import DataType, to_datatype
from ..ir.shapes import contiguous_strides
from ..ir.values import FusionIR, ScalarVal, TensorVal, Val
from .builder import Builder
from .descriptor import compute_tensor_descriptor, contiguity_per_dim
from .ops import Operators, fmt

_ids = itertools.count()
# nvFuser's execute keywords (debugging and repro options): accepted; save_repro_inputs keeps the
# inputs' layouts for last_repro_script, the others change nothing here
NVFUSER_EXECUTE_OPTIONS = ("override_user_schedule", "print_repro", "save_repro_inputs", "capture_debug_output",
                           "_enable_options", "_disable_options")


def _shape(t: TensorVal) -> list:
    return [-1 if e is None else e for e in t.shape]


def _flatten_vectors(inputs) -> list:
    """nvFuser takes the values of ``define_vector(n)``'s n scalar inputs as one list
    or tuple too: spread such entries into their scalars."""
    out = []
    for x in inputs:
        out.extend(x) if isinstance(x, (list, tuple)) else out.append(x)
    return out


class Fusion:
    """The 2022 API's container: ``FusionDefinition(fs)`` records into it, ``fs.execute`` runs it."""

    def __init__(self):
        self.ir = FusionIR()
        self.id = next(_ids)
        self._definition: FusionDefinition | None = None

    def execute(self, inputs, **kwargs):
        if self._definition is None:
            raise DefinitionError("Fusion.execute: nothing was defined; use `with FusionDefinition(fs) as fd:` first")
        return self._definition.execute(inputs, **kwargs)

    def __getattr__(self, name):  # profile, validate, repro_script, ...: the definition's
        if name.startswith("_") or self.__dict__.get("_definition") is None:
            raise AttributeError(name)
        return getattr(self._definition, name)

    def __repr__(self):
        return repr(self._definition) if self._definition else "Fusion(<empty>)"

    # Fusions compare by what they compute (``fd.fusion == other.fusion``, the key of
    # ``LRUCache``): the same printed definition.  Undefined ones are only themselves.
    def _key(self):
        return repr(self._definition) if self._definition is not None else id(self)

    def __eq__(self, other):
        return isinstance(other, Fusion) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


class FusionDefinition:
    def __init__(self, fusion: Fusion | None = None, id: int | None = None):
        if fusion is not None and not isinstance(fusion, Fusion):
            raise DefinitionTypeError(f"FusionDefinition: expected a Fusion (2022 API) or nothing, got {fusion!r}")
        # The id names the generated kernels and the printed definition: an int, never text
        if id is not None and (not isinstance(id, int) or isinstance(id, bool) or id < 0):
            raise DefinitionTypeError(f"FusionDefinition: id must be an int >= 0, got {type(id).__name__} {id!r}")
        # ``FusionDefinition(fs)`` is the 2022 API: repr prints in that API's form (``printer``)
        self.legacy_api = fusion is not None
        self._fusion = fusion if fusion is not None else Fusion()
        self._fusion.ir = FusionIR()
        self._fusion._definition = self
        self.id = self._fusion.id if id is None else id
        self.ir = self._fusion.ir
        self._builder = Builder(self.ir, self)
        self.ops = Operators(self._builder)
        self.ir.ops = self.ops
        self._finalized = False
        self._entered = False
        self._runtime = None  # the executor cache, built on first execute
        self.last_profile = None

    # -- context manager ------------------------------------------------------------
    def __enter__(self):
        self.ir.check_open(f"with fd: (fusion {self.id} a second time)")
        self._entered = True
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self._finalized = True
            self.ir.sealed = True
        return False

    def definition(self):
        """Override in a subclass to build the fusion there (nvFuser's subclass style:
        ``MyFusion().execute(inputs)`` runs ``definition`` once, as ``with fd:`` would)."""
        raise NotImplementedError

    def _define_by_subclass(self):
        if (self._finalized or type(self).definition is FusionDefinition.definition or self.ir.program
                or self.ir.inputs or self.ir.outputs):
            return
        with self:
            self.definition()

    # -- values ---------------------------------------------------------------------
    def define_tensor(self, shape=None, contiguity=None, dtype=DataType.Float, is_cpu=False,
                      stride_order=None, *, symbolic_sizes=None, contiguous=None, sizes=None, strides=None,
                      static_sizes=False):
        op = "define_tensor"
        self.ir.check_open(op)
        if sizes is not None:  # concrete sizes and strides: derive shape/contiguity/stride_order
            return self._define_from_strides(sizes, strides, dtype, static_sizes, is_cpu)
        shape = shape if shape is not None else symbolic_sizes
        if shape is None:
            raise DefinitionTypeError(f"{op}: needs shape= (or symbolic_sizes=)")
        shape = list(self._builder.check_int_list(op, "shape", shape, allow_neg1=True))
        rank = len(shape)
        contig = contiguity if contiguity is not None else contiguous
        if contig is None:
            contig = [True] * rank
        if isinstance(contig, bool):
            contig = [contig] * rank
        contig = list(contig)
        if len(contig) != rank:
            raise DefinitionError(f"{op}: contiguity has {len(contig)} entries, expected one per dim ({rank})")
        for c in contig:
            if c not in (True, False, None):
                raise DefinitionError(f"{op}: contiguity entries must be True, False or None, got {c!r}")
        if stride_order is not None:
            so = list(stride_order)
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in so) or sorted(so) != list(range(rank)):
                raise DefinitionError(f"{op}: stride_order {so} must be a permutation of 0..{rank - 1}")
            stride_order = tuple(so)
        try:
            dt = to_datatype(dtype)
        except TypeError as err:
            raise DefinitionTypeError(f"{op}: dtype: {err}") from None
        if dt is DataType.Null:
            raise DefinitionError(f"{op}: dtype must be a concrete DataType, got DataType.Null")
        # contiguity is given in allocation order (nvFuser's); the IR keeps it per dim
        t = self.ir.new_tensor(dt, [None if e == -1 else e for e in shape],
                               contiguity=contiguity_per_dim(contig, stride_order), stride_order=stride_order)
        t.spelling = (f"shape={fmt(shape)}, contiguity={fmt(contig)}, dtype={dt!r}, is_cpu={bool(is_cpu)}"
                      + (f", stride_order={fmt(list(stride_order))}" if stride_order is not None else ""))
        self.ir.inputs.append(t)
        return t

    def from_pytorch(self, tensor, static_sizes=False):
        """nvFuser's from_pytorch: an input tensor shaped like ``tensor`` (its dtype, its
        size-1 dims as broadcasts, contiguity and stride order from its strides); every
        other extent is symbolic unless ``static_sizes``."""
        import torch

        if not isinstance(tensor, torch.Tensor):
            raise DefinitionTypeError(f"from_pytorch: expected a torch.Tensor, got {type(tensor).__name__} {tensor!r}")
        try:
            dt = to_datatype(tensor.dtype)
        except TypeError as err:
            raise DefinitionTypeError(f"from_pytorch: {err}") from None
        return self.define_tensor(sizes=list(tensor.shape), strides=list(tensor.stride()), dtype=dt,
                                  static_sizes=static_sizes, is_cpu=tensor.is_cpu and tensor.dim() == 0)

    def _define_from_strides(self, sizes, strides, dtype, static_sizes=False, is_cpu=False):
        op = "define_tensor"
        sizes = list(self._builder.check_int_list(op, "sizes", sizes))
        rank = len(sizes)
        if strides is None:
            strides = list(contiguous_strides(sizes))
        strides = list(self._builder.check_int_list(op, "strides", strides))
        if len(strides) != rank:
            raise DefinitionError(f"{op}: strides has {len(strides)} entries, expected one per dim of sizes "
                                  f"{sizes} ({rank}), got strides {strides}")
        contig, so = compute_tensor_descriptor(sizes, strides)
        shape = list(sizes) if static_sizes else [1 if s == 1 else -1 for s in sizes]
        return self.define_tensor(shape=shape, contiguity=contig, dtype=dtype, is_cpu=is_cpu,
                                  stride_order=so if so != list(range(rank))[::-1] else None)

    def define_scalar(self, value=None, dtype=None):
        """A constant (``value``) or, with ``value=None``, a runtime scalar input of
        ``dtype``; as in nvFuser, ``define_scalar(DataType.Int)`` is the latter."""
        op = "define_scalar"
        self.ir.check_open(op)
        if isinstance(value, DataType) and dtype is None:
            value, dtype = None, value
        if value is not None and not isinstance(value, (bool, int, float, complex)):
            raise DefinitionTypeError(f"{op}: value must be a Python bool, int, float or complex (or None), "
                                      f"got {value!r}")
        if dtype is not None:
            try:
                dtype = to_datatype(dtype)
            except TypeError as err:
                raise DefinitionTypeError(f"{op}: dtype: {err}") from None
        if value is None:
            dt = dtype or DataType.Double
            s = self.ir.new_scalar(dt, None)
            s.spelling = f"dtype={dt!r}"
            self.ir.inputs.append(s)
            return s
        s = self._builder.constant(value, dtype)
        s.spelling = f"{fmt(value)}, dtype={s.dtype!r}"
        return s

    def define_vector(self, values=None, dtype=DataType.Int, *, size=None):
        """nvFuser's two define_vector forms: ``define_vector(values, dtype=DataType.Int)``
        from ints (-1 allowed) and Int scalars, and ``define_vector(size)``: ``size``
        runtime Int scalar inputs.  A Vector is a shape argument; ``V[i]`` is an entry."""
        op = "define_vector"
        self.ir.check_open(op)
        if isinstance(values, int) and not isinstance(values, bool) and size is None:
            values, size = None, values
        if (values is None) == (size is None):
            raise DefinitionTypeError(f"{op}: give values (a list of ints and Int scalars) or size (a number of "
                                      f"scalar inputs), got values={values!r}, size={size!r}")
        try:
            dt = to_datatype(dtype)
        except TypeError as err:
            raise DefinitionTypeError(f"{op}: dtype: {err}") from None
        if dt is not DataType.Int:
            raise DefinitionError(f"{op}: dtype must be DataType.Int (a Vector holds sizes), got {dt!r}")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise DefinitionError(f"{op}: size must be an int >= 0, got {size!r}")
            values = [self.define_scalar(dtype=DataType.Int) for _ in range(size)]
        spec = self._builder.shape_arg(op, "values", values, allow_neg1=True, vector_ok=False, float_ok=False)
        # Entries are scalars, as in nvFuser: ints become constants, scalars given stay themselves
        entries = [given if isinstance(given, ScalarVal) else self._builder.constant(x, DataType.Int)
                   for given, x in zip(values, spec)]
        return self.ops._extent(op, entries, {}, f"{fmt(entries)}, dtype={dt!r}", length=len(entries))

    def define_constant(self, value, dtype=None):
        """The 2022 spelling of a constant scalar."""
        if value is None:
            raise DefinitionError("define_constant: value must not be None (use define_scalar() for a runtime scalar)")
        return self.define_scalar(value, dtype)

    def add_output(self, output, alias_input=None):
        self.ir.check_open(f"add_output({getattr(output, 'name', output)})")
        if isinstance(output, Val) and output.fusion is not self.ir:
            raise DefinitionError(f"add_output: {output.name} belongs to another FusionDefinition")
        if not isinstance(output, TensorVal):
            what = f"scalar {output.name}" if isinstance(output, ScalarVal) else f"{type(output).__name__} {output!r}"
            raise DefinitionTypeError(f"add_output: expected a tensor value of this FusionDefinition, got {what}")
        if alias_input is not None:
            self._check_alias(output, alias_input)
            self.ir.output_aliases[len(self.ir.outputs)] = alias_input
        self.ir.outputs.append(output)

    def _check_alias(self, output, alias):
        """nvFuser's in-place output: ``output``'s values are written into the input
        ``alias`` (through its strides) and the output is not returned."""
        op = f"add_output({output.name}, alias_input)"
        if not isinstance(alias, TensorVal) or alias.fusion is not self.ir or alias not in self.ir.inputs:
            what = alias.name if isinstance(alias, Val) and alias.fusion is self.ir else repr(alias)
            raise DefinitionError(f"{op}: alias_input must be a tensor input of this FusionDefinition "
                                  f"(from define_tensor), got {what}")
        if alias in self.ir.output_aliases.values():
            raise DefinitionError(f"{op}: input {alias.name} already receives another output")
        if output.dtype is not alias.dtype:
            raise DefinitionError(f"{op}: output {output.name} has dtype {output.dtype!r}, the input {alias.name} "
                                  f"it is written into has {alias.dtype!r}; cast it first")
        known = all(a is None or b is None or a == b for a, b in zip(output.shape, alias.shape))
        if output.rank != alias.rank or not known:
            raise DefinitionError(f"{op}: output {output.name} has shape {_shape(output)}, the input {alias.name} "
                                  f"it is written into has {_shape(alias)}")

    # -- running ----------------------------------------------------------------------
    def execute(self, inputs, device=None, profile=False, **kwargs):
        unknown = sorted(k for k in kwargs if k not in NVFUSER_EXECUTE_OPTIONS)
        if unknown:
            raise InputTypeError(f"execute: unexpected keyword argument{'s' * (len(unknown) > 1)} "
                                 f"{', '.join(map(repr, unknown))}; execute takes inputs, device= and profile= "
                                 f"(and accepts nvFuser's {', '.join(NVFUSER_EXECUTE_OPTIONS)}, which change nothing "
                                 f"here)")
        fec = self.__dict__.get("fec")
        if fec is not None and fec._fd is not self:  # an equal definition's executor (``frontend.lru``)
            return fec.execute(inputs, device=device, profile=profile, **kwargs)
        self._define_by_subclass()
        if not self._finalized or not self.ir.outputs:
            self._check_defined()
        from ..runtime.executor import execute

        if kwargs and kwargs.get("save_repro_inputs"):
            from ..runtime.repro import saved_inputs

            self._repro_inputs = saved_inputs(inputs)

        if isinstance(inputs, (list, tuple)) and any(isinstance(x, (list, tuple)) for x in inputs):
            inputs = _flatten_vectors(inputs)
        return execute(self, inputs, device=device, profile=profile)

    @property
    def fusion(self) -> Fusion:
        """nvFuser's ``fd.fusion``: what ``LRUCache.cache_compile`` takes; fusions compare
        equal when they compute the same (the executor's, once ``fd.fec`` is set)."""
        fec = self.__dict__.get("fec")
        return fec.fusion() if fec is not None else self._fusion

    def _check_defined(self):
        if not self._entered and not self._finalized:
            raise EmptyFusionError("execute: Fusion does not exist! Use `with FusionDefinition() as fd: ...` to "
                                   "define a fusion.")
        if not self._finalized:
            raise DefinitionError(f"execute: fusion {self.id} is not completely defined: build it inside "
                                  "`with FusionDefinition() as fd:` and execute after the block ends "
                                  "(here the block has not ended, or it raised)")
        if not self.ir.outputs:
            raise EmptyFusionError(f"execute: Fusion is empty! fusion {self.id} has no outputs (add_output)")

    def profile(self):
        """The ``FusionProfile`` of the last ``execute(..., profile=True)``: per-kernel time,
        GB/s, bytes, launch shape, registers; ``print(fd.profile())`` shows the table."""
        if self.last_profile is None:
            from ..runtime.profiler import NoProfileError

            raise NoProfileError(f"fd.profile(): fusion {self.id} has no profile yet; run "
                                 f"fd.execute(inputs, profile=True) first (or set PYFUSER_PROF=print)")
        return self.last_profile

    def repro_script(self, inputs, device=None) -> str:
        """A standalone Python script that rebuilds this fusion and inputs shaped like
        ``inputs`` (random values), executes it and validates it against the reference."""
        from ..runtime.repro import repro_script

        return repro_script(self, inputs, device)

    def repro_script_for(self, inputs=None) -> str:
        """nvFuser's repro script: the definition and, given ``inputs``, tensors of their
        layouts (random values) and the execute call (``runtime.repro``)."""
        from ..runtime.repro import nvfuser_repro_script

        return nvfuser_repro_script(self, inputs)

    def last_repro_script(self) -> str:
        """``repro_script_for`` the inputs of the last ``execute(inputs, save_repro_inputs=True)``."""
        saved = getattr(self, "_repro_inputs", None)
        # nvFuser asserts here: its tests expect an AssertionError with this text
        assert saved is not None, ("fd.last_repro_script() cannot provide a repro because "
                                   "fd.execute(inputs, save_repro_inputs=True) was not executed!")
        return self.repro_script_for(saved)

    def explain(self, inputs, device=None):
        """How ``execute(inputs)`` would run this fusion, without running it: per
        segment the scheduler chosen, its params, and every rejection on the way
        (``Reject``: scheduler, code, message), torch fallbacks and spill rejections
        included.  ``print(fd.explain(inputs))`` shows the scheduler_params dump."""
        from ..runtime.executor import explain

        return explain(self, inputs, device)

    def validate(self, inputs, device=None):
        """Execute, run the reference executor on the same inputs and random state, and
        raise ``ValidationError`` (with the largest error per output) if they disagree;
        returns the outputs otherwise."""
        from ..runtime.validate import validate

        return validate(self, inputs, device)

    def reference(self, inputs, device=None):
        """Run the fusion with the reference executor (torch ops): pyfuser's semantics."""
        from ..reference import run_reference

        return run_reference(self.ir, inputs, device=device)

    # -- printing -----------------------------------------------------------------------
    def __repr__(self):
        from .printer import python_definition

        self._define_by_subclass()
        return python_definition(self)

    __str__ = __repr__
