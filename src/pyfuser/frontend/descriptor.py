"""A tensor's layout as nvFuser's ``define_tensor`` spells it: ``contiguity`` and
``stride_order`` from sizes and strides (``compute_tensor_descriptor``, which
``fd.from_pytorch`` uses), and the conversion of that contiguity to one flag per
logical dim, which is how pyfuser keeps it (``TensorVal.contiguity``).

nvFuser lists contiguity in allocation order, outermost first: entry j describes the
j-th outermost dim, not dim j.  The two agree for row-major tensors (no stride order).

The layout rule: dims with stride 0 (expanded) keep their logical position; every
other dim is ordered by stride, outermost first, equal strides in logical order.
A broadcast dim (size 1 or stride 0) has contiguity None; any other dim is
contiguous when its stride is the extent times the stride of the next
non-broadcast dim inside it (1 for the innermost).  ``stride_order[d]`` is dim d's
place counted from the innermost (0).
"""
from __future__ import annotations

from ..errors import DefinitionError


def compute_tensor_descriptor(sizes, strides) -> tuple[list, list]:
    """(contiguity in allocation order, stride_order per dim) for a tensor of these
    ``sizes`` and ``strides``, as nvFuser's function of that name gives them."""
    sizes, strides = list(sizes), list(strides)
    if len(sizes) != len(strides):
        raise DefinitionError(f"compute_tensor_descriptor: sizes {sizes} and strides {strides} must have the "
                              f"same number of dims")
    if any(s < 0 for s in strides):
        raise DefinitionError(f"compute_tensor_descriptor: negative strides are not supported, got {strides}")
    rank = len(sizes)
    outer_first = sorted((d for d in range(rank) if strides[d] != 0), key=lambda d: -strides[d])  # stable
    for d in range(rank):
        if strides[d] == 0:
            outer_first.insert(d, d)
    broadcast = [sizes[d] == 1 or strides[d] == 0 for d in range(rank)]
    contiguity = []
    for j, d in enumerate(outer_first):
        if broadcast[d]:
            contiguity.append(None)
            continue
        inner = next((e for e in outer_first[j + 1:] if not broadcast[e]), None)
        contiguity.append(strides[d] == (1 if inner is None else strides[inner] * sizes[inner]))
    stride_order = [0] * rank
    for j, d in enumerate(outer_first):
        stride_order[d] = rank - 1 - j
    return contiguity, stride_order


def allocation_order(rank: int, stride_order) -> list[int]:
    """The dims outermost first: by stride order, or row-major when there is none."""
    if stride_order is None:
        return list(range(rank))
    return sorted(range(rank), key=lambda d: -stride_order[d])


def contiguity_per_dim(contiguity, stride_order) -> tuple:
    """nvFuser's contiguity (allocation order) as one entry per logical dim."""
    order = allocation_order(len(contiguity), stride_order)
    per_dim = [None] * len(contiguity)
    for flag, d in zip(contiguity, order):
        per_dim[d] = flag
    return tuple(per_dim)


def contiguity_in_allocation_order(per_dim, stride_order) -> list:
    """The inverse of ``contiguity_per_dim``."""
    return [per_dim[d] for d in allocation_order(len(per_dim), stride_order)]
