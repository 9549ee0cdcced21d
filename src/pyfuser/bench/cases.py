"""Benchmark cases: each one a fusion, its inputs, and the same math in PyTorch eager.

A ``Case`` holds

* ``sizes(scale)``: the sizes at ``scale`` (1.0 = the benchmark's full, realistic
  size; ``--dry-run`` uses a tiny scale so the CPU interpreter can run every case);
* ``build(fd, sizes)``: records the fusion into a FusionDefinition (current API,
  ``fd.ops``; the seed cases reuse ``seeds.py``'s 2022-API builders, which the same
  FusionDefinition accepts);
* ``make_inputs(sizes, device, gen)``: random inputs, never all zeros;
* ``eager(tensors, sizes, keep=None)``: the same computation in PyTorch eager, used
  for eager timing, for ``torch.compile`` timing and as the correctness oracle.
  ``tensors`` are the tensor inputs only (runtime scalars such as an explicit RNG
  seed are pyfuser's business).  Random cases draw their own dropout mask when
  ``keep`` is None and use ``keep`` (pyfuser's mask output) when given, so the
  correctness check compares pyfuser's outputs with eager's for the same mask;
* ``keep_output``: for dropout cases, the position of the keep-mask output;
* ``group`` ("seed", "suite", "training", "general", "host") and ``tags``: ``--cases``
  selects by either as well as by name; the report's geomeans are per group.  The
  "general" cases are held out: the same kinds of fusion at widths, row counts and
  dtypes the schedulers' rules were not tuned on (``GENERAL``), so a rule fitted to
  the suite alone shows in every run.

The "training_ops" group (``training_ops.py``, run by ``training_ops_run.py``) is not
made of Cases: single training ops run forward and backward through autograd as eager,
torch.compile, backend="pyfuser" and Liger Kernel; ``--cases training_ops`` selects it
and a run of every case leaves it out.

The training step's fusions are defined in ``training.py`` (shared with the tests
against torch autograd); the cases here give them their sizes.

The full sizes move several times the H200's 60 MiB L2 (inputs + outputs), so the
figures are DRAM-bandwidth figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..frontend import FusionDefinition
from . import seeds
from . import training as T
from .training import BF, DROPOUT_P, F, GELU_C, H, KEEP_SCALE, TORCH, rand

SHORT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.bool: "bool"}


@dataclass
class Case:
    name: str
    group: str  # "seed", "suite", "training", "general" (held out) or "host"
    sizes: Callable  # scale -> tuple
    build: Callable  # (fd, sizes) -> None
    make_inputs: Callable  # (sizes, device, gen) -> list (tensors, maybe runtime scalars)
    eager: Callable  # (tensors, sizes, keep=None) -> tuple of tensors
    describe: Callable  # sizes -> "shape/dtype" text
    keep_output: int | None = None  # dropout cases: the keep-mask output
    tol: dict = field(default_factory=dict)  # torch dtype -> (rtol, atol) overrides
    cpu_tol: dict = field(default_factory=dict)  # the same, for CPU (interpreter) runs only
    note: str = ""
    tags: tuple = ()  # more names ``--cases`` selects this case by, besides its name and group

    def define(self, sizes) -> FusionDefinition:
        with FusionDefinition() as fd:
            self.build(fd, sizes)
        return fd


# --- sizes ------------------------------------------------------------------------


def _r(n: int, scale: float, lo: int = 2) -> int:
    """A row-like extent: scales linearly."""
    return n if scale >= 1 else max(lo, int(round(n * scale)))


def _w(n: int, scale: float, lo: int = 16) -> int:
    """A row width: scales with sqrt(scale) and keeps its alignment class (a multiple
    of 16 stays one; a width that is not a multiple of 8 stays not one)."""
    if scale >= 1:
        return n
    w = max(lo, int(round(n * math.sqrt(scale))))
    if n % 16 == 0:
        return max(16, w - w % 16)
    if n % 8 == 0:
        return max(8, w - w % 8)
    return w + 1 if w % 8 == 0 else w


def _shape(*dims) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


# --- the report's seed fusions -----------------------------------------------------------


def _seed_sizes(name):
    case = seeds.SEEDS[name]
    return lambda scale: case.full_sizes if scale >= 1 else case.small_sizes


def _seed_build(name):
    case = seeds.SEEDS[name]
    return lambda fd, sizes: case.build(fd, *sizes)


def _seed_inputs_on(name, sizes, device, gen):
    if name.startswith("bert"):
        B, Hh, S = sizes
        return [rand((B * Hh, S, S), torch.float16, device, gen),
                (torch.rand((B, 1, 1, S), device=device, generator=gen) > 0.2).to(torch.float32)]
    R = sizes[0] * sizes[1] if len(sizes) == 3 else sizes[0]
    return [rand((R, sizes[-1]), torch.float16, device, gen)]


def eager_bert(tensors, sizes, keep=None, view=True):
    """seeds.eager_bert_softmax_dropout, taking the keep mask when given."""
    x, mask = tensors
    B, Hh, S = sizes
    scaled_mask = (1.0 - mask) * -10000.0
    x4 = x.view(B, Hh, S, S) if view else x
    scores = (x4.float() / 8.0).half().float() + scaled_mask
    probs = torch.softmax(scores, dim=-1)
    if keep is None:
        keep = torch.rand_like(probs) > 0.1
    return scaled_mask, probs, keep, (keep.float() * probs * seeds.DROPOUT_KEEP_SCALE).half()


def build_bert_noview(fd, sizes):
    """The BERT fusion without the leading view: the scores arrive as [B, H, S, S]."""
    B, Hh, S = sizes
    full = [B, Hh, S, S]
    x = T.tensor(fd, 4, H)
    mask = fd.define_tensor(shape=[-1, 1, 1, -1], contiguity=[True, None, None, True], dtype=F)
    scaled_mask = fd.ops.mul(fd.ops.sub(1.0, fd.ops.mul(mask, 1)), -10000.0)
    s = fd.ops.cast(fd.ops.cast(fd.ops.div(fd.ops.cast(x, F), 8.0), H), F)
    s = fd.ops.add(s, fd.ops.broadcast_in_dim(scaled_mask, shape=full, broadcast_dims=[0, 1, 2, 3]))
    m = fd.ops.max(s, dims=[3])
    e = fd.ops.exp(fd.ops.sub(s, T.bcast_rows(fd, m, full)))
    probs = fd.ops.div(e, T.bcast_rows(fd, fd.ops.sum(e, dims=[3]), full))
    keep = fd.ops.gt(fd.ops.rand_like(probs), 0.1)
    out = fd.ops.cast(fd.ops.mul(fd.ops.mul(fd.ops.cast(keep, F), probs), seeds.DROPOUT_KEEP_SCALE), H)
    for t in (scaled_mask, probs, keep, out):
        fd.add_output(t)


def _bert_noview_inputs(sizes, device, gen):
    B, Hh, S = sizes
    return [rand((B, Hh, S, S), torch.float16, device, gen),
            (torch.rand((B, 1, 1, S), device=device, generator=gen) > 0.2).to(torch.float32)]


def eager_log_softmax_logsum(tensors, sizes, keep=None):
    """The seed's eager returns an expand view; the fusion's output is a dense [R, V]
    tensor, so eager materialises it too (the same bytes for every implementation)."""
    return (seeds.eager_log_softmax_logsum(tensors[0], *sizes)[0].contiguous(),)


def _seed_eager(name):
    fn = seeds.SEEDS[name].eager
    return lambda tensors, sizes, keep=None: tuple(fn(*tensors, *sizes))


# --- softmax / log-softmax ----------------------------------------------------------------


def build_softmax(fd, sizes, log=False):
    R, V, dt = sizes
    x = T.tensor(fd, 2, dt)
    xf = fd.ops.cast(x, F)
    m = fd.ops.max(xf, dims=[1])
    d = fd.ops.sub(xf, T.bcast_rows(fd, m, (R, V)))
    e = fd.ops.exp(d)
    s = fd.ops.sum(e, dims=[1])
    if log:
        y = fd.ops.sub(d, T.bcast_rows(fd, fd.ops.log(s), (R, V)))
    else:
        y = fd.ops.div(e, T.bcast_rows(fd, s, (R, V)))
    fd.add_output(y if dt == F else fd.ops.cast(y, dt))


def eager_softmax(tensors, sizes, keep=None, log=False):
    """What a user writes: one ATen kernel, fp32 math inside, output in the input's dtype."""
    return ((torch.log_softmax if log else torch.softmax)(tensors[0], dim=-1),)


def _rows_case(name, R, V, dt, log=False, group="suite"):
    return Case(
        name=name, group=group,
        sizes=lambda scale: (_r(R, scale), _w(V, scale), dt),
        build=lambda fd, s: build_softmax(fd, s, log),
        make_inputs=lambda s, device, gen: [rand((s[0], s[1]), TORCH[s[2]], device, gen)],
        eager=lambda t, s, keep=None: eager_softmax(t, s, keep, log),
        describe=lambda s: f"{_shape(s[0], s[1])} {SHORT[TORCH[s[2]]]}",
    )


# --- bias + GELU, softmax backward, outer reduction -----------------------------------------

def build_bias_gelu(fd, sizes):
    """gelu_tanh(x + b).  x + b is rounded to the input dtype first, as eager's
    ``F.gelu(x + b, approximate="tanh")`` does."""
    R, N, dt = sizes
    x, b = T.tensor(fd, 2, dt), T.tensor(fd, 1, dt)
    h = fd.ops.cast(fd.ops.cast(fd.ops.add(fd.ops.cast(x, F), T.bcast_cols(fd, fd.ops.cast(b, F), (R, N))), dt), F)
    inner = fd.ops.mul(GELU_C, fd.ops.add(h, fd.ops.mul(0.044715, fd.ops.mul(h, fd.ops.mul(h, h)))))
    y = fd.ops.mul(fd.ops.mul(0.5, h), fd.ops.add(1.0, fd.ops.tanh(inner)))
    fd.add_output(fd.ops.cast(y, dt))


def eager_bias_gelu(tensors, sizes, keep=None):
    x, b = tensors
    return (torch.nn.functional.gelu(x + b, approximate="tanh"),)


def build_outer_sum(fd, sizes):
    """Bias gradient: sum over dim 0 (the outer axis) in fp32, stored in the input's dtype."""
    R, N, dt = sizes
    x = T.tensor(fd, 2, dt)
    fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(x, F), dims=[0]), dt))


def eager_outer_sum(tensors, sizes, keep=None):
    return (tensors[0].sum(0),)


# --- dropout cases ------------------------------------------------------------------------


def build_attention_softmax_dropout(fd, sizes):
    """probs = softmax(x * 1/sqrt(64)) stored fp16; out = dropout(probs) (default
    generator).  Outputs: probs, keep mask, out."""
    B, Hh, S = sizes
    full = (B, Hh, S, S)
    x = T.tensor(fd, 4, H)
    s = fd.ops.mul(fd.ops.cast(x, F), 0.125)
    m = fd.ops.max(s, dims=[3])
    e = fd.ops.exp(fd.ops.sub(s, T.bcast_rows(fd, m, full)))
    probs = fd.ops.cast(fd.ops.div(e, T.bcast_rows(fd, fd.ops.sum(e, dims=[3]), full)), H)
    pf = fd.ops.cast(probs, F)
    keep = fd.ops.lt(fd.ops.rand_like(pf), 1.0 - DROPOUT_P)
    out = fd.ops.cast(fd.ops.where(keep, fd.ops.mul(pf, KEEP_SCALE), 0.0), H)
    for t in (probs, keep, out):
        fd.add_output(t)


def eager_attention_softmax_dropout(tensors, sizes, keep=None):
    (x,) = tensors
    probs = torch.softmax(x * 0.125, dim=-1)
    if keep is None:
        out, keep = torch.native_dropout(probs, DROPOUT_P, True)
    else:
        out = torch.where(keep, probs.float() * KEEP_SCALE, 0.0).to(probs.dtype)
    return probs, keep, out


# --- host overhead ------------------------------------------------------------------------


def build_host_pointwise(fd, sizes):
    x, y = T.tensor(fd, 1, F), T.tensor(fd, 1, F)
    fd.add_output(fd.ops.add(fd.ops.mul(x, y), x))


def eager_host_pointwise(tensors, sizes, keep=None):
    x, y = tensors
    return (x * y + x,)


HOST_TARGET_US = 30.0

# --- the list ---------------------------------------------------------------------------------


def _seed_case(name, eager=None, describe=None, keep_output=None, tol=None):
    return Case(name=name, group="seed", sizes=_seed_sizes(name), build=_seed_build(name),
                make_inputs=lambda s, device, gen, _n=name: _seed_inputs_on(_n, s, device, gen),
                eager=eager or _seed_eager(name), describe=describe, keep_output=keep_output, tol=tol or {})


# The training step's fusions (training.py) at the sizes of a hidden-1024 transformer
# (BERT-large, GPT-2 medium) on 16384 tokens: activations [16384, 1024], the MLP's
# GELU at [16384, 4096], RoPE over 8 heads of 128, losses over BERT's 30522-word
# vocabulary.  Dtypes of bf16 mixed precision: bf16 activations, gradients and weights,
# fp32 saved statistics, fp32 optimizer state and master weights.
TOKENS, HIDDEN, VOCAB = 16384, 1024, 30522


def _sized(name, group, R, W, dt, build, make_inputs, eager, what, **kw):
    """A case on [R, W] rows of ``dt``; ``what`` describes the tensors."""
    return Case(name, group, lambda sc: (_r(R, sc), _w(W, sc), dt), build, make_inputs, eager,
                lambda s: f"{_shape(s[0], s[1])} {what}", **kw)


def _training(name, width, dt, build, make_inputs, eager, what, **kw):
    """A "training" case on [TOKENS, width] rows."""
    return _sized(name, "training", TOKENS, width, dt, build, make_inputs, eager, what, **kw)


def _layer_norm_case(name, group, R, W, dt):
    return _sized(name, group, R, W, dt, T.build_layer_norm, T.norm_inputs, T.eager_layer_norm,
                  f"{SHORT[TORCH[dt]]}, w+b, ->y,mean,rstd")


def _rms_norm_case(name, group, R, W, dt):
    return _sized(name, group, R, W, dt, T.build_rms_norm, lambda s, d, g: T.norm_inputs(s, d, g, bias=False),
                  T.eager_rms_norm, f"{SHORT[TORCH[dt]]}, w, ->y,rstd")


def _bias_gelu_case(name, group, R, W):
    return Case(name, group, lambda sc: (_r(R, sc), _w(W, sc), H), build_bias_gelu,
                lambda s, d, g: [rand((s[0], s[1]), torch.float16, d, g),
                                 rand((s[1],), torch.float16, d, g, 0.05, 0.5)],
                eager_bias_gelu, lambda s: f"{_shape(s[0], s[1])} fp16 + bias {_shape(s[1])}")


def _outer_sum_case(name, group, R, W):
    return Case(name, group, lambda sc: (_r(R, sc), _w(W, sc), H), build_outer_sum,
                lambda s, d, g: [rand((s[0], s[1]), torch.float16, d, g)], eager_outer_sum,
                lambda s: f"{_shape(s[0], s[1])} fp16 -> {_shape(s[1])}",
                # an fp32 sum of R terms of magnitude <= 4, in a different order, then rounded to fp16
                tol={torch.float16: (2e-3, 0.05)})


def _attention_case(name, group, B, heads, S):
    return Case(name, group, lambda sc: (_r(B, sc, 1), _r(heads, sc, 2), _w(S, sc)), build_attention_softmax_dropout,
                lambda s, d, g: [rand((s[0], s[1], s[2], s[2]), torch.float16, d, g)],
                eager_attention_softmax_dropout, lambda s: f"{_shape(*s, s[2])} fp16", keep_output=1)


def _rows_desc(s):
    R = s[0] * s[1] if len(s) == 3 else s[0]
    return f"{_shape(R, s[-1])} fp16"


CASES: list[Case] = [
    _seed_case("bert_softmax_dropout", eager=lambda t, s, keep=None: eager_bert(t, s, keep, view=True),
               describe=lambda s: f"{_shape(s[0] * s[1], s[2], s[2])}->{_shape(*s, s[2])} fp16, "
                                  f"mask {_shape(s[0], 1, 1, s[2])} fp32", keep_output=2),
    Case("bert_softmax_dropout_noview", "seed", _seed_sizes("bert_softmax_dropout"), build_bert_noview,
         _bert_noview_inputs, lambda t, s, keep=None: eager_bert(t, s, keep, view=False),
         lambda s: f"{_shape(*s, s[2])} fp16, mask {_shape(s[0], 1, 1, s[2])} fp32", keep_output=2),
    # Its fp32 output is the fp16 output cast back up: one fp16 rounding step apart from
    # eager's where the fp32 values differ in the last bit, so it compares at fp16 precision.
    _seed_case("log_softmax_full", describe=lambda s: f"{_shape(s[0] * s[1], s[2])} fp16 (2 views)",
               tol={torch.float32: (2e-3, 1e-4)}),
    _seed_case("log_softmax_logsum", eager=eager_log_softmax_logsum,
               describe=lambda s: f"{_shape(*s)} fp16->fp32"),
    _seed_case("log_softmax_sub", describe=lambda s: f"{_shape(*s)} fp16->fp32"),
    _rows_case("softmax_128_fp16", 524288, 128, H),
    _rows_case("softmax_1024_fp32", 65536, 1024, F),
    _rows_case("softmax_4096_bf16", 32768, 4096, BF),
    _rows_case("softmax_30522_bf16", 8192, 30522, BF),
    _rows_case("log_softmax_4096_fp16", 32768, 4096, H, log=True),
    _rows_case("log_softmax_50257_bf16", 8192, 50257, BF, log=True),
    _layer_norm_case("layer_norm_1024_bf16", "suite", 65536, 1024, BF),
    _layer_norm_case("layer_norm_4096_fp16", "suite", 32768, 4096, H),
    _rms_norm_case("rms_norm_4096_bf16", "suite", 32768, 4096, BF),
    _bias_gelu_case("bias_gelu_tanh_fp16", "suite", 16384, 4096),
    Case("softmax_backward_fp16", "suite", lambda sc: (_r(16 * 16 * 512, sc), _w(512, sc), H),
         T.build_softmax_backward, T.softmax_backward_inputs, T.eager_softmax_backward,
         lambda s: f"{_shape(s[0], s[1])} fp16 grad, y", tags=("training",)),
    _outer_sum_case("bias_grad_sum_dim0_fp16", "suite", 16384, 4096),
    Case("dropout_residual_layer_norm_bf16", "suite", lambda sc: (_r(32768, sc), _w(1024, sc), BF),
         T.build_dropout_residual_layer_norm, T.dropout_residual_inputs, T.eager_dropout_residual_layer_norm,
         lambda s: f"{_shape(s[0], s[1])} bf16 x+res, w+b, seed", keep_output=0, tags=("training",),
         # Triton's interpreter truncates fp32 -> bf16 where torch rounds to nearest: dropout's
         # output is 1 ulp off (up to 0.03 at |x| < 4.5), and h = res + d cancels, so on CPU
         # h, y, mean and rstd carry that absolute error.  On the GPU the default tolerances hold.
         cpu_tol={torch.bfloat16: (1.6e-2, 0.07), torch.float32: (1e-4, 2e-2)}),
    _attention_case("attention_softmax_dropout_fp16", "suite", 16, 16, 512),
    _training("layer_norm_backward_bf16", HIDDEN, BF, T.build_layer_norm_backward,
              T.layer_norm_backward_inputs, T.eager_layer_norm_backward,
              "bf16 dy, x, w; fp32 mean, rstd -> dx, dw, db"),
    _training("rms_norm_backward_bf16", HIDDEN, BF, T.build_rms_norm_backward, T.rms_norm_backward_inputs,
              T.eager_rms_norm_backward, "bf16 dy, x, w; fp32 rstd -> dx, dw"),
    _training("log_softmax_backward_bf16", VOCAB, BF, lambda fd, s: T.build_softmax_backward(fd, s, log=True),
              lambda s, d, g: T.softmax_backward_inputs(s, d, g, log=True),
              lambda t, s, keep=None: T.eager_softmax_backward(t, s, log=True), "bf16 dy, y -> dx"),
    _training("gelu_tanh_backward_bf16", 4 * HIDDEN, BF, T.build_gelu_backward, T.gelu_backward_inputs,
              T.eager_gelu_backward, "bf16 dy, x -> dx"),
    _training("gelu_erf_backward_bf16", 4 * HIDDEN, BF,
              lambda fd, s: T.build_gelu_backward(fd, s, approximate="none"), T.gelu_backward_inputs,
              lambda t, s, keep=None: T.eager_gelu_backward(t, s, approximate="none"), "bf16 dy, x -> dx"),
    Case("rope_forward_bf16", "training", lambda sc: (_r(TOKENS, sc), _r(8, sc), _w(128, sc), BF), T.build_rope,
         T.rope_inputs, T.eager_rope,
         lambda s: f"{_shape(*s[:3])} bf16, theta {_shape(s[0], s[2] // 2)} fp32 -> y"),
    _training("cross_entropy_bf16", VOCAB, BF, T.build_cross_entropy, T.cross_entropy_inputs,
              T.eager_cross_entropy, "bf16 logits, int64 target -> fp32 mean loss"),
    _training("adam_step_fp32", HIDDEN, F, T.build_adam_step, T.adam_step_inputs, T.eager_adam_step,
              "fp32 param, grad, exp_avg, exp_avg_sq -> param, exp_avg, exp_avg_sq"),
    _training("dropout_residual_layer_norm_backward_bf16", HIDDEN, BF, T.build_dropout_residual_layer_norm_backward,
              T.dropout_residual_layer_norm_backward_inputs, T.eager_dropout_residual_layer_norm_backward,
              "bf16 dy, h, w, bool keep; fp32 mean, rstd -> dx, dres, dw, db"),
    Case("host_overhead_pointwise", "host", lambda sc: (1024,), build_host_pointwise,
         lambda s, d, g: [rand(s, torch.float32, d, g), rand(s, torch.float32, d, g)], eager_host_pointwise,
         lambda s: f"{_shape(*s)} fp32 (wall us/call)"),
]

# Held out: the suite's fusions at widths, row counts and dtypes the schedulers were
# never tuned on (odd and non-multiple-of-8 widths, rows from 64 to 128256 wide,
# vocabularies of other models, BERT-base's 768), measured in every run so a rule that
# fits only the suite shows.  Not part of the suite's geometric mean.
GENERAL: list[Case] = [
    _rows_case("softmax_64_fp16", 1048576, 64, H, group="general"),
    _rows_case("log_softmax_257_fp16", 262144, 257, H, log=True, group="general"),
    _rows_case("softmax_777_bf16", 65536, 777, BF, group="general"),
    _rows_case("softmax_2000_fp32", 16384, 2000, F, group="general"),
    _rows_case("softmax_12000_fp16", 8192, 12000, H, group="general"),
    _rows_case("log_softmax_32000_bf16", 4096, 32000, BF, log=True, group="general"),
    _rows_case("log_softmax_128256_bf16", 1024, 128256, BF, log=True, group="general"),
    _layer_norm_case("layer_norm_768_fp16", "general", 65536, 768, H),
    _layer_norm_case("layer_norm_5120_bf16", "general", 16384, 5120, BF),
    _rms_norm_case("rms_norm_2048_fp16", "general", 65536, 2048, H),
    _rms_norm_case("rms_norm_8192_bf16", "general", 16384, 8192, BF),
    _bias_gelu_case("bias_gelu_tanh_3072_fp16", "general", 32768, 3072),
    _sized("softmax_backward_1000_bf16", "general", 32768, 1000, BF, T.build_softmax_backward,
           T.softmax_backward_inputs, T.eager_softmax_backward, "bf16 grad, y"),
    _outer_sum_case("bias_grad_sum_dim0_1000_fp16", "general", 65536, 1000),
    _sized("dropout_residual_layer_norm_768_fp16", "general", 65536, 768, H, T.build_dropout_residual_layer_norm,
           T.dropout_residual_inputs, T.eager_dropout_residual_layer_norm, "fp16 x+res, w+b, seed", keep_output=0),
    _attention_case("attention_softmax_dropout_1024_fp16", "general", 8, 16, 1024),
    _sized("layer_norm_backward_768_fp16", "general", 65536, 768, H, T.build_layer_norm_backward,
           T.layer_norm_backward_inputs, T.eager_layer_norm_backward, "fp16 dy, x, w; fp32 mean, rstd -> dx, dw, db"),
    _sized("cross_entropy_50257_bf16", "general", 8192, 50257, BF, T.build_cross_entropy, T.cross_entropy_inputs,
           T.eager_cross_entropy, "bf16 logits, int64 target -> fp32 mean loss"),
]
CASES += GENERAL

BY_NAME = {c.name: c for c in CASES}


def select(spec: str | None) -> list[Case]:
    """Cases matching any comma-separated item (all if empty): an item matches a case
    whose name contains it, or whose group or one of whose tags it is (``training``)."""
    if not spec:
        return list(CASES)
    subs = [s.strip() for s in spec.split(",") if s.strip()]
    return [c for c in CASES if any(s in c.name or s == c.group or s in c.tags for s in subs)]
