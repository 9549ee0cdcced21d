"""The op table's reference helpers: an op's semantics as a torch call, where a row
needs more than a torch function (``ir.ops`` names them; the reference executor runs
them and dtype inference probes them).  Each says what it adds to torch and why."""
from __future__ import annotations

import torch


def tensor_first(fn):
    """Call a torch function that takes only tensors (``atan2``, ``maximum``, ...) on a
    tensor and a Python number, in either order, with the dtype PyTorch's promotion
    gives the pair."""

    def call(a, b, *rest):
        a_is_tensor = isinstance(a, torch.Tensor)
        if a_is_tensor != isinstance(b, torch.Tensor):
            t, s = (a, b) if a_is_tensor else (b, a)
            dtype = torch.result_type(t, s)
            t, s = t.to(dtype), torch.tensor(s, dtype=dtype, device=t.device)
            a, b = (t, s) if a_is_tensor else (s, t)
        return fn(a, b, *rest)

    return call


def _integral(x) -> bool:
    if isinstance(x, torch.Tensor):
        return not (x.dtype.is_floating_point or x.dtype.is_complex)
    return isinstance(x, int)


def _is_bool(x) -> bool:
    return x.dtype == torch.bool if isinstance(x, torch.Tensor) else isinstance(x, bool)


def integer_division(a, b) -> bool:
    """Whether nvFuser's ``div`` of ``a`` and ``b`` is an integer division: both operands
    integers (or one a bool), so they promote to an integer dtype, as nvFuser promotes
    them; two bools divide as eager does (to float)."""
    return _integral(a) and _integral(b) and not (_is_bool(a) and _is_bool(b))


_trunc_div = tensor_first(lambda a, b: torch.div(a, b, rounding_mode="trunc"))


def div_ref(a, b):
    """nvFuser's ``div``: C's truncating division with an integer result on integers
    (7 / -2 == -3), true division otherwise; ``truediv`` always divides truly."""
    return _trunc_div(a, b) if integer_division(a, b) else a / b


def exact_fmod(a, b, floor=False):
    """fmod (``floor``: remainder, the divisor's sign) of floats as IEEE defines it, exact.
    On CPU through C's fmod (numpy): torch's vectorized CPU loop computes a - trunc(a / b)
    * b, NaN once the quotient overflows (fmod(3.39e38, 1e-3) in a row of 16 or more)."""
    r = torch.fmod(a, b)
    if r.device.type != "cpu" or not r.is_floating_point():
        return torch.remainder(a, b) if floor else r
    import numpy as np

    x, y = (torch.as_tensor(v).to(r.dtype) for v in (a, b))
    if r.dtype in (torch.float16, torch.bfloat16):
        x, y = x.float(), y.float()
    x, y = np.broadcast_arrays(x.numpy(), y.numpy())
    with np.errstate(all="ignore"):
        out = np.fmod(x, y)
        if floor:
            out = np.where((out != 0) & ((out < 0) != (y < 0)), out + y, out)
    return torch.from_numpy(np.ascontiguousarray(out)).to(r.dtype)


def prod_ref(x, dims, keepdim=False, dtype=None):
    out = x if dtype is None else x.to(dtype)
    if out.dtype == torch.bool or not out.dtype.is_floating_point:
        out = out.to(torch.int64) if dtype is None else out
    for d in sorted(dims, reverse=True):
        out = torch.prod(out, d, keepdim=True)
    return out if keepdim else out.reshape([s for i, s in enumerate(out.shape) if i not in dims])


def addcmul_ref(t, t1, t2, value=1.0):
    """torch.addcmul: the three arguments' promoted dtype (``value`` takes no part and
    is converted to it), computed in fp32 for fp16/bf16 and rounded once.  Python
    numbers among the arguments become 0-dim tensors, which promote like numbers."""
    like = next(x for x in (t, t1, t2) if isinstance(x, torch.Tensor))
    t, t1, t2 = (x if isinstance(x, torch.Tensor) else torch.tensor(x, device=like.device) for x in (t, t1, t2))
    return torch.addcmul(t, t1, t2, value=value)


def lerp_ref(start, end, weight):
    return torch.lerp(start, end, weight)


def _ordered(fn):
    """torch's maximum or minimum with -0.0 ordered below +0.0, as IEEE 754-2019's
    maximum and minimum, CUDA's max/min instructions and so the kernels order them
    (torch on the CPU returns either zero).  Of two zeros the maximum is ``a + b``
    (-0.0 only if both are) and the minimum ``-(-a + -b)`` (+0.0 only if both are)."""
    is_max = fn is torch.maximum

    def call(a, b):
        r = fn(a, b)
        if not r.dtype.is_floating_point:
            return r
        a, b = a.to(r.dtype), b.to(r.dtype)
        zeros = (a == 0) & (b == 0)
        return torch.where(zeros, a + b if is_max else -(-a + -b), r)

    return call


max_ref, min_ref = _ordered(torch.maximum), _ordered(torch.minimum)


def clamp_ref(x, lo=None, hi=None):
    """``minimum(maximum(x, lo), hi)`` in the dtype torch's clamp gives, zeros ordered
    as in ``_ordered``: clamp(-0.0, min=0.0) is +0.0, as on CUDA (nvFuser's kernels,
    eager on the GPU)."""
    r = torch.clamp(x, lo, hi)
    if not r.dtype.is_floating_point:
        return r
    r = x.to(r.dtype)
    for bound, order in ((lo, max_ref), (hi, min_ref)):
        if bound is not None:
            r = order(r, torch.as_tensor(bound, dtype=r.dtype, device=r.device))
    return r




def _int_only(op, fn, what):
    """``fn`` where the promoted dtype is an integer one, else the error eager gives an op
    it has no kernel for (the dtype probe turns it into a DefinitionError)."""

    def call(a, b):
        dtype = torch.result_type(a, b)
        if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
            raise NotImplementedError(f"{op}: takes integer operands ({what}), got {dtype}")
        return fn(a, b)

    return call


# nvFuser's mod is C's %: the dividend's sign, so torch's fmod on integers; nvFuser has
# no floating-point mod (fmod is that)
mod_ref = _int_only("mod", tensor_first(exact_fmod), "C's %; fmod takes floats")


def _logical_right_shift(x, s):
    bits = torch.iinfo(x.dtype).bits
    valid = (s >= 0) & (s < bits)
    s = torch.where(valid, s, 0)
    # torch's >> fills with the sign bit: clear the top s bits (-1 << bits is 0 in torch)
    keep = ~torch.bitwise_left_shift(torch.full_like(s, -1), bits - s)
    return torch.where(valid, torch.bitwise_right_shift(x, s) & keep, 0)


def _promoted(fn):
    """``fn`` on two operands converted to their promoted dtype (tensors or numbers)."""

    def call(a, b):
        like = a if isinstance(a, torch.Tensor) else b
        dtype = torch.result_type(a, b)
        a, b = (torch.as_tensor(v, device=like.device).to(dtype) for v in (a, b))
        return fn(a, b)

    return call


# nvFuser's logical_right_shift: zeros shift in from the left, whatever the sign.  A shift
# below 0 or of the width or more gives 0, as jax.lax.shift_right_logical (nvFuser's
# test reference; its kernels leave those undefined).
logical_right_shift_ref = _int_only("logical_right_shift", _promoted(_logical_right_shift), "Int or Int32")


def nextafter_ref(a, b):
    r = tensor_first(torch.nextafter)(a, b)
    if r.dtype in (torch.float16, torch.bfloat16):
        # kernels compute fp16/bf16 ops in fp32, where the next value is another one
        raise NotImplementedError(f"nextafter: takes Float or Double operands, as nvFuser's, got {r.dtype}")
    return r



def erfcinv(x: torch.Tensor) -> torch.Tensor:
    """The inverse of erfc, in ``x``'s own dtype: -ndtri(x / 2) / sqrt(2), an identity,
    computed in fp64 (torch has no erfcinv, and erfinv(1 - x) loses every digit of a small
    ``x``).  Also the interpreter's stand-in for libdevice's erfcinv."""
    return (torch.special.ndtri(x.double() * 0.5) * -0.7071067811865476).to(x.dtype)


def erfcinv_ref(x):
    """erfcinv with erfinv's dtypes (integers and bools give the default float dtype)."""
    dtype = torch.erfinv(torch.zeros((), dtype=x.dtype)).dtype
    return erfcinv(x.to(dtype) if x.dtype != dtype else x)


def threshold_ref(x, threshold, value):
    """torch.threshold: ``value`` where ``x <= threshold``, else ``x`` (NaN stays NaN);
    the bounds take ``x``'s dtype."""
    return torch.threshold(x, threshold, value)
