"""The decompositions the backend asks AOTAutograd for.

Composite ops whose pieces pyfuser fuses (softmax, layer norm, GELU, dropout, the
activation backwards, ...) are decomposed into pointwise ops, reductions and casts,
so the partitioner sees one fusible region where ATen would launch one kernel per
op.  Everything else stays whole: matmuls, embedding, the loss forward's gather,
attention kernels and the like are not in this list and run in ATen.

``nll_loss_forward`` is pyfuser's own decomposition (unweighted [N, C] losses; others
stay in ATen).  ATen's gather reads one value per row from log-probabilities that
the fusion before it must store in full (fp32, [tokens, vocabulary]: a gigabyte for
8192 tokens of 30522 words); as ``gather`` in the fusion, each row's value is read inside the
log-softmax's own kernel, at the target's column, and nothing is stored.  A target
outside [0, C) that is not ``ignore_index`` makes the loss NaN (ATen stops with a
device-side assert instead); it is never silently read as another class.

``nll_loss_backward`` is pyfuser's too: ``where(class == target, -grad / total, 0)``
fuses into the log-softmax backward, where ATen would fill a zero fp32 tensor of
[tokens, vocabulary] and scatter one value per row into it.  It matters twice: ATen's
op takes the log-probabilities as an argument (for their shape only), which made
the min-cut partitioner save them, a gigabyte of fp32 for 8192 tokens.  With the
op decomposed (and ``detach`` an alias, which the partitioner may recompute), the
forward saves the 16-bit logits and two per-row values and the backward recomputes
the log-probabilities inside its kernel, as Inductor does.

The table is a selection from ``torch._decomp`` (its core-ATen decompositions plus
a few training ops); ops missing from the installed torch are skipped, so the same
list works on torch 2.11 (the GPU machine) and 2.13 (CI).
"""
from __future__ import annotations

import functools

import torch

aten = torch.ops.aten

# Names of OpOverloadPackets, so an op absent from this torch version is skipped.
DECOMPOSED = (
    # softmax family and their backwards
    "_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data",
    # normalization
    "native_layer_norm", "native_layer_norm_backward",
    # activations and their backwards
    "gelu", "gelu_backward", "silu", "silu_backward", "sigmoid_backward", "tanh_backward",
    "threshold_backward", "hardtanh", "hardtanh_backward", "leaky_relu", "leaky_relu_backward",
    "elu", "elu_backward", "softplus", "softplus_backward", "mish", "hardsigmoid", "hardswish",
    "log_sigmoid_forward", "log_sigmoid_backward",
    # dropout: the mask comes from rand_like, which pyfuser generates in the kernel
    "native_dropout", "native_dropout_backward",
    # pointwise composites
    "addcmul", "addcdiv", "rsub", "lerp", "masked_fill", "clamp_min", "clamp_max", "xlogy",
    "mse_loss", "mse_loss_backward", "std", "std_mean",
    # creation ops into fills pyfuser can generate
    "zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full", "zeros", "ones",
)


_REDUCTION_NONE, _REDUCTION_MEAN, _REDUCTION_SUM = 0, 1, 2


def nll_loss_forward(self, target, weight, reduction, ignore_index):
    """``(loss, total_weight)`` of ``nll_loss`` with the per-row gather (unweighted [N, C])."""
    if weight is not None or self.dim() != 2 or reduction not in (_REDUCTION_NONE, _REDUCTION_MEAN, _REDUCTION_SUM):
        return NotImplemented
    valid = target != ignore_index
    safe = torch.where(valid, target, 0)
    picked = torch.gather(self, 1, safe.unsqueeze(1)).squeeze(1)  # NaN in pyfuser's kernel when out of range
    losses = torch.where(valid, -picked, 0.0).to(self.dtype)
    if reduction == _REDUCTION_NONE:
        return losses, self.new_full((), 0.0)
    total_weight = valid.sum().to(self.dtype)
    if reduction == _REDUCTION_SUM:
        return losses.sum(), total_weight
    return losses.sum() / total_weight, total_weight


def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    """The gradient of ``nll_loss`` with respect to its [N, C] input, as a select
    between the row's gradient and zero (unweighted losses; others stay in ATen)."""
    if weight is not None or self.dim() != 2 or reduction not in (_REDUCTION_NONE, _REDUCTION_MEAN, _REDUCTION_SUM):
        return NotImplemented
    t = target.unsqueeze(1)
    hit = (torch.arange(self.shape[1], device=self.device).unsqueeze(0) == t) & (t != ignore_index)
    if reduction == _REDUCTION_NONE:
        g = -grad_output.unsqueeze(1)
    elif reduction == _REDUCTION_MEAN:
        g = -grad_output / total_weight
    else:
        g = -grad_output
    return torch.where(hit, g, 0.0).to(self.dtype)


def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The embedding's weight gradient as an ``index_add`` of the gradient rows into
    zeros (rows of ``padding_idx`` zeroed first, in a fused region).  ATen's op sorts
    the indices and then sums each run, two to three times slower
    (docs/TUNING.md#embedding-backward; ``index_add`` accumulates with atomics, so the sums' order, and their last
    bits, vary from run to run, as they do in Inductor's code for this op).  16-bit
    gradients are summed in fp32, as ATen's op does, and rounded once.  Under
    ``torch.use_deterministic_algorithms(True)`` (at compile time) and with
    ``scale_grad_by_freq`` the op stays in ATen."""
    if scale_grad_by_freq or torch.are_deterministic_algorithms_enabled():
        return NotImplemented
    flat = indices.reshape(-1)
    dtype = grad_output.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    rows = grad_output.reshape(flat.numel(), grad_output.shape[-1]).to(acc)
    if padding_idx >= 0:
        rows = torch.where((flat != padding_idx).unsqueeze(1), rows, 0.0)
    return rows.new_zeros((num_weights, rows.shape[1])).index_add(0, flat, rows).to(dtype)


def _alias(x):
    return aten.alias.default(x)


@functools.lru_cache(maxsize=None)
def decomposition_table() -> dict:
    """OpOverload -> decomposition, for ``aot_autograd(decompositions=...)``."""
    from ..compat import get_decompositions

    packets = [getattr(aten, name) for name in DECOMPOSED if hasattr(aten, name)]
    table = get_decompositions(packets)
    table[aten.nll_loss_forward.default] = nll_loss_forward
    table[aten.nll_loss_backward.default] = nll_loss_backward
    table[aten.embedding_dense_backward.default] = embedding_dense_backward
    # detach is no recomputable op for the min-cut partitioner; alias is (a view).  In
    # the traced joint graph nothing carries autograd state, so the two are the same.
    table[aten.detach.default] = _alias
    return table
