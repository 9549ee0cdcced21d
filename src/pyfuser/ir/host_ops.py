"""Host ops: ops with no code generator, run as torch calls between kernels.

nvFuser hands matmul-like and gather-like ops to ATen (or its own matmul
scheduler); pyfuser runs them as *host segments*: the planner cuts the fusion at
each host op, upstream kernels store the op's inputs, the op runs in torch, and
downstream kernels load its result.  Gathers of floating-point tensors
(op-table kind "gather") are the exception: the code generator reads them inside
kernels.  Each op here is a reference implementation
(the semantics, used by the reference executor and by the runtime alike) and a
shape rule over possibly symbolic (None) extents.  Attributes are Python values.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import DefinitionError
from .shapes import broadcast_shapes, norm_dim


def matmul_ref(a, b):
    return torch.matmul(a, b)


def linear_ref(x, w, bias=None):
    return F.linear(x, w, bias)


def index_select_ref(x, index, dim):
    return torch.index_select(x, dim, index.reshape(-1) if index.dim() == 0 else index)


def gather_ref(x, index, dim):
    return torch.gather(x, dim, index)


def take_along_axis_ref(x, index, dim):
    return torch.take_along_dim(x, index, dim)


_EMBEDDING_CASTS = {"padding_idx": int, "max_norm": float, "norm_type": float, "scale_grad_by_freq": bool,
                    "sparse": bool}


def embedding_ref(index, weight, *values, runtime=(), padding_idx=None, max_norm=None, norm_type=2.0,
                  scale_grad_by_freq=False, sparse=False):
    """``values``: the runtime scalars of the options ``runtime`` names, in that order."""
    if runtime:
        opts = dict(padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                    scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
        for name, x in zip(runtime, values):
            opts[name] = _EMBEDDING_CASTS[name](x.item() if isinstance(x, torch.Tensor) else x)
        padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse = opts.values()
    if max_norm is not None:  # torch renormalises weight in place: do it on a copy, a fusion has no side effects
        weight = weight.clone()
    return F.embedding(index, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)


def _eq(op, what, a, b):
    if a is not None and b is not None and a != b:
        raise DefinitionError(f"{op}: {what} must match, got {a} and {b}")


def matmul_shape(op, shapes, attrs):
    a, b = shapes
    if len(a) == 0 or len(b) == 0:
        raise DefinitionError(f"{op}: both arguments must have rank >= 1, got ranks {len(a)} and {len(b)}")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    _eq(op, f"the contracted extents of {list(a)} @ {list(b)}", a2[-1], b2[-2])
    batch = broadcast_shapes(op, a2[:-2], b2[:-2])
    out = tuple(batch) + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())
    return [out]


def linear_shape(op, shapes, attrs):
    x, w = shapes[0], shapes[1]
    if len(x) == 0 or len(w) not in (1, 2):
        raise DefinitionError(f"{op}: input must have rank >= 1 and weight rank 1 or 2, got ranks {len(x)} "
                              f"and {len(w)}")
    _eq(op, f"input's last extent and weight's in_features ({list(x)}, {list(w)})", x[-1], w[-1])
    out = tuple(x[:-1]) + ((w[0],) if len(w) == 2 else ())
    if len(shapes) > 2:
        broadcast_shapes(op, out, shapes[2])
    return [out]


def index_select_shape(op, shapes, attrs):
    x, idx = shapes
    if len(idx) > 1:
        raise DefinitionError(f"{op}: index must have rank 0 or 1, got rank {len(idx)}")
    d = norm_dim(op, "dim", attrs["dim"], len(x))
    n = idx[0] if len(idx) == 1 else 1
    return [tuple(x[:d]) + (n,) + tuple(x[d + 1:])]


def gather_shape(op, shapes, attrs):
    x, idx = shapes
    if len(idx) != len(x):
        raise DefinitionError(f"{op}: index must have the input's rank {len(x)}, got rank {len(idx)}")
    d = norm_dim(op, "dim", attrs["dim"], len(x))
    if op == "take_along_axis":
        for i, (a, b) in enumerate(zip(x, idx)):
            if i != d:
                _eq(op, f"extents of input {list(x)} and index {list(idx)} in dim {i}", a, b)
    return [tuple(idx)]


def embedding_shape(op, shapes, attrs):
    idx, w = shapes
    if len(w) != 2:
        raise DefinitionError(f"{op}: weight must have rank 2, got rank {len(w)}")
    return [tuple(idx) + (w[1],)]


# --- scans, sorts and scatter (ir.host_rows): torch between kernels ------------------
# nvFuser's scans keep the input's dtype (``scan`` in its arith.cpp: no upcast, unlike
# its reductions; eager's cumsum of an int32 or bool tensor gives int64), and cummax /
# cummin return the values only.  A scan along a size-1 dim is the input itself.


def _scan(fn):
    def ref(x, dim):
        r = fn(x, dim)
        return (r[0] if isinstance(r, tuple) else r).to(x.dtype)

    return ref


cumsum_ref, cumprod_ref = _scan(torch.cumsum), _scan(torch.cumprod)
cummax_ref, cummin_ref = _scan(torch.cummax), _scan(torch.cummin)


def argsort_ref(x, dim, descending=False, stable=False):
    return torch.argsort(x, dim=dim, descending=descending, stable=stable)


def topk_ref(x, k, dim=-1, largest=True, sorted=False):
    """(values, indices); a 0-dim input gives itself and index 0, as nvFuser's topk."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    values, indices = torch.topk(x, int(k), dim, largest, sorted)
    return values, indices


def scatter_ref(x, index, src, dim):
    if isinstance(src, torch.Tensor):
        return torch.scatter(x, dim, index, src)
    return torch.scatter(x, dim, index, torch.as_tensor(src, dtype=x.dtype).item())


def same_shape(op, shapes, attrs):
    return [tuple(shapes[0])]


def scan_shape(op, shapes, attrs):
    if len(shapes[0]) == 0:
        raise DefinitionError(f"{op}: arg must have rank >= 1 (a scan runs along one of its dims), got rank 0")
    norm_dim(op, "dim", attrs["dim"], len(shapes[0]))
    return [tuple(shapes[0])]


def argsort_shape(op, shapes, attrs):
    norm_dim(op, "dim", attrs["dim"], len(shapes[0]))  # a 0-dim tensor sorts along dim 0 or -1, as torch
    return [tuple(shapes[0])]


def topk_shape(op, shapes, attrs):
    x = shapes[0]
    if len(x) == 0:
        return [(), ()]
    d = norm_dim(op, "dim", attrs["dim"], len(x))
    k = attrs["k"]
    if k is not None and x[d] is not None and not 0 <= k <= x[d]:
        raise DefinitionError(f"{op}: k must be in [0, {x[d]}] (the extent of dim {d}), got {k}")
    out = tuple(x[:d]) + (k,) + tuple(x[d + 1:])
    return [out, out]


def scatter_shape(op, shapes, attrs):
    x, idx = shapes[0], shapes[1]
    ranks = [len(s) for s in shapes]
    if len(set(ranks)) != 1:
        raise DefinitionError(f"{op}: arg, index and src must have the same rank, got ranks {ranks}")
    norm_dim(op, "dim", attrs["dim"], len(x))
    for i, (a, b) in enumerate(zip(x, idx)):
        if a is not None and b is not None and b > a:
            raise DefinitionError(f"{op}: index {list(idx)} must not exceed arg {list(x)} in dim {i}")
    return [tuple(x)]


# --- complex numbers: torch, since Triton has no complex type ------------------------


def complex_ref(real, imag):
    return torch.complex(real, imag)


def broadcast_shape(op, shapes, attrs):
    return [broadcast_shapes(op, *shapes)]
