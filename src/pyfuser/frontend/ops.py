"""``fd.ops``: the op builders, in nvFuser's spelling, both API eras.

Elementwise builders are generated from the op table (``ir.ops``); the others are
written here because their arguments differ.  Every builder checks its arguments,
infers the output's shape (``ir.infer``) and dtype (PyTorch's rules, by probing), and
records one expr.  ``spelling`` keeps the call's arguments for the printer, so
``repr(fd)`` reads like what the user wrote.
"""
from __future__ import annotations

from ..errors import DefinitionError, DefinitionTypeError
from ..ir import shapes as S
from ..ir.dtypes import DataType, to_datatype
from ..ir.extents import infer_known, is_extent, spec_length, spell
from ..ir.infer import output_shapes
from ..ir.ops import OPS, OpKind
from ..ir.values import ScalarVal, TensorVal, Val
from .builder import Builder, scalar_promotion
from .host_builders import HostOps
from .composites import CompositeOps
from .gathers import GatherOps
from .hints import HintOps
from .sizes import SizeOps


def fmt(x) -> str:
    """Spell an argument as Python source for the printer."""
    if isinstance(x, Val):
        return x.name
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(fmt(v) for v in x) + "]"
    if isinstance(x, DataType):
        return repr(x)
    if isinstance(x, float):
        return repr(x) if x == x and abs(x) != float("inf") else f"float('{x}')"
    if isinstance(x, complex):  # repr gives (inf+nanj), which is no Python expression
        return f"complex({fmt(x.real)}, {fmt(x.imag)})"
    return repr(x)


class Operators(SizeOps, HostOps, CompositeOps, GatherOps, HintOps):
    def __init__(self, builder: Builder):
        self._b = builder

    # -- recording -----------------------------------------------------------------
    def _record(self, op, inputs, attrs, dtypes, spelling, scalar_out=False):
        b = self._b
        b.ir.check_open(op)
        e_inputs = list(inputs)
        from ..ir.values import Expr

        probe = Expr(op, e_inputs, [], attrs)
        if scalar_out:
            outs = [b.ir.new_scalar(dt) for dt in dtypes]
        else:
            in_shapes = [v.shape if isinstance(v, TensorVal) else None for v in e_inputs]
            shapes = output_shapes(probe, in_shapes)
            outs = [b.ir.new_tensor(dt, shp) for dt, shp in zip(dtypes, shapes)]
        # Arithmetic on sizes is a size: evaluated with them, before any kernel (ir.extents)
        extent = scalar_out and any(is_extent(v) for v in e_inputs)
        e = b.ir.add_expr(op, e_inputs, outs, attrs, extent=extent)
        e.spelling = spelling
        if extent:
            outs[0].known = infer_known(e)
        return outs

    def _elementwise(self, op, args, names, extra=None):
        b = self._b
        vals = [b.check_val(op, n, a) for a, n in zip(args, names)]
        row = OPS[op]
        kw = dict(extra or {})
        dtype = b.probe_dtype(op, row.ref, vals, **kw)
        scalar_out = not any(isinstance(v, TensorVal) for v in vals)
        spelling = ", ".join(fmt(v) for v in vals) + "".join(f", {k}={fmt(v)}" for k, v in kw.items())
        (out,) = self._record(op, vals, kw, [dtype], spelling, scalar_out)
        return out

    # -- casts -------------------------------------------------------------------------
    def cast(self, arg, dtype):
        b = self._b
        v = b.check_val("cast", "arg", arg)
        try:
            dtype = to_datatype(dtype)
        except TypeError as err:
            raise DefinitionTypeError(f"cast: dtype: {err}") from None
        if dtype is DataType.Null:
            raise DefinitionError("cast: dtype must be a concrete DataType, got DataType.Null")
        (out,) = self._record("cast", [v], {"dtype": dtype}, [dtype], f"{fmt(v)}, dtype={dtype!r}",
                              scalar_out=isinstance(v, ScalarVal))
        return out

    # -- ternary ops with their own signatures ------------------------------------
    def where(self, pred, a, b):
        """nvFuser promotes ``a`` and ``b`` alone (its ``where`` in csrc/ops/arith.cpp): with a
        tensor predicate and two scalar values the result keeps the scalars' own dtypes (two
        Double scalars give Double, two ComplexFloat ones ComplexFloat), where eager PyTorch
        would give its default dtype for Python numbers.  A tensor among them: PyTorch's."""
        bld = self._b
        vals = [bld.check_val("where", n, x) for x, n in ((pred, "pred"), (a, "a"), (b, "b"))]
        dtype = bld.probe_dtype("where", OPS["where"].ref, vals)  # also rejects a non-Bool pred
        if isinstance(vals[0], TensorVal) and not any(isinstance(v, TensorVal) for v in vals[1:]):
            dtype = scalar_promotion(vals[1].dtype, vals[2].dtype)
        (out,) = self._record("where", vals, {}, [dtype], ", ".join(fmt(v) for v in vals),
                              scalar_out=not any(isinstance(v, TensorVal) for v in vals))
        return out

    def lerp(self, start, end, weight):
        return self._elementwise("lerp", [start, end, weight], ["start", "end", "weight"])

    def addcmul(self, arg, tensor1, tensor2, value=1.0):
        b = self._b
        v = b.check_val("addcmul", "value", value)
        vals = [b.check_val("addcmul", n, a) for a, n in ((arg, "arg"), (tensor1, "tensor1"), (tensor2, "tensor2"))]
        dtype = b.probe_dtype("addcmul", OPS["addcmul"].ref, vals + [v])
        (out,) = self._record("addcmul", vals + [v], {}, [dtype], ", ".join(fmt(x) for x in vals + [v]),
                              scalar_out=not any(isinstance(x, TensorVal) for x in vals))
        return out

    def clamp(self, arg, min=None, max=None):
        b = self._b
        x = b.check_val("clamp", "arg", arg, tensor=True)
        lo = None if min is None else b.check_val("clamp", "min", min)
        hi = None if max is None else b.check_val("clamp", "max", max)
        vals = [x] + [v for v in (lo, hi) if v is not None]
        attrs = {"has_min": lo is not None, "has_max": hi is not None}
        dtype = b.probe_dtype("clamp", OPS["clamp"].ref, [x, lo, hi])
        spelling = fmt(x) + (f", min={fmt(lo)}" if lo is not None else "") + (f", max={fmt(hi)}" if hi is not None else "")
        (out,) = self._record("clamp", vals, attrs, [dtype], spelling)
        return out

    # -- reductions --------------------------------------------------------------------
    def _dims_arg(self, op, t, dims, axes):
        if dims is None:
            dims = axes
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            return tuple(range(t.rank))
        return tuple(sorted(S.norm_dims(op, "dims", dims, t.rank)))

    def _reduction(self, op, arg, dims, keepdim, dtype, axes, dim=None):
        b = self._b
        t = b.check_val(op, "arg", arg, tensor=True)
        if dim is not None:  # nvFuser's sum(arg, dim=i) form: one dim
            if dims is not None or axes is not None:
                raise DefinitionTypeError(f"{op}: give dim= or dims=, not both (got dim={dim!r}, dims={dims!r})")
            dims = [dim]
        if isinstance(dims, DataType):  # nvFuser's sum(arg, dtype) form: every dim
            dims, dtype = None, dims
        d = self._dims_arg(op, t, dims, axes)
        if not isinstance(keepdim, bool):
            raise DefinitionTypeError(f"{op}: keepdim must be a bool, got {keepdim!r}")
        dt = None if dtype is None else to_datatype(dtype)
        if dt is DataType.Null:
            dt = None
        attrs = {"dims": d, "keepdim": keepdim, "dtype": dt}
        ref = OPS[op].ref
        out_dt = b.probe_dtype(op, lambda x: ref(x, list(d), keepdim, None if dt is None else dt.torch), [t])
        spelling = f"{fmt(t)}, dims={fmt(list(d))}, keepdim={keepdim}, dtype={dt if dt else DataType.Null!r}"
        if op == "sum" and d and not keepdim and out_dt is t.dtype and all(t.shape[i] == 1 for i in d):
            # A sum over dims of extent 1 that keeps the dtype is a squeeze; nvFuser holds and
            # prints it as one.  Held as a reduction it would get a kernel of its own, so the
            # definition and the one rebuilt from repr(fd) would run different plans, which
            # round differently on the GPU.
            (out,) = self._record("squeeze", [t], {"dims": d}, [t.dtype], spelling)
            out.definition.printed_op = "sum"  # the 2022 API prints the call as written
            return out
        (out,) = self._record(op, [t], attrs, [out_dt], spelling)
        return out

    def sum(self, arg, dims=None, keepdim=False, dtype=DataType.Null, *, axes=None, dim=None):
        return self._reduction("sum", arg, dims, keepdim, dtype, axes, dim)

    def max(self, arg, dims=None, keepdim=False, dtype=DataType.Null, *, axes=None, dim=None):
        return self._reduction("max", arg, dims, keepdim, dtype, axes, dim)

    def min(self, arg, dims=None, keepdim=False, dtype=DataType.Null, *, axes=None, dim=None):
        return self._reduction("min", arg, dims, keepdim, dtype, axes, dim)

    def prod(self, arg, dims=None, keepdim=False, dtype=DataType.Null, *, axes=None, dim=None):
        return self._reduction("prod", arg, dims, keepdim, dtype, axes, dim)

    def _var_args(self, op, arg, dims, correction, keepdim, axes):
        b = self._b
        t = b.check_val(op, "arg", arg, tensor=True)
        d = self._dims_arg(op, t, dims, axes)
        if not isinstance(correction, (int, float)) or isinstance(correction, bool):
            raise DefinitionTypeError(f"{op}: correction must be a number, got {correction!r}")
        attrs = {"dims": d, "correction": correction, "keepdim": bool(keepdim)}
        dt = b.probe_dtype(op, lambda x: OPS["var"].ref(x, list(d), correction, keepdim), [t])
        spelling = f"{fmt(t)}, dims={fmt(list(d))}, correction={correction!r}, keepdim={bool(keepdim)}"
        return t, attrs, dt, spelling

    def var(self, arg, dims=None, correction=1, keepdim=False, *, axes=None):
        t, attrs, dt, sp = self._var_args("var", arg, dims, correction, keepdim, axes)
        (out,) = self._record("var", [t], attrs, [dt], sp)
        return out

    def var_mean(self, arg, dims=None, correction=1, keepdim=False, *, axes=None):
        t, attrs, dt, sp = self._var_args("var_mean", arg, dims, correction, keepdim, axes)
        var, mean = self._record("var_mean", [t], attrs, [dt, dt], sp)
        return var, mean

    # -- layout ops ----------------------------------------------------------------------
    def broadcast_in_dim(self, arg, shape=None, broadcast_dims=None, *, output_shape=None):
        b = self._b
        t = b.check_val("broadcast_in_dim", "arg", arg, tensor=True)
        shape = shape if shape is not None else output_shape
        if shape is None or broadcast_dims is None:
            raise DefinitionTypeError("broadcast_in_dim: needs shape= (or output_shape=) and broadcast_dims=")
        shape = b.shape_arg("broadcast_in_dim", "shape", shape, allow_neg1=True)
        bdims = b.check_int_list("broadcast_in_dim", "broadcast_dims", _wrap_negative(broadcast_dims, spec_length(shape)))
        attrs = {"shape": shape, "broadcast_dims": tuple(bdims)}
        if list(bdims) == list(range(t.rank)) and spec_length(shape) == t.rank:
            # no new dim: an expand, recorded (and printed) as one, as nvFuser does
            (out,) = self._record("expand", [t], attrs, [t.dtype], f"{fmt(t)}, shape={fmt(shape)}")
            return out
        sp = f"{fmt(t)}, shape={fmt(shape)}, broadcast_dims={fmt(bdims)}"
        (out,) = self._record("broadcast_in_dim", [t], attrs, [t.dtype], sp)
        return out

    def broadcast(self, arg, is_broadcast_dim):
        b = self._b
        t = b.check_val("broadcast", "arg", arg, tensor=True)
        flags = list(is_broadcast_dim)
        if not all(isinstance(f, bool) for f in flags) or sum(not f for f in flags) != t.rank:
            raise DefinitionError(f"broadcast: is_broadcast_dim must be bools with one False per input dim "
                                  f"(input rank {t.rank}), got {flags!r}")
        bdims = [i for i, f in enumerate(flags) if not f]
        shape = [1 if f else -1 for f in flags]
        attrs = {"shape": tuple(shape), "broadcast_dims": tuple(bdims)}
        (out,) = self._record("broadcast", [t], attrs, [t.dtype], f"{fmt(t)}, is_broadcast_dim={fmt(flags)}")
        return out

    def expand(self, arg, shape):
        b = self._b
        t = b.check_val("expand", "arg", arg, tensor=True)
        shape = b.shape_arg("expand", "shape", shape, allow_neg1=True)
        n = spec_length(shape)
        if n < t.rank:
            raise DefinitionError(f"expand: shape {fmt(shape)} has fewer dims than the input's rank {t.rank}")
        bdims = list(range(n - t.rank, n))
        attrs = {"shape": shape, "broadcast_dims": tuple(bdims)}
        (out,) = self._record("expand", [t], attrs, [t.dtype], f"{fmt(t)}, shape={fmt(shape)}")
        return out

    def reshape(self, arg, new_shape=None, *args, original_shape=None):
        if args:  # reshape(arg, original_shape, new_shape), the older spelling
            original_shape, new_shape = new_shape, args[0]
        b = self._b
        t = b.check_val("reshape", "arg", arg, tensor=True)
        if new_shape is None:
            raise DefinitionTypeError("reshape: needs new_shape")
        if original_shape is not None:
            return self._view(t, original_shape, new_shape, "reshape")
        new_shape = b.shape_arg("reshape", "new_shape", new_shape, allow_neg1=True)
        attrs = {"new_shape": new_shape}
        (out,) = self._record("reshape", [t], attrs, [t.dtype], f"{fmt(t)}, new_shape={fmt(new_shape)}")
        return out

    def view(self, arg, original_shape=None, new_shape=None):
        """The 2022 spelling: sizes before and after are given, -1 allowed in new_shape."""
        b = self._b
        t = b.check_val("view", "arg", arg, tensor=True)
        if original_shape is None or new_shape is None:
            raise DefinitionTypeError("view: needs original_shape= and new_shape=")
        return self._view(t, original_shape, new_shape, "view")

    def _view(self, t, original_shape, new_shape, op):
        b = self._b
        orig = b.check_int_list(op, "original_shape", original_shape)
        new = b.check_int_list(op, "new_shape", new_shape, allow_neg1=True)
        if len(orig) != t.rank:
            raise DefinitionError(f"{op}: original_shape {orig} has rank {len(orig)}, but {t.name} has rank {t.rank}")
        for d, (o, e) in enumerate(zip(orig, t.shape)):
            if e is not None and e != o:
                raise DefinitionError(f"{op}: original_shape {orig} says dim {d} is {o}, but {t.name} has {e}")
        resolved = S.reshape_shape(op, tuple(orig), new)
        # original_shape states the input's sizes; execute checks them (ir.infer)
        attrs = {"new_shape": tuple(resolved), "original_shape": tuple(orig)}
        (out,) = self._record("reshape", [t], attrs, [t.dtype], f"{fmt(t)}, new_shape={fmt(list(resolved))}")
        return out

    def permute(self, arg, dims):
        b = self._b
        t = b.check_val("permute", "arg", arg, tensor=True)
        d = S.norm_dims("permute", "dims", dims, t.rank)
        if len(d) != t.rank:
            raise DefinitionError(f"permute: dims {list(dims)} must list each of the {t.rank} dims once")
        (out,) = self._record("permute", [t], {"dims": d}, [t.dtype], f"{fmt(t)}, dims={fmt(list(d))}")
        return out

    def squeeze(self, arg, dims, *args, squeeze_expanded=False):
        if args:  # squeeze(arg, original_shape, dims), the older spelling
            dims = args[0]
        b = self._b
        t = b.check_val("squeeze", "arg", arg, tensor=True)
        d = tuple(sorted(S.norm_dims("squeeze", "dims", dims, t.rank)))
        if len(d) > t.rank:  # a 0-dim tensor has no dim to squeeze, though norm_dim admits 0
            raise DefinitionError(f"squeeze: dims {list(d)} names more dims than {t.name} has (rank {t.rank})")
        (out,) = self._record("squeeze", [t], {"dims": d}, [t.dtype], f"{fmt(t)}, dims={fmt(list(d))}")
        return out

    def slice(self, arg, start_indices, end_indices, strides=None, manual_normalization=False):
        """Python slicing per dim (negative indices count from the end, clamped).  The
        indices and strides are ints, Int scalars (runtime inputs, sizes) or a Vector;
        ``manual_normalization=True`` (nvFuser: the indices are already normalized)
        makes indices that are not an error (``shapes.slice_shape``)."""
        b = self._b
        t = b.check_val("slice", "arg", arg, tensor=True)
        starts = b.index_arg("slice", "start_indices", start_indices)
        ends = b.index_arg("slice", "end_indices", end_indices)
        steps = (1,) * t.rank if strides is None else b.index_arg("slice", "strides", strides)
        manual = bool(manual_normalization)
        attrs = {"starts": starts, "ends": ends, "steps": steps, "manual": manual}
        sp = (f"{fmt(t)}, start_indices={spell(starts)}, end_indices={spell(ends)}, strides={spell(steps)}"
              + (", manual_normalization=True" if manual else ""))
        (out,) = self._record("slice", [t], attrs, [t.dtype], sp)
        return out

    def pad(self, arg, pad_widths, value=None):
        """nvFuser's pad: (low, high) widths per dim from the last one backwards, ints
        or Int scalars (a negative width crops)."""
        b = self._b
        t = b.check_val("pad", "arg", arg, tensor=True)
        widths = b.index_arg("pad", "pad_widths", pad_widths)
        v = b.fill_value("pad", "value", 0 if value is None else value, t.dtype)
        (out,) = self._record("pad", [t, v], {"pad_widths": widths}, [t.dtype],
                              f"{fmt(t)}, pad_widths={spell(widths)}, value={fmt(v)}")
        return out

    def cat(self, tensors, dim=0, *, manual_padding=False):
        b = self._b
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise DefinitionTypeError(f"cat: tensors must be a non-empty list of tensors, got {tensors!r}")
        ts = [b.check_val("cat", f"tensors[{i}]", t, tensor=True) for i, t in enumerate(tensors)]
        d = S.norm_dim("cat", "dim", dim, ts[0].rank)
        dtype = b.probe_dtype("cat", lambda *xs: __import__("torch").cat(xs, d), ts)
        (out,) = self._record("cat", ts, {"dim": d}, [dtype], f"{fmt(ts)}, dim={d}")
        return out

    # -- creation and random numbers --------------------------------------------
    def full(self, shape, fill_value, dtype):
        b = self._b
        shape = b.shape_arg("full", "shape", shape)
        v = b.check_val("full", "fill_value", fill_value, tensor=False)
        dt = to_datatype(dtype)
        (out,) = self._record("full", [v], {"shape": shape, "dtype": dt}, [dt],
                              f"shape={fmt(shape)}, fill_value={fmt(v)}, dtype={dt!r}")
        return out

    def iota(self, length, start=None, step=None, dtype=DataType.Int):
        b = self._b
        if isinstance(length, ScalarVal) and length.is_constant:
            length = length.value
        if isinstance(length, Val):  # a size, or a runtime Int input
            (length,) = b.shape_arg("iota", "length", [length], vector_ok=False)
        elif not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise DefinitionError(f"iota: length must be an int >= 0 or an Int scalar, got {length!r}")
        dt = to_datatype(dtype)
        zero, one = (0.0, 1.0) if dt.is_float else (0, 1)
        s = b.check_val("iota", "start", zero if start is None else start, tensor=False)
        st = b.check_val("iota", "step", one if step is None else step, tensor=False)
        b.check_constant("iota", "start", s)
        b.check_constant("iota", "step", st, nonzero=True)
        (out,) = self._record("iota", [s, st], {"length": length, "dtype": dt}, [dt],
                              f"{fmt(length)}, {fmt(s)}, {fmt(st)}, dtype={dt!r}")
        return out

    def _rng(self, op, seed, offset):
        b = self._b
        if (seed is None) != (offset is None):
            raise DefinitionError(f"{op}: give both rng_seed and rng_offset, or neither")
        if seed is None:
            return []
        return [b.check_val(op, "rng_seed", seed, tensor=False), b.check_val(op, "rng_offset", offset, tensor=False)]

    def _rng_spelling(self, rng):
        return f", rng_seed={fmt(rng[0])}, rng_offset={fmt(rng[1])}" if rng else ""

    def rand_like(self, arg, *, rng_seed=None, rng_offset=None):
        return self._like("rand_like", "uniform", arg, rng_seed, rng_offset)

    def randn_like(self, arg, *, rng_seed=None, rng_offset=None):
        return self._like("randn_like", "normal", arg, rng_seed, rng_offset)

    def _like(self, op, dist, arg, rng_seed, rng_offset):
        b = self._b
        t = b.check_val(op, "arg", arg, tensor=True)
        if not t.dtype.is_float:
            raise DefinitionError(f"{op}: arg must have a floating dtype, got {t.dtype}")
        rng = self._rng(op, rng_seed, rng_offset)
        # Inputs are [t, rng...]; t gives only the shape, its data is never read.
        attrs = {"dist": dist, "like": True, "dtype": t.dtype, "has_seed": bool(rng)}
        (out,) = self._record(op, [t] + rng, attrs, [t.dtype], fmt(t) + self._rng_spelling(rng))
        return out

    def uniform(self, minval, maxval, shape, dtype=DataType.Float, *, rng_seed=None, rng_offset=None):
        return self._dist("uniform", minval, maxval, shape, dtype, rng_seed, rng_offset, ("minval", "maxval"))

    def normal(self, mean, std, shape, dtype=DataType.Float, *, rng_seed=None, rng_offset=None):
        return self._dist("normal", mean, std, shape, dtype, rng_seed, rng_offset, ("mean", "std"))

    def _dist(self, op, p0, p1, shape, dtype, rng_seed, rng_offset, names):
        b = self._b
        a = b.check_val(op, names[0], p0, tensor=False)
        c = b.check_val(op, names[1], p1, tensor=False)
        shape = b.shape_arg(op, "shape", shape)
        dt = to_datatype(dtype)
        if not dt.is_float:
            raise DefinitionError(f"{op}: dtype must be a floating DataType, got {dt}")
        rng = self._rng(op, rng_seed, rng_offset)
        attrs = {"dist": op, "shape": shape, "dtype": dt, "has_seed": bool(rng)}
        sp = f"{fmt(a)}, {fmt(c)}, shape={fmt(shape)}, dtype={dt!r}" + self._rng_spelling(rng)
        (out,) = self._record(op, [a, c] + rng, attrs, [dt], sp)
        return out

    # -- host ops: torch calls between kernels (ir.host_ops) ---------------------------
    def _host(self, op, tensors, names, attrs, spelling, dtype=None):
        """``dtype``: the result's, for gathers (probing them would index out of range)."""
        b = self._b
        vals = [b.check_val(op, n, t, tensor=True) for t, n in zip(tensors, names)]
        row = OPS[op]
        if dtype is None:
            dtype = b.probe_dtype(op, lambda *xs: row.ref(*xs, **attrs), vals)
        (out,) = self._record(op, vals, attrs, [dtype], spelling)
        return out

    def _index_dim(self, op, arg, index, dim):
        b = self._b
        t = b.check_val(op, "arg", arg, tensor=True)
        i = b.check_val(op, "index", index, tensor=True)
        if i.dtype not in (DataType.Int, DataType.Int32):
            raise DefinitionTypeError(f"{op}: index must be an Int or Int32 tensor, got {i.dtype}")
        d = S.norm_dim(op, "dim", _const(dim), t.rank)
        return self._host(op, [t, i], ["arg", "index"], {"dim": d}, f"{fmt(t)}, {fmt(i)}, dim={d}", t.dtype)

    def matmul(self, arg1, arg2):
        """torch.matmul, run by torch between kernels."""
        return self._host("matmul", [arg1, arg2], ["arg1", "arg2"], {}, f"{fmt(arg1)}, {fmt(arg2)}")

    def linear(self, arg1, arg2, bias=None):
        """torch.nn.functional.linear(input, weight, bias), run by torch between kernels."""
        ts = [arg1, arg2] + ([bias] if bias is not None else [])
        sp = f"{fmt(arg1)}, {fmt(arg2)}" + (f", bias={fmt(bias)}" if bias is not None else "")
        return self._host("linear", ts, ["input", "weight", "bias"], {}, sp)

    def index_select(self, arg, index, dim):
        return self._index_dim("index_select", arg, index, dim)

    def gather(self, arg1, index, dim):
        return self._index_dim("gather", arg1, index, dim)


def _const(x):
    """A Python value from a constant scalar (nvFuser scripts pass define_scalar results)."""
    if isinstance(x, ScalarVal):
        if not x.is_constant:
            raise DefinitionError(f"{x.name}: this argument must be a constant, not a runtime scalar")
        return x.value
    return x


def _make_elementwise(name, arity):
    names = {1: ["arg"], 2: ["lhs", "rhs"]}[arity]

    def builder(self, *args):
        if len(args) != arity:
            raise DefinitionTypeError(f"{name}: takes {arity} argument(s) ({', '.join(names)}), got {len(args)}")
        return self._elementwise(name, list(args), names)

    builder.__name__ = name
    builder.__doc__ = f"Elementwise {name}, with PyTorch's dtype promotion and broadcasting."
    return builder


for _row in OPS.values():
    if _row.kind in (OpKind.UNARY, OpKind.BINARY):
        setattr(Operators, _row.name, _make_elementwise(_row.name, 1 if _row.kind is OpKind.UNARY else 2))


def _make_reduction(name):
    def builder(self, arg, dims=None, keepdim=False, dtype=DataType.Null, *, axes=None, dim=None):
        return self._reduction(name, arg, dims, keepdim, dtype, axes, dim)

    builder.__name__ = name
    builder.__doc__ = f"Reduction {name} over ``dims`` (every dim when none are given), as the op table defines it."
    return builder


# Reductions without a method of their own above: sum's signature, from the op table.
for _row in OPS.values():
    if _row.kind is OpKind.REDUCTION and not _row.reduction.welford and not hasattr(Operators, _row.name):
        setattr(Operators, _row.name, _make_reduction(_row.name))


def _wrap_negative(dims, rank: int):
    """Negative dims count from the end of ``rank`` dims, as nvFuser wraps them; other
    entries are left for the caller's check."""
    if not isinstance(dims, (list, tuple)):
        return dims
    return [d + rank if isinstance(d, int) and not isinstance(d, bool) and -rank <= d < 0 else d for d in dims]
