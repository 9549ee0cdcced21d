"""The values of a kernel's arguments: from a binding, and the random words."""
from __future__ import annotations

import math

import torch

from ..codegen.index import div_magic
from ..ir.concretize import Binding
from ..ir.ops import OPS, OpKind
from .rng_state import draw_seed_offset
from .spills import scratch_outputs


def random_exprs(ir):
    """The random ops that draw (seed, offset) per execute, in program order."""
    return [e for e in ir.live_exprs() if OPS[e.op].kind is OpKind.RANDOM and not e.attrs["has_seed"]]


def arg_value(a, b: Binding, env, outs, rng_table):
    """The value of kernel argument ``a`` (a codegen KernelArg) from binding ``b``,
    ``env`` (Val -> value), the kernel's output tensors and the random state."""
    kind = a.source[0]
    if kind == "tensor":
        return b.values[a.source[1]]
    if kind == "output":
        return outs[a.source[1]]
    if kind == "size":
        return b.shapes[a.source[1]][a.source[2]]
    if kind == "stride":
        return b.values[a.source[1]].stride(a.source[2])
    if kind == "numel":
        v, dims = a.source[1], a.source[2]
        shape = b.shapes[v]
        return math.prod(shape if dims is None else [shape[d] for d in dims])
    if kind == "divides":  # the tile's block divides the tensor's element count
        return math.prod(b.shapes[a.source[1]]) % a.source[2] == 0
    if kind == "scalar":
        return env[a.source[1]]
    if kind == "divmagic":
        return div_magic(math.prod(b.shapes[v][d] for v, d in a.source[1]))[a.source[2]]
    if kind == "rng":
        return rng_word(rng_table[id(a.source[1])], a.source[2])
    if kind == "scratch":
        return scratch_buffer(a, b)
    raise AssertionError(kind)


def scratch_buffer(a, b: Binding) -> torch.Tensor:
    """A kernel's working memory (a split reduction's partials and counters):
    ``factor * ceil(numel of dims / divisor)`` elements, zeroed when the kernel needs
    zeros.  A ``Program`` takes it once, as a constant argument, and the kernel
    leaves its counters at zero again after each launch; every other path gets a
    fresh buffer per launch."""
    _, factor, v, dims, divisor, dtype, zero = a.source
    shape = b.shapes[v]
    n = factor * -(-math.prod(shape[d] for d in dims) // divisor)
    make = torch.zeros if zero else torch.empty
    return make(max(n, 1), dtype=getattr(torch, dtype), device=b.device)


def rng_word(seed_offset, i):
    """Word ``i`` of a random op's state (the kernel's ``rng<op>_<i>`` argument)."""
    return rng_words(*seed_offset)[i]


def rng_words(seed, offset) -> tuple:
    """A random op's state as the eight 16-bit words kernels take: the high and low
    halves of the seed's and the offset's low and high 32 bits."""
    words = (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF)
    return tuple(h for w in words for h in ((w >> 16) & 0xFFFF, w & 0xFFFF))


def launch_kw(src, params, cuda: bool) -> dict:
    """The keyword arguments of a launch of ``src``: its constexprs and, on CUDA,
    Triton's compile options (``dump.COMPILE_OPTIONS``): the params' warps, and
    libdevice built without flush-to-zero.  Triton's default links libdevice's
    flush-to-zero variants (``enable_reflect_ftz``), which return 0 for a subnormal
    result (``expf(-100)`` is 3.7e-44 in torch's CUDA kernels, built without it, as
    nvFuser's are).  The option also turns Triton's own approximate 2^x non-flushing;
    the tanh forms that gain nothing from that call the flushing instructions
    themselves (``op_emit.EX2_APPROX``)."""
    kw = dict(src.constexprs)
    if cuda:
        kw.update(num_warps=params.num_warps, enable_reflect_ftz=False)
    return kw


def warmup_args(src, params, sched, seg, b):
    """Arguments for compiling ``src`` ahead of its launch: the real inputs, scratch
    outputs, zero random state (only types and alignment matter to the compiler)."""
    outs = scratch_outputs(src, b)
    args = [arg_value(a, b, b.values, outs, {id(a.source[1]): (0, 0)} if a.kind == "rng" else {}) for a in src.args]
    return args, sched.grid(seg, params), launch_kw(src, params, cuda=True)


def make_rng_state(ir, device):
    """(rng_state, table) for one run of ``ir`` on ``device``, drawn as ``Program.run``
    draws them: random op k of the fusion (``random_exprs``) gets (seed, base + k).
    ``rng_state(expr)`` is what the reference executor takes; (None, {}) without
    random ops."""
    rexprs = random_exprs(ir)
    if not rexprs:
        return None, {}
    seed, base = draw_seed_offset(device, len(rexprs))
    table = {id(e): (seed, base + k) for k, e in enumerate(rexprs)}
    return (lambda e: table[id(e)]), table
