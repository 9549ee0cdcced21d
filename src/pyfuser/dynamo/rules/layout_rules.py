"""Rules for views, copies, concatenation, padding, creation and random numbers.

Views and identities compute nothing (``view_rule``): a region of them alone stays
in ATen, and the partitioner hands them back to ATen at a region's edges.
"""
from __future__ import annotations

import torch
from torch.fx.node import Node

from ...ir.dtypes import DataType
from .rulebook import identity_rule, meta, rule, view_rule

# --- views and layout ------------------------------------------------------------------


@view_rule("view.default", "_unsafe_view.default", "reshape.default", ops=["reshape"])
def _reshape(t, n, a):
    return t.ops.reshape(a.self, t.shape(n))


@view_rule("permute.default", ops=["permute"])
def _permute(t, n, a):
    return t.ops.permute(a.self, [d % max(a.self.rank, 1) for d in a.dims])


@view_rule("transpose.int", ops=["permute"])
def _transpose(t, n, a):
    r = a.self.rank
    dims = list(range(r))
    if r:
        i, j = a.dim0 % r, a.dim1 % r
        dims[i], dims[j] = dims[j], dims[i]
    return t.ops.permute(a.self, dims) if dims != list(range(r)) else a.self


@view_rule("t.default", ops=["permute"])
def _t(t, n, a):
    return t.ops.permute(a.self, [1, 0]) if a.self.rank == 2 else a.self


@view_rule("unsqueeze.default", ops=["broadcast_in_dim"])
def _unsqueeze(t, n, a):
    shape = t.shape(n)
    d = a.dim % len(shape)
    return t.ops.broadcast_in_dim(a.self, shape=shape, broadcast_dims=[i for i in range(len(shape)) if i != d])


@view_rule("squeeze.dim", "squeeze.dims", "squeeze.default", ops=["squeeze"])
def _squeeze(t, n, a):
    x = a.self
    dims = getattr(a, "dim", None)
    dims = list(range(x.rank)) if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    dims = sorted({d % x.rank for d in dims if x.rank and x.shape[d % x.rank] == 1})
    return t.ops.squeeze(x, dims) if dims else x


@view_rule("expand.default", ops=["broadcast_in_dim"])
def _expand(t, n, a):
    shape = t.shape(n)
    x = a.self
    if list(x.shape) == shape:
        return x
    return t.ops.broadcast_in_dim(x, shape=shape, broadcast_dims=list(range(len(shape) - x.rank, len(shape))))


def _int_bounds(n, a):
    symbolic = any(isinstance(getattr(a, k, None), (Node, torch.SymInt)) for k in ("start", "end", "index"))
    return "symbolic bounds" if symbolic else None


def _slice_check(n, a):
    """A slice's start and end may be sizes (SymInts: ``cos[:seq]`` at a variable
    length), which pyfuser's slice takes as runtime scalars and clamps as ATen does;
    its step must be an int."""
    return "symbolic step" if isinstance(a.step, (Node, torch.SymInt)) else None


def _static_dim(n, a):
    """The padding rules below compute their widths from the size of the dim they pad
    and int bounds: that size must be concrete; the other dims may be symbolic (RoPE's
    halves at a variable sequence length)."""
    v = meta(n)
    if not isinstance(v.shape[a.dim % v.dim()], int) and not _whole(a):
        return "symbolic size of the padded dim"
    return _int_bounds(n, a)


def _whole(a) -> bool:
    """A slice_backward of a slice that kept its whole dim (``x[:, 1:]``'s slice of dim
    0, ``end`` past any size): the gradient as it is."""
    start, end = getattr(a, "start", None), getattr(a, "end", None)
    return (start is None or (isinstance(start, int) and start == 0)) and isinstance(end, int) \
        and end >= 2 ** 62 and getattr(a, "step", 1) == 1


@view_rule("slice.Tensor", ops=["slice"], check=_slice_check)
def _slice(t, n, a):
    x = a.self
    d = a.dim % x.rank
    if isinstance(a.start, (int, type(None))) and isinstance(a.end, (int, type(None))):
        start, end, step = t.slice_bounds(x, d, a.start, a.end, a.step)
        if (start, end, step) == (0, x.shape[d], 1):
            return x
    else:  # a size: the fusion clamps it when it runs
        start, end, step = 0 if a.start is None else a.start, t.WHOLE if a.end is None else a.end, a.step
    starts, ends, steps = [0] * x.rank, t.ends(x), [1] * x.rank
    starts[d], ends[d], steps[d] = start, end, step
    return t.ops.slice(x, starts, ends, steps)


@view_rule("select.int", ops=["slice", "squeeze"], check=_int_bounds)
def _select(t, n, a):
    x = a.self
    d = a.dim % x.rank
    i = a.index if x.shape[d] is None else a.index % x.shape[d]  # symbolic: -1 is [-1:]
    starts, ends = [0] * x.rank, t.ends(x)
    starts[d], ends[d] = i, (i + 1) or t.WHOLE
    return t.ops.squeeze(t.ops.slice(x, starts, ends, [1] * x.rank), [d])


identity_rule("alias.default", "detach.default", aten_view=True)
identity_rule("lift_fresh_copy.default", aten_view=False)


@rule("clone.default", ops=["set"], compute=False)
def _clone(t, n, a):
    """A copy (``ops.set``): a region that is only a clone of a transposed tensor
    (attention heads made contiguous for a bmm) becomes one copy kernel."""
    return t.ops.set(a.self)


def is_layout_copy(node) -> bool:
    """A copy of a non-contiguous tensor, worth a kernel of its own (see partition): a
    clone, or a ``cat`` of one tensor and empty legacy operands (a key/value cache's
    first update: ``cat([tensor([]), keys])`` is a copy of the transposed keys)."""
    if node.op != "call_function":
        return False
    if str(node.target) == "aten.clone.default":
        x = meta(node.args[0])
    elif str(node.target) == "aten.cat.default":
        kept = [meta(a) for a in node.args[0] if not _legacy_empty(meta(a))]
        x = kept[0] if len(kept) == 1 else None
    else:
        return False
    return isinstance(x, torch.Tensor) and not x.is_contiguous() and x.numel() >= LAYOUT_COPY_MIN_NUMEL


def _legacy_empty(v) -> bool:
    """A 1-D tensor of no elements: ``torch.cat`` skips it whatever the others' shapes
    (the ``torch.tensor([])`` a key/value cache starts from)."""
    return v.dim() == 1 and v.shape[0] == 0


def _cat_check(n, a):
    if len({meta(x).dtype for x in n.args[0]}) != 1:
        return "mixed dtypes"
    if all(_legacy_empty(meta(x)) for x in n.args[0]):
        return "only empty operands"
    return None


@rule("cat.default", ops=["cat", "set"], check=_cat_check)
def _cat(t, n, a):
    """The empty legacy operands dropped (ATen skips them; ``dim`` counts in the rank of
    the others); one operand left is copied (``ops.set``: ATen's result is a new
    tensor, so the kernel writes it rather than the region cloning its input after)."""
    kept = [x for x, node in zip(a.tensors, n.args[0]) if not _legacy_empty(meta(node))]
    if len(kept) == 1:
        return t.ops.set(kept[0])
    return t.ops.cat(kept, a.dim)


def _slice_backward_check(n, a):
    return _static_dim(n, a) or (None if a.step == 1 else f"step={a.step}")


@rule("slice_backward.default", ops=["pad"], check=_slice_backward_check)
def _slice_backward(t, n, a):
    """The gradient of ``x[..., start:end]``: zeros of the input's size with the slice's
    gradient at ``start``: a pad of ``start`` zeros before and the rest after, along
    ``dim`` (RoPE's ``rotate_half`` halves, added back together in one region)."""
    sizes = t.shape(n)
    d = a.dim % len(sizes)
    if _whole(a):
        return a.grad_output
    start, end, _ = slice(a.start, a.end, 1).indices(sizes[d])
    end = max(end, start)
    widths = [0, 0] * (len(sizes) - 1 - d) + [start, sizes[d] - end]
    return t.ops.pad(a.grad_output, widths, 0) if any(widths) else a.grad_output


@rule("select_backward.default", ops=["broadcast_in_dim", "pad"], check=_static_dim)
def _select_backward(t, n, a):
    """The gradient of ``x.select(dim, index)``: the gradient given back its dim, then
    padded with zeros to the input's size (a [CLS] token read from the sequence)."""
    sizes = t.shape(n)
    d = a.dim % len(sizes)
    i = a.index % sizes[d]
    g = t.ops.broadcast_in_dim(a.grad_output, shape=[1 if k == d else s for k, s in enumerate(sizes)],
                               broadcast_dims=[k for k in range(len(sizes)) if k != d])
    widths = [0, 0] * (len(sizes) - 1 - d) + [i, sizes[d] - 1 - i]
    return t.ops.pad(g, widths, 0) if any(widths) else g


def _broadcast_cast(t, n, x):
    """``x`` (a tensor) broadcast to ``n``'s shape, as ATen aligns trailing dims, in its dtype."""
    shape, out = t.shape(n), t.dtype(n)
    if x.dtype is not out:
        x = t.ops.cast(x, out)
    if list(x.shape) != shape:
        x = t.ops.broadcast_in_dim(x, shape=shape, broadcast_dims=list(range(len(shape) - x.rank, len(shape))))
    return x


def _copy_check(n, a):
    src, dst = meta(n.args[1]), meta(n.args[0])
    return "changes device" if src.device != dst.device else None


@rule("copy.default", ops=["cast", "broadcast_in_dim"], check=_copy_check)
def _copy(t, n, a):
    """Functional ``self.copy_(src)``: ``src`` in ``self``'s dtype and shape."""
    return _broadcast_cast(t, n, a.src)


@rule("fill.Tensor", ops=["cast", "broadcast_in_dim"])
def _fill_tensor(t, n, a):
    """Functional ``self.fill_(value)`` with a 0-d tensor value."""
    return _broadcast_cast(t, n, a.value)


def _fill_value(dt, value):
    return bool(value) if dt is DataType.Bool else (float(value) if dt.is_float else int(value))


def _like_check(n, a):
    if getattr(a, "memory_format", None) not in (None, torch.preserve_format, torch.contiguous_format):
        return f"memory_format={a.memory_format}"
    return _creation_check(n, a)


@rule("full_like.default", ops=["full"], check=_like_check)
def _full_like(t, n, a):
    return t.ops.full(t.shape(n), _fill_value(t.dtype(n), a.fill_value), t.dtype(n))


@rule("fill.Scalar", ops=["full"])
def _fill_scalar(t, n, a):
    return t.ops.full(t.shape(n), _fill_value(t.dtype(n), a.value), t.dtype(n))


def _pad_check(n, a):
    return "negative padding" if any(p < 0 for p in a.pad) else None


rule("constant_pad_nd.default", ops=["pad"], check=_pad_check)(
    lambda t, n, a: t.ops.pad(a.self, list(a.pad), a.value))


# --- creation and random numbers ----------------------------------------------------


def _creation_check(n, a):
    layout = getattr(a, "layout", None)
    return "changes layout" if layout not in (None, torch.strided) else None


@rule("full.default", ops=["full"], check=_creation_check)
def _full(t, n, a):
    dt = t.dtype(n)
    value = a.fill_value
    value = bool(value) if dt is DataType.Bool else (float(value) if dt.is_float else int(value))
    return t.ops.full(t.shape(n), value, dt)


@rule("scalar_tensor.default", ops=["full"], check=_creation_check)
def _scalar_tensor(t, n, a):
    dt = t.dtype(n)
    value = bool(a.s) if dt is DataType.Bool else (float(a.s) if dt.is_float else int(a.s))
    return t.ops.full([], value, dt)


LAYOUT_COPY_MIN_NUMEL = 1 << 16


def _arange_check(n, a):
    if meta(n).dtype not in (torch.int64, torch.int32):
        return "non-integer arange"  # float steps accumulate differently
    return _creation_check(n, a)


@rule("arange.default", "arange.start", "arange.start_step", ops=["iota"], check=_arange_check)
def _arange(t, n, a):
    return t.ops.iota(t.shape(n)[0], int(getattr(a, "start", 0)), int(getattr(a, "step", 1)), t.dtype(n))


def _gather_check(n, a):
    if not meta(n.args[0]).dtype.is_floating_point:
        return "gather of a non-float tensor"  # pyfuser reads float gathers in kernels only
    if getattr(a, "sparse_grad", False):
        return "sparse gradient"
    return None


@rule("gather.default", ops=["gather"], check=_gather_check)
def _gather(t, n, a):
    """Read inside the kernel at the index's coordinates (NaN where out of range)."""
    return t.ops.gather(a.self, a.index, a.dim)


def _random_check(n, a):
    if not meta(n).dtype.is_floating_point:
        return "non-float dtype"
    return _creation_check(n, a)


rule("rand_like.default", "rand.default", ops=["uniform"], check=_random_check)(
    lambda t, n, a: t.ops.uniform(0.0, 1.0, t.shape(n), t.dtype(n)))
rule("randn_like.default", "randn.default", ops=["normal"], check=_random_check)(
    lambda t, n, a: t.ops.normal(0.0, 1.0, t.shape(n), t.dtype(n)))
