"""Shape rules, shared by definition time and execute time.

Each rule maps input shapes to output shapes.  At definition time an extent may be
``None`` (symbolic); the rules then check what they can and leave the rest to
``concretize``, which runs the very same rules on the concrete sizes of the inputs
given to ``execute``.  One set of rules means one set of error messages.
"""
from __future__ import annotations

import math

from ..errors import DefinitionError, DefinitionTypeError

Shape = tuple  # of int | None


def contiguous_strides(sizes) -> tuple:
    """Row-major strides of ``sizes`` (a size-0 or size-1 dim counts as 1, as torch's)."""
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def norm_dim(op: str, arg: str, d: int, rank: int) -> int:
    """``d`` counted from 0; a dim that is not an int (e.g. ``2.0``) is the wrong kind of
    argument (a TypeError, as nvFuser's bindings raise), one out of range a wrong value."""
    if not isinstance(d, int) or isinstance(d, bool):
        raise DefinitionTypeError(f"{op}: {arg} must be ints, got {type(d).__name__} {d!r}")
    if not -rank <= d < max(rank, 1) or (rank == 0 and d not in (0, -1)):
        raise DefinitionError(f"{op}: {arg} {d} is out of range for a tensor of rank {rank} "
                              f"(expected {-rank} <= dim < {rank})")
    return d % rank if rank else 0


def norm_dims(op: str, arg: str, dims, rank: int) -> tuple[int, ...]:
    if isinstance(dims, int):
        dims = [dims]
    if not isinstance(dims, (list, tuple)):
        raise DefinitionTypeError(f"{op}: {arg} must be a list of ints, got {type(dims).__name__} {dims!r}")
    out = [norm_dim(op, arg, d, rank) for d in dims]
    if len(set(out)) != len(out):
        raise DefinitionError(f"{op}: {arg} {list(dims)} repeats a dimension (rank {rank})")
    return tuple(out)


def broadcast_shapes(op: str, *shapes: Shape) -> Shape:
    """PyTorch broadcasting over shapes whose extents may be unknown (None)."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        ext = 1
        for s in shapes:
            j = i - (rank - len(s))
            if j < 0:
                continue
            e = s[j]
            if e == 1:
                continue
            if ext == 1 or ext is None:
                ext = e if ext == 1 else (e if e is not None else None)
            elif e is not None and e != ext:
                shown = " and ".join(str(list(x)) for x in shapes)
                raise DefinitionError(f"{op}: shapes {shown} do not broadcast (dim {i}: {ext} vs {e})")
        out.append(ext)
    return tuple(out)


def numel(shape: Shape):
    if any(e is None for e in shape):
        return None
    return math.prod(shape)


def reduce_shape(shape: Shape, dims, keepdim: bool) -> Shape:
    if keepdim:
        return tuple(1 if i in dims else e for i, e in enumerate(shape))
    return tuple(e for i, e in enumerate(shape) if i not in dims)


def broadcast_in_dim_shape(op: str, shape: Shape, out_shape, bdims) -> Shape:
    """nvFuser's broadcast_in_dim: input dim i becomes output dim bdims[i]; every other
    output dim is new.  A mapped input extent must be 1 or equal the output's; -1 in
    the output shape keeps the input's extent."""
    if len(bdims) != len(shape):
        raise DefinitionError(f"{op}: broadcast_dims {list(bdims)} must have one entry per input dim "
                              f"(input rank {len(shape)})")
    rank = len(out_shape)
    for d in bdims:
        if not isinstance(d, int) or not 0 <= d < rank:
            raise DefinitionError(f"{op}: broadcast_dims entry {d!r} is out of range for output rank {rank}")
    if list(bdims) != sorted(set(bdims)):
        raise DefinitionError(f"{op}: broadcast_dims {list(bdims)} must be strictly increasing")
    out = []
    for o, e in enumerate(out_shape):
        if o in bdims:
            i = bdims.index(o)
            ie = shape[i]
            if e == -1:
                out.append(ie)
                continue
            if ie is not None and ie != 1 and e is not None and ie != e:
                raise DefinitionError(f"{op}: input dim {i} has extent {ie}, which cannot broadcast to "
                                      f"output dim {o} of extent {e} (expected {e} or 1)")
            out.append(e)
        else:
            # A new dim of extent -1 is a broadcast dim (extent 1) that a consumer's
            # broadcasting expands, as with nvFuser's symbolic broadcast dims.
            out.append(1 if e == -1 else e)
    return tuple(out)


def reshape_shape(op: str, shape: Shape, new_shape) -> Shape:
    new_shape = list(new_shape)
    if sum(1 for e in new_shape if e == -1) > 1:
        raise DefinitionError(f"{op}: new_shape {new_shape} has more than one -1")
    for e in new_shape:
        if e is not None and (not isinstance(e, int) or isinstance(e, bool) or e < -1):
            raise DefinitionError(f"{op}: new_shape entries must be ints >= -1, got {e!r}")
    if None in new_shape:  # an extent the definition does not know: execute checks the sizes
        return tuple(None if e is None or e == -1 else e for e in new_shape)
    n = numel(shape)
    known = math.prod(e for e in new_shape if e != -1)
    if -1 in new_shape:
        if n is None:
            return tuple(None if e == -1 else e for e in new_shape)
        if known == 0 or n % known:
            raise DefinitionError(f"{op}: cannot reshape {list(shape)} ({n} elements) to {new_shape}")
        return tuple(n // known if e == -1 else e for e in new_shape)
    if n is not None and n != known:
        raise DefinitionError(f"{op}: cannot reshape {list(shape)} ({n} elements) to {new_shape} "
                              f"({known} elements)")
    return tuple(new_shape)


def reshape_groups(in_shape, out_shape) -> list[tuple[tuple, tuple]] | None:
    """A reshape of concrete shapes as independent groups ``(input dims, output dims)``
    of equal element counts, in order and each as small as it can be: [64, 128, 12, 64]
    -> [64, 128, 768] is ((0,), (0,)), ((1,), (1,)), ((2, 3), (2,)).  Size-1 dims
    belong to no group (their coordinate is 0).  None when an extent is 0."""
    if 0 in in_shape or 0 in out_shape:
        return None
    ins = [d for d, s in enumerate(in_shape) if s != 1]
    outs = [d for d, s in enumerate(out_shape) if s != 1]
    groups, i, o = [], 0, 0
    while i < len(ins) and o < len(outs):
        gi, go = [ins[i]], [outs[o]]
        pi, po = in_shape[ins[i]], out_shape[outs[o]]
        i, o = i + 1, o + 1
        while pi != po:
            if pi < po:
                pi *= in_shape[ins[i]]
                gi.append(ins[i])
                i += 1
            else:
                po *= out_shape[outs[o]]
                go.append(outs[o])
                o += 1
        groups.append((tuple(gi), tuple(go)))
    return groups


def slice_shape(op: str, shape: Shape, starts, ends, steps, manual=False) -> tuple[Shape, list]:
    """Python slicing semantics (negative indices count from the end, then clamped),
    one (start, end, step) per dim; an index the definition does not know yet (None)
    leaves that dim's extent unknown.  ``manual`` is nvFuser's manual_normalization:
    the indices are said to be normalized already, so one that is not (negative,
    past the extent, an end before its start) is an error rather than a guess, since
    nvFuser would read out of bounds there; an end past the extent of a slice from 0
    is clamped, as nvFuser clamps it."""
    rank = len(shape)
    if not (len(starts) == len(ends) == len(steps) == rank):
        raise DefinitionError(f"{op}: start_indices, end_indices and strides need {rank} entries each "
                              f"(got {len(starts)}, {len(ends)}, {len(steps)})")
    out, norm = [], []
    for d, (e, s, t, st) in enumerate(zip(shape, starts, ends, steps)):
        if st is not None and (not isinstance(st, int) or st <= 0):
            raise DefinitionError(f"{op}: strides must be positive ints, got {st!r} at dim {d}")
        if e is None or s is None or t is None or st is None:
            out.append(None)
            norm.append((s, t, st))
            continue
        if manual:
            t = e if s == 0 and t > e else t
            if not 0 <= s <= t <= e:
                raise DefinitionError(f"{op}: with manual_normalization the indices must be normalized "
                                      f"(0 <= start <= end <= extent), got start {s}, end {t} at dim {d} "
                                      f"of extent {e}")
        a, b, c = slice(s, t, st).indices(e)
        out.append(max(0, (b - a + c - 1) // c))
        norm.append((a, b, c))
    return tuple(out), norm


def pad_shape(op: str, shape: Shape, pad_widths) -> Shape:
    """nvFuser's pad: (low, high) pairs from the last dim backwards; a negative width
    crops.  A width the definition does not know yet (None) leaves the dim unknown."""
    if len(pad_widths) % 2 or len(pad_widths) // 2 > len(shape):
        raise DefinitionError(f"{op}: pad_widths {list(pad_widths)} must hold a (low, high) pair per padded dim, "
                              f"at most {len(shape)} pairs")
    out = list(shape)
    for k in range(len(pad_widths) // 2):
        d = len(shape) - 1 - k
        lo, hi = pad_widths[2 * k], pad_widths[2 * k + 1]
        if lo is None or hi is None:
            out[d] = None
        elif out[d] is not None:
            out[d] = out[d] + lo + hi
            if out[d] < 0:
                raise DefinitionError(f"{op}: padding ({lo}, {hi}) makes dim {d} negative")
    return tuple(out)


def cat_shape(op: str, shapes, dim: int) -> Shape:
    rank = len(shapes[0])
    for s in shapes:
        if len(s) != rank:
            raise DefinitionError(f"{op}: all tensors must have the same rank, got {[list(x) for x in shapes]}")
    out = []
    for d in range(rank):
        if d == dim:
            ext = [s[d] for s in shapes]
            out.append(None if None in ext else sum(ext))
        else:
            known = {s[d] for s in shapes if s[d] is not None}
            if len(known) > 1:
                raise DefinitionError(f"{op}: tensors differ in dim {d} ({sorted(known)}), which is not the cat dim {dim}")
            out.append(known.pop() if known and all(s[d] is not None for s in shapes) else (known.pop() if known else None))
    return tuple(out)
