"""The seed fusions of the original report, with their sizes as parameters.

Each ``build_*`` function makes the same API calls, in the same order, as the
matching file in the report (2022 API: ``symbolic_sizes``, ``define_constant``,
``view(original_shape, new_shape)``, ``broadcast_in_dim(output_shape=...)``,
reductions with ``axes=``); only the sizes hard-coded in the report's view and
broadcast shapes are arguments here, so tests can run them small and benchmarks
at the report's sizes.  ``eager_*`` is the same computation written by hand in
PyTorch eager, the oracle for tests and the baseline for benchmarks.

``SEEDS`` lists each case with its report sizes and a CPU-friendly small size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..frontend import FusionDefinition
from ..ir.dtypes import DataType

DROPOUT_KEEP_SCALE = 1.11111  # the report's 1 / (1 - 0.1), as spelled there


def build_bert_softmax_dropout(fd: FusionDefinition, B: int, H: int, S: int) -> None:
    """Attention scores [B*H, S, S] (fp16) + mask [B, 1, 1, S] (fp32): scale, mask,
    softmax over the last dim, dropout(p=0.1).  Outputs T11 (the scaled mask,
    [B, 1, 1, S]), T24 (softmax), T27 (keep mask), T33 (dropped out, fp16)."""
    T0 = fd.define_tensor(symbolic_sizes=[-1, -1, -1], contiguous=[True, True, True], dtype=DataType.Half)
    T1 = fd.define_tensor(symbolic_sizes=[-1, 1, 1, -1], contiguous=[True, True, True, True], dtype=DataType.Float)
    T2 = fd.ops.view(T0, original_shape=[B * H, S, S], new_shape=[B, H, S, S])
    S3 = fd.define_constant(1)
    T4 = fd.ops.mul(T1, S3)
    T5 = fd.ops.cast(T2, dtype=DataType.Float)
    S6 = fd.define_constant(1.00000)
    T7 = fd.ops.sub(S6, T4)
    S8 = fd.define_constant(8.00000)
    T9 = fd.ops.div(T5, S8)
    S10 = fd.define_constant(-10000.0)
    T11 = fd.ops.mul(T7, S10)
    T12 = fd.ops.cast(T9, dtype=DataType.Half)
    T13 = fd.ops.broadcast_in_dim(T11, output_shape=[B, H, S, S], broadcast_dims=[0, 1, 2, 3])
    T14 = fd.ops.cast(T12, dtype=DataType.Float)
    T15 = fd.ops.add(T14, T13)
    T16 = fd.ops.max(T15, axes=[3], keepdim=False, dtype=DataType.Null)
    T17 = fd.ops.broadcast_in_dim(T16, output_shape=[B, H, S, 1], broadcast_dims=[0, 1, 2])
    T18 = fd.ops.broadcast_in_dim(T17, output_shape=[B, H, S, S], broadcast_dims=[0, 1, 2, 3])
    T19 = fd.ops.sub(T15, T18)
    T20 = fd.ops.exp(T19)
    T21 = fd.ops.sum(T20, axes=[3], keepdim=False, dtype=DataType.Null)
    T22 = fd.ops.broadcast_in_dim(T21, output_shape=[B, H, S, 1], broadcast_dims=[0, 1, 2])
    T23 = fd.ops.broadcast_in_dim(T22, output_shape=[B, H, S, S], broadcast_dims=[0, 1, 2, 3])
    T24 = fd.ops.div(T20, T23)
    T25 = fd.ops.rand_like(T24)
    S26 = fd.define_constant(0.100000)
    T27 = fd.ops.gt(T25, S26)
    T28 = fd.ops.cast(T27, dtype=DataType.Float)
    T29 = fd.ops.mul(T28, T24)
    S30 = fd.define_constant(DROPOUT_KEEP_SCALE)
    T31 = fd.ops.mul(T29, S30)
    T32 = fd.ops.cast(T31, dtype=DataType.Half)
    T33 = fd.ops.broadcast_in_dim(T32, output_shape=[B, H, S, S], broadcast_dims=[0, 1, 2, 3])
    fd.add_output(T11)
    fd.add_output(T24)
    fd.add_output(T27)
    fd.add_output(T33)


def build_log_softmax_full(fd: FusionDefinition, rows_a: int, rows_b: int, V: int) -> None:
    """log_softmax over V of a [rows_a * rows_b, V] fp16 input, behind two views.
    Outputs T1 (the first view, [rows_a, rows_b, V]), T14 (fp16) and T15 (fp32)."""
    R = rows_a * rows_b
    T0 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Half)
    T1 = fd.ops.view(T0, original_shape=[R, V], new_shape=[rows_a, rows_b, V])
    T2 = fd.ops.view(T1, original_shape=[rows_a, rows_b, V], new_shape=[-1, V])
    T3 = fd.ops.cast(T2, dtype=DataType.Float)
    T4 = fd.ops.max(T3, axes=[1], keepdim=False, dtype=DataType.Null)
    T5 = fd.ops.broadcast_in_dim(T4, output_shape=[R, 1], broadcast_dims=[0])
    T6 = fd.ops.broadcast_in_dim(T5, output_shape=[R, V], broadcast_dims=[0, 1])
    T7 = fd.ops.sub(T3, T6)
    T8 = fd.ops.exp(T7)
    T9 = fd.ops.sum(T8, axes=[1], keepdim=False, dtype=DataType.Null)
    T10 = fd.ops.broadcast_in_dim(T9, output_shape=[R, 1], broadcast_dims=[0])
    T11 = fd.ops.log(T10)
    T12 = fd.ops.broadcast_in_dim(T11, output_shape=[R, V], broadcast_dims=[0, 1])
    T13 = fd.ops.sub(T7, T12)
    T14 = fd.ops.cast(T13, dtype=DataType.Half)
    T15 = fd.ops.cast(T14, dtype=DataType.Float)
    fd.add_output(T1)
    fd.add_output(T14)
    fd.add_output(T15)


def _log_softmax_head(fd: FusionDefinition, R: int, V: int):
    T0 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Half)
    T3 = fd.ops.cast(T0, dtype=DataType.Float)
    T4 = fd.ops.max(T3, axes=[1], keepdim=False, dtype=DataType.Null)
    T5 = fd.ops.broadcast_in_dim(T4, output_shape=[R, 1], broadcast_dims=[0])
    T6 = fd.ops.broadcast_in_dim(T5, output_shape=[R, V], broadcast_dims=[0, 1])
    T7 = fd.ops.sub(T3, T6)
    T8 = fd.ops.exp(T7)
    T9 = fd.ops.sum(T8, axes=[1], keepdim=False, dtype=DataType.Null)
    T10 = fd.ops.broadcast_in_dim(T9, output_shape=[R, 1], broadcast_dims=[0])
    T11 = fd.ops.log(T10)
    T12 = fd.ops.broadcast_in_dim(T11, output_shape=[R, V], broadcast_dims=[0, 1])
    return T7, T12


def build_log_softmax_logsum(fd: FusionDefinition, R: int, V: int) -> None:
    """The report's fast variant: output is log(sum(exp(x - max))) broadcast to [R, V] (fp32)."""
    _, T12 = _log_softmax_head(fd, R, V)
    fd.add_output(T12)


def build_log_softmax_sub(fd: FusionDefinition, R: int, V: int) -> None:
    """The report's slow variant: log_softmax of a [R, V] fp16 input, output fp32."""
    T7, T12 = _log_softmax_head(fd, R, V)
    T13 = fd.ops.sub(T7, T12)
    fd.add_output(T13)


# --- PyTorch eager, written by hand --------------------------------------------


def eager_bert_softmax_dropout(x: torch.Tensor, mask: torch.Tensor, B: int, H: int, S: int):
    """Returns (scaled mask, softmax, keep mask, dropped-out fp16); the random draw is
    torch's own, so only the first two outputs are comparable bit for bit."""
    scaled_mask = (1.0 - mask) * -10000.0
    scores = (x.view(B, H, S, S).float() / 8.0).half().float() + scaled_mask
    probs = torch.softmax(scores, dim=-1)
    keep = torch.rand_like(probs) > 0.1
    return scaled_mask, probs, keep, (keep.float() * probs * DROPOUT_KEEP_SCALE).half()


def eager_log_softmax_full(x: torch.Tensor, rows_a: int, rows_b: int, V: int):
    view = x.view(rows_a, rows_b, V)
    out = torch.log_softmax(view.reshape(-1, V).float(), dim=-1).half()
    return view, out, out.float()


def eager_log_softmax_logsum(x: torch.Tensor, R: int, V: int):
    xf = x.float()
    return (torch.log(torch.exp(xf - xf.amax(1, keepdim=True)).sum(1, keepdim=True)).expand(R, V),)


def eager_log_softmax_sub(x: torch.Tensor, R: int, V: int):
    return (torch.log_softmax(x.float(), dim=1),)


# --- the case list ------------------------------------------------------------


@dataclass(frozen=True)
class SeedCase:
    name: str  # the file name in the report's seed folder
    build: Callable  # build(fd, *sizes)
    eager: Callable  # eager(*inputs, *sizes) -> tuple of outputs
    full_sizes: tuple  # the report's sizes
    small_sizes: tuple  # small enough for CPU tests (odd extents on purpose)
    make_inputs: Callable  # make_inputs(sizes, device, generator) -> list of tensors


def _bert_inputs(sizes, device, generator=None):
    B, H, S = sizes
    x = torch.randn(B * H, S, S, generator=generator, dtype=torch.float32).to(device, torch.float16)
    mask = (torch.rand(B, 1, 1, S, generator=generator) > 0.2).to(device, torch.float32)
    return [x, mask]


def _rows_inputs(sizes, device, generator=None):
    rows = sizes[0] * sizes[1] if len(sizes) == 3 else sizes[0]
    return [(3 * torch.randn(rows, sizes[-1], generator=generator)).to(device, torch.float16)]


SEEDS = {
    "bert_softmax_dropout": SeedCase("bert_softmax_dropout", build_bert_softmax_dropout,
                                     eager_bert_softmax_dropout, (64, 12, 128), (2, 3, 16), _bert_inputs),
    "log_softmax_full": SeedCase("log_softmax_full", build_log_softmax_full, eager_log_softmax_full,
                                 (64, 128, 30522), (2, 8, 1001), _rows_inputs),
    "log_softmax_logsum": SeedCase("log_softmax_logsum", build_log_softmax_logsum, eager_log_softmax_logsum,
                                   (8192, 30522), (16, 1001), _rows_inputs),
    "log_softmax_sub": SeedCase("log_softmax_sub", build_log_softmax_sub, eager_log_softmax_sub,
                                (8192, 30522), (16, 1001), _rows_inputs),
}
