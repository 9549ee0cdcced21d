"""``fd.validate(inputs)``: run the fusion and the reference executor, compare.

Both runs see the same random numbers: the generator state of the inputs' device is
saved before ``execute`` and restored for the reference run, which then draws the
same (seed, offset) through ``make_rng_state``, exactly as ``execute`` did; the state
after ``validate`` is the state ``execute`` left.  Floats compare at their own
precision (fp32 about 1e-5 relative, fp16 and bf16 about two units in the last
place), NaN equal to NaN; ints and bools exactly.

Outputs computed from sums are the exception, by a rule (``accumulation_error``): a
sum's rounding depends on the order of its terms, which the kernel (tiles, a loop over
blocks, then a tree) and torch choose differently, and neither order is the fusion's
meaning.  Its relative error is of the order of ``u * sqrt(n)`` for ``n`` terms and
unit roundoff ``u`` of the accumulator (fp32 for fp32/fp16/bf16 inputs); where terms
of both signs cancel it is an absolute error of the size of the sums around it.  So
each output gets ``e``, the sum of ``u * sqrt(n)`` over the reductions on its longest
chain of reductions (a sum of sums adds its own error to the one it inherits), and
compares at ``rtol + K * e`` and ``atol + K * e * rms(reference output)``,
``K = SUM_ORDER_SLACK``.  Selecting reductions (max, min, any, all) give the same value
in any order and add nothing; an output no accumulating reduction feeds keeps its
dtype's tolerance.  nvFuser's validator (``getTolerance``) also widens by reduction
size, from absolute errors measured on unit-scale ``randn`` sums; following the
output's own scale instead keeps a lost term visible whatever the data's scale.  An
output whose every element cancels has a small rms and so little absolute widening:
it may fail on rounding alone, an error rather than a wrong result passing.

An output that fails that rule passes if it is within nvFuser's own validator's
tolerance (``tolerances.py``: absolute errors measured on unit-scale sums, by the number
of terms reduced on the way): what nvFuser's ``fd.validate`` accepts, pyfuser's accepts,
such as a bf16 intermediate whose rounding the kernel's FMA or sum order flipped by one
unit, magnified by a later matmul.  The report names the rule that accepted it.
"""
from __future__ import annotations

import math

import torch

from ..errors import ValidationError
from ..ir.concretize import bind
from ..ir.ops import OPS, REDUCTION_KINDS
from ..reference import run_reference
from .args import make_rng_state
from .tolerances import nvfuser_tolerance, reduction_sizes

# (rtol, atol) per output dtype
TOLERANCES = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1.3e-5, 1e-6),
    torch.float16: (2e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}

# Widening per unit of accumulation error (module docstring): u * sqrt(n) is already a
# pessimistic estimate of the order-dependent error (that of adding the terms one by one),
# so a factor of 2 keeps margin while a lost term of a few hundredths of the output's rms
# still fails (measurements: docs/DEBUGGING.md, "fd.validate").
SUM_ORDER_SLACK = 2.0
# Reductions whose result is one of the terms: exact in any order.
_SELECTING = frozenset({"max", "min", "any", "all"})


def _rng_state(device: torch.device):
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def _set_rng_state(device: torch.device, state):
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def validate(fd, inputs, device=None):
    inputs = list(inputs)
    binding = bind(fd.ir, inputs, device)
    dev = binding.device
    aliased = [fd.ir.inputs.index(a) for a in fd.ir.output_aliases.values()]
    # the reference runs on copies of the inputs that execute writes into, taken first
    ref_inputs = [x.clone() if i in aliased else x for i, x in enumerate(inputs)]
    before = _rng_state(dev)
    outs = fd.execute(inputs, device=device)
    after = _rng_state(dev)
    _set_rng_state(dev, before)
    try:
        rng_state, _ = make_rng_state(fd.ir, dev)
        refs = run_reference(fd.ir, ref_inputs, device=device, rng_state=rng_state)
    finally:
        _set_rng_state(dev, after)
    # the outputs returned, then the inputs written in place, with the output Val of each
    outs_ir = [o for p, o in enumerate(fd.ir.outputs) if p not in fd.ir.output_aliases]
    names = [o.name for o in outs_ir] + [f"{fd.ir.inputs[i].name} (written in place)" for i in aliased]
    outs_ir += [fd.ir.outputs[p] for p in fd.ir.output_aliases]
    outs_seen, refs = list(outs) + [inputs[i] for i in aliased], list(refs) + [ref_inputs[i] for i in aliased]
    err = accumulation_error(fd.ir, binding.shapes)
    sizes = reduction_sizes(fd.ir, binding.shapes)
    reports = [compare_either(o, r, err.get(v, 0.0), sizes.get(v, 1)) for o, r, v in zip(outs_seen, refs, outs_ir)]
    bad = [i for i, (ok, _) in enumerate(reports) if not ok]
    if bad:
        lines = [f"validate: fusion {fd.id} disagrees with the reference executor on {len(bad)} of "
                 f"{len(outs_seen)} output(s)"]
        for i, (ok, text) in enumerate(reports):
            lines.append(f"  output {i} ({names[i]}): {'ok' if ok else 'MISMATCH'}: {text}")
        raise ValidationError("\n".join(lines))
    return outs


def accumulation_error(ir, shapes) -> dict:
    """Val -> the relative rounding error that the order of the sums feeding it may leave
    (module docstring): along each chain of reductions, ``u * sqrt(terms)`` added up."""
    err: dict = {}
    for e in ir.live_exprs():
        inherited = max((err.get(v, 0.0) for v in e.inputs), default=0.0)
        own = 0.0
        if OPS[e.op].kind in REDUCTION_KINDS and e.op not in _SELECTING:
            x = e.inputs[0]
            shape = shapes[x]
            n = math.prod(shape[d % len(shape)] for d in e.attrs["dims"]) if shape else 1
            u = 2.0 ** -53 if x.dtype.torch is torch.float64 else 2.0 ** -24
            own = u * math.sqrt(n) if n > 1 else 0.0
        for o in e.outputs:
            err[o] = inherited + own
    return err


def compare(got: torch.Tensor, want: torch.Tensor, sum_error: float = 0.0) -> tuple[bool, str]:
    """(within tolerance, a one-line account with the largest error); ``sum_error``: the
    output's accumulation error (``accumulation_error``), which widens the tolerance."""
    if got.dtype != want.dtype:
        return False, f"dtype {got.dtype}, reference {want.dtype}"
    if tuple(got.shape) != tuple(want.shape):
        return False, f"shape {list(got.shape)}, reference {list(want.shape)}"
    what = f"{str(got.dtype).replace('torch.', '')} {list(got.shape)}"
    if got.numel() == 0:
        return True, f"{what}, empty"
    if not got.dtype.is_floating_point:
        bad = got != want
        n = int(bad.sum())
        if not n:
            return True, f"{what}, exact"
        idx = unravel(int(bad.reshape(-1).to(torch.uint8).argmax()), got.shape)
        return False, (f"{what}, {n} of {got.numel()} elements differ (exact compare); first at {idx}: "
                       f"got {got[idx].item()!r}, reference {want[idx].item()!r}")
    rtol, atol = TOLERANCES.get(got.dtype, (1.3e-5, 1e-6))
    g, w = got.to(torch.float64), want.to(torch.float64)
    widened = ""
    if sum_error > 0:
        finite = w[torch.isfinite(w)]
        rms = finite.square().mean().sqrt().item() if finite.numel() else 0.0
        rtol, atol = rtol + SUM_ORDER_SLACK * sum_error, atol + SUM_ORDER_SLACK * sum_error * rms
        widened = f", widened for sums: accumulation error {sum_error:.2g}"
    close = torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    diff = (g - w).abs()
    abs_err = torch.where(torch.isfinite(diff), diff, 0.0)  # inf - inf and NaN - NaN: judged by isclose alone
    rel_err = abs_err / w.abs().clamp_min(1e-30)
    stats = (f"max abs error {abs_err.max().item():.3g}, max rel error {rel_err.max().item():.3g} "
             f"(rtol {rtol:.3g}, atol {atol:.3g}{widened})")
    n = int((~close).sum())
    if not n:
        return True, f"{what}, {stats}"
    inf = float("inf")
    excess = torch.where(close, -inf, (diff - rtol * w.abs()).nan_to_num(nan=inf, posinf=inf))
    idx = unravel(int(excess.reshape(-1).argmax()), got.shape)
    return False, (f"{what}, {n} of {got.numel()} elements out of tolerance; worst at {idx}: "
                   f"got {got[idx].item():.6g}, reference {want[idx].item():.6g}; {stats}")


def compare_either(got, want, sum_error: float = 0.0, reduction_size: int = 1) -> tuple[bool, str]:
    """``compare``, and where it fails nvFuser's validator's tolerance (module docstring)."""
    ok, text = compare(got, want, sum_error)
    tol = nvfuser_tolerance(got.dtype, reduction_size) if not ok and got.dtype == want.dtype else None
    if tol is None or tuple(got.shape) != tuple(want.shape):
        return ok, text
    atol, rtol = tol
    wide = (lambda t: t) if got.dtype.is_complex else (lambda t: t.to(torch.float64))
    if torch.allclose(wide(got), wide(want), rtol=rtol, atol=atol, equal_nan=True):
        return True, (f"{text.split(';')[0]}; within nvFuser's validation tolerance (atol {atol:.3g}, rtol {rtol:.3g}, "
                      f"{reduction_size} terms reduced)")
    return False, f"{text}; nor within nvFuser's (atol {atol:.3g}, rtol {rtol:.3g}, {reduction_size} terms reduced)"


def unravel(flat: int, shape) -> tuple:
    idx = []
    for s in reversed(shape):
        flat, r = divmod(flat, s)
        idx.insert(0, r)
    return tuple(idx)
