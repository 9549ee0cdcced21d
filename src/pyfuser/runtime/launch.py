"""Launching a Program's kernels: the direct launcher (Triton's compiled kernel without
its per-call binding), the allocator of a run's outputs, launch errors and poisoning.
The private torch and Triton APIs behind them are reached through ``pyfuser.compat``.
"""
from __future__ import annotations

import torch

from ..compat import compile_for, current_cuda_device, fast_empty_strided, needs_scratch, raw_launcher
from ..errors import CompileError


def direct_launcher(src, fn, grid, args, kw):
    """(runner, constexpr values) that launch the kernel Triton compiled for these
    arguments without its per-call argument binding and cache lookup (about half of a
    small launch's host time).  Safe because a Program is specific to its inputs'
    dtypes, shapes, strides and 16-byte alignment, its integer arguments are
    constants, and outputs, intermediates and host results come fresh from torch's
    allocator (aligned).  None if the compiled kernel cannot be had; the JIT path is
    used then."""
    try:
        k = compile_for(fn, grid, args, kw)
        g = tuple(grid) + (1,) * (3 - len(grid))
        consts = [kw[name] for name in src.constexprs]
        if needs_scratch(k):
            return k[g], consts  # Triton's own runner allocates the scratch
        device = next((a.device.index for a in args if isinstance(a, torch.Tensor)), None)
        return raw_launcher(k, g, device), consts
    except Exception:
        return None


def allocator(device):
    """``empty(shape, strides, dtype)`` for a run's outputs: the C++ entry point that
    Inductor's generated code allocates with, for the CPU and the current CUDA device
    (no Python argument parsing; a training step allocates hundreds of tensors), else
    ``torch.empty_strided`` (cheaper than ``torch.empty``, which adds a memory-format
    step).  docs/TUNING.md#host-time"""
    fast = fast_empty_strided(device.type)
    if fast is not None and (device.type == "cpu" or device.index == current_cuda_device()):
        return fast
    return lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype, device=device)


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says the device ran out of memory: the caching allocator's
    ``OutOfMemoryError``, or a CUDA call's "out of memory" (a kernel launch that loads
    its module, a library's workspace)."""
    return isinstance(err, torch.OutOfMemoryError) or (isinstance(err, RuntimeError)
                                                       and "out of memory" in str(err).lower())


def launch_error(src, err) -> Exception:
    """What a failed launch raises (``raise launch_error(src, err)`` in its handler): a
    CompileError naming the kernel, caused by ``err``; but running out of memory stays
    the error it is, so that the caller's handling of it (a smaller batch, the
    backend's capture fallback) sees torch's ``OutOfMemoryError``."""
    if isinstance(err, CompileError) or out_of_memory(err):
        return err
    wrapped = CompileError(f"pyfuser: kernel {src.name} failed to compile or run: {type(err).__name__}: {err}")
    wrapped.__cause__ = err
    return wrapped


def poison_tensor(t: torch.Tensor):
    """Fill an output before its kernel runs, so an element no kernel writes shows."""
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max)
