"""The reference executor: runs the IR with torch ops, one expr at a time.

This is the definition of pyfuser's semantics.  Every generated kernel is tested
against it; it never runs in ``execute`` (except through ``fd.validate``), so it can
stay short and obviously right rather than fast.  Extents (sizes as values) are not
run here: binding the inputs evaluates them (``ir.concretize``, ``ir.extents``), and
their values come in with the binding.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F

from .compat import has_internal_overlap
from .errors import InputError
from .ir.concretize import Binding, bind
from .ir.extents import scalar_result
from .ir.ops import OPS, OpKind
from .ir.infer import pad_widths, slice_bounds
from .ir.values import Expr, FusionIR, ScalarVal
from .rng import reference_random


def run_expr(e: Expr, args: list, binding: Binding, rng_state=None):
    """Evaluate one expr on torch tensors / Python numbers; returns a list of results."""
    row = OPS[e.op]
    a = e.attrs
    out_shapes = [binding.shapes.get(o) for o in e.outputs]
    dev = binding.device
    if row.kind in (OpKind.UNARY, OpKind.BINARY, OpKind.TERNARY, OpKind.CAST):
        if not any(isinstance(x, torch.Tensor) for x in args):  # scalar arithmetic
            return [scalar_result(e, args)]
        return [_elementwise(e, args)]
    if row.kind is OpKind.REDUCTION:
        x = args[0]
        if e.op == "var":
            return [row.ref(x, list(a["dims"]), a["correction"], a["keepdim"])]
        dt = a["dtype"].torch if a.get("dtype") else None
        return [row.ref(x, list(a["dims"]), a["keepdim"], dt)]
    if row.kind is OpKind.VAR_MEAN:
        return list(row.ref(args[0], list(a["dims"]), a["correction"], a["keepdim"]))
    if row.kind is OpKind.BROADCAST_IN_DIM:
        x, shape = args[0], out_shapes[0]
        view = [1] * len(shape)
        for i, d in enumerate(a["broadcast_dims"]):
            view[d] = x.shape[i]
        return [x.reshape(view).expand(shape)]
    if row.kind is OpKind.RESHAPE:
        return [args[0].reshape(out_shapes[0])]
    if row.kind is OpKind.PERMUTE:
        return [args[0].permute(a["dims"])]
    if row.kind is OpKind.SQUEEZE:
        x = args[0]
        return [x.squeeze(a["dims"]) if a["dims"] else x]
    if row.kind is OpKind.SLICE:
        _, norm = slice_bounds(e, tuple(args[0].shape), binding.values.__getitem__)
        return [args[0][tuple(slice(*n) for n in norm)]]
    if row.kind is OpKind.PAD:
        x, v = args
        w = list(pad_widths(e, binding.values.__getitem__))
        if isinstance(v, complex):  # F.pad takes a real value: pad each part with its own
            return [torch.complex(F.pad(x.real, w, value=v.real), F.pad(x.imag, w, value=v.imag))]
        return [F.pad(x, w, value=v)]
    if row.kind is OpKind.CAT:
        return [torch.cat(args, a["dim"])]
    if row.kind is OpKind.FULL:
        return [torch.full(out_shapes[0], args[0], dtype=a["dtype"].torch, device=dev)]
    if row.kind is OpKind.IOTA:
        start, step = args
        dt = a["dtype"].torch
        return [(torch.arange(out_shapes[0][0], device=dev, dtype=dt) * step + start).to(dt)]
    if row.kind in (OpKind.HOST, OpKind.GATHER):
        # attributes given as scalars (topk's k, sdpfa's dropout_p): constants, or runtime
        # scalars that the expr also reads as inputs, whose values come with the args
        given = {id(v): x for v, x in zip(e.inputs, args)}
        named = {id(x) for x in a.values() if isinstance(x, ScalarVal)}
        a = {k: (given[id(x)] if id(x) in given else x.value) if isinstance(x, ScalarVal) else x
             for k, x in a.items()}
        r = row.ref(*[x for v, x in zip(e.inputs, args) if id(v) not in named], **a)
        return list(r) if isinstance(r, tuple) else [r]
    if row.kind is OpKind.RANDOM:
        return [_random(e, args, out_shapes[0], dev, rng_state)]
    raise AssertionError(f"reference: no implementation for {e.op}")


_HALF = (torch.float16, torch.bfloat16)


def _elementwise(e: Expr, args):
    row = OPS[e.op]
    if e.op == "cast":
        return args[0].to(e.attrs["dtype"].torch)
    if e.op == "where" and not any(isinstance(x, torch.Tensor) for x in args[1:]):
        # Two scalar values: nvFuser casts both to the result's dtype (frontend ``where``),
        # where eager would give its default dtype for Python numbers.
        out = e.outputs[0].dtype.torch
        args = [args[0]] + [torch.tensor(x, dtype=out, device=args[0].device) for x in args[1:]]
    args = _ints_rounded_to_16_bits(e, row, args)
    if any(type(x) is float for x in args) and any(isinstance(x, torch.Tensor) and x.dtype in _HALF for x in args):
        # nvFuser leaves a floating-point scalar meeting 16-bit tensors uncast (its
        # optionalCast): the op runs in fp32 with the scalar's own value and only the
        # result is rounded.  Eager rounds the scalar first (fp16 x + 70000.0 is inf
        # there, 60000 here where x = -10000).
        wide = [x.float() if isinstance(x, torch.Tensor) and x.dtype in _HALF else x for x in args]
        return _apply(e, row, wide).to(e.outputs[0].dtype.torch)
    return _apply(e, row, args)


def _ints_rounded_to_16_bits(e: Expr, row, args):
    """An integer scalar of an op computed in fp16/bf16 is cast to that dtype first, as
    nvFuser's promoteValues casts it (and as the kernels do): 70000 is inf in fp16, so
    fp16 ``0.5 * 70000`` is inf.  Eager rounds it for add and sub but multiplies and
    divides with the unrounded number (docs/SEMANTICS.md)."""
    if not any(type(x) is int for x in args):
        return args
    if row.compute == "args":
        common = torch.result_type(*args[:2]) if len(args) >= 2 else None
        for x in args[2:]:
            common = torch.result_type(torch.empty((), dtype=common), x)
    else:
        common = e.outputs[0].dtype.torch
    if common not in _HALF:
        return args
    return [float(torch.tensor(x).to(torch.float32).to(common)) if type(x) is int else x for x in args]


def _apply(e: Expr, row, args):
    if e.op == "clamp":
        it = iter(args[1:])
        lo = next(it) if e.attrs["has_min"] else None
        hi = next(it) if e.attrs["has_max"] else None
        return row.ref(args[0], lo, hi)
    return row.ref(*args)


def _random(e: Expr, args, shape, dev, rng_state):
    a = e.attrs
    if a.get("like"):
        p0, p1 = 0.0, 1.0
        rest = args[1:]
    else:
        p0, p1 = float(args[0]), float(args[1])
        rest = args[2:]
    if a["has_seed"]:
        seed, offset = int(rest[0]), int(rest[1])
    elif rng_state is not None:
        seed, offset = rng_state(e)
    else:
        raise ValueError(f"{e.op}: the reference executor needs rng_seed/rng_offset (or the runtime's RNG state)")
    return reference_random(a["dist"], shape, p0, p1, seed, offset, a["dtype"].torch, dev)


def run_reference(ir: FusionIR, inputs, device=None, rng_state=None, binding: Binding | None = None):
    """Run the whole fusion; ``rng_state(expr) -> (seed, offset)`` supplies random state
    for random ops defined without rng_seed/rng_offset."""
    binding = binding or bind(ir, inputs, device)
    env = dict(binding.values)
    for e in ir.live_exprs():
        args = [env[v] for v in e.inputs]
        outs = run_expr(e, args, binding, rng_state)
        for o, r in zip(e.outputs, outs):
            env[o] = r
    outs = [env[o] if not isinstance(env[o], (int, float, bool)) else torch.tensor(env[o]) for o in ir.outputs]
    return write_aliases(ir, inputs, outs)


def write_aliases(ir: FusionIR, inputs, outs: list) -> list:
    """nvFuser's in-place outputs (``add_output(out, alias)``): each aliased output is
    copied into its input, through the input's strides, and left out of the returned
    list.  The copies come after the whole fusion ran, and an output that shares
    memory with an input is cloned before any copy, so the results are those of a
    fusion that read all its inputs first, then wrote.  As in nvFuser, an aliased
    value that is also a plain output is returned as its input (the same storage)."""
    if not ir.output_aliases:
        return outs
    storages = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    writes = []
    for pos, alias in ir.output_aliases.items():
        target, value = inputs[ir.inputs.index(alias)], outs[pos]
        if tuple(value.shape) != tuple(target.shape):
            raise InputError(f"add_output({ir.outputs[pos].name}, {alias.name}): the output's shape "
                             f"{list(value.shape)} differs from the input's {list(target.shape)}")
        if has_internal_overlap(target):  # an expanded input: one element, many places
            raise InputError(f"add_output({ir.outputs[pos].name}, {alias.name}): the input given for "
                             f"{alias.name} has overlapping elements (strides {list(target.stride())}), so it "
                             f"cannot receive an output")
        if value.untyped_storage().data_ptr() in storages:
            value = value.clone()
        writes.append((target, value))
    for target, value in writes:
        target.copy_(value)
    # A value also added as a plain output is returned as the input it was written into
    written = {id(ir.outputs[pos]): target for pos, (target, _) in zip(ir.output_aliases, writes)}
    return [written.get(id(ir.outputs[pos]), o) for pos, o in enumerate(outs) if pos not in ir.output_aliases]
