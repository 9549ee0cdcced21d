"""Views between the fused regions, taken at the cost of a tensor header: the calls
that ``rewrites/fast_views.py`` puts in place of a partitioned graph's view ops.

``reinterpret`` builds a view from its traced sizes, strides and offset relative to its
input, a few times cheaper on the host than ATen's dispatcher
(docs/TUNING.md#host-time), and ``reinterpret_chain`` the last of a chain of views from
the first one's input in one step.  Safe by construction: the view is built so only
when the input arrives with the strides it was traced with (then ATen's view would
produce exactly these sizes, strides and offset); any other input runs the original
op(s).
"""
from __future__ import annotations

from ...compat import reinterpret_tensor

# ``_reinterpret(x, size, stride, delta)``: a view of ``x``'s storage whose offset is
# ``delta`` past ``x``'s own (torch's helper takes the offset relative to its input).
_reinterpret = reinterpret_tensor


def reinterpret(x, in_stride, size, stride, delta, op, args, kwargs):
    """``op(*args, **kwargs)``, a view of ``x``: built from the traced ``size``,
    ``stride`` and offset ``delta`` when ``x`` has the traced strides ``in_stride``."""
    if x.stride() == in_stride:
        return _reinterpret(x, size, stride, delta)
    return op(*args, **kwargs)


def reinterpret_chain(x, in_stride, size, stride, delta, chain):
    """The last of a chain of views of ``x``, built from its traced ``size``, ``stride``
    and offset ``delta`` (relative to ``x``) when ``x`` has the traced strides
    ``in_stride``; otherwise each ``(op, args after the input, kwargs)`` of ``chain``
    runs in turn."""
    if x.stride() == in_stride:
        return _reinterpret(x, size, stride, delta)
    for op, rest, kwargs in chain:
        x = op(x, *rest, **kwargs)
    return x
