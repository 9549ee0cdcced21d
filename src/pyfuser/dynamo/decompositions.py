"""The decompositions the backend asks AOTAutograd for.

Composite ops whose pieces pyfuser fuses (softmax, layer norm, GELU, dropout, the
activation backwards, ...) are decomposed into pointwise ops, reductions and casts,
so the partitioner sees one fusible region where ATen would launch one kernel per
op.  Everything else stays whole: matmuls, embedding, losses with gathers, attention
kernels and the like are not in this list and run in ATen.

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


@functools.lru_cache(maxsize=None)
def decomposition_table() -> dict:
    """OpOverload -> decomposition, for ``aot_autograd(decompositions=...)``."""
    from torch._decomp import get_decompositions

    packets = [getattr(aten, name) for name in DECOMPOSED if hasattr(aten, name)]
    return get_decompositions(packets)
