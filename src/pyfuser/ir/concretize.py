"""Bind a FusionIR to the inputs of one ``execute``: check them, compute every
value's concrete shape with the same shape rules the definition used, and evaluate
the extents (sizes as values, ``ir.extents``) that shapes and kernels read."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import DefinitionError, InputError, InputTypeError
from .dtypes import DataType, from_torch
from .extents import evaluate
from .infer import output_shapes
from .values import FusionIR, ScalarVal, TensorVal, Val


@dataclass
class Binding:
    values: dict  # Val -> torch.Tensor (tensor inputs), Python number (scalars) or tuple (vectors)
    shapes: dict  # Val -> tuple of ints, for every live tensor
    device: torch.device


def _check_tensor(t: TensorVal, x, pos: int):
    if not isinstance(x, torch.Tensor):
        raise InputTypeError(f"execute: input {pos} ({t.name}) must be a torch.Tensor, got {type(x).__name__}")
    try:
        dt = from_torch(x.dtype)
    except TypeError as err:
        raise InputTypeError(f"execute: input {pos} ({t.name}): {err}") from None
    if dt is not t.dtype:
        raise InputError(f"execute: input {pos} ({t.name}) must have dtype {t.dtype}, got {dt} ({x.dtype})")
    if x.dim() != t.rank:
        raise InputError(f"execute: input {pos} ({t.name}) must have rank {t.rank}, got rank {x.dim()} "
                         f"(sizes {list(x.shape)})")
    for d, (want, got) in enumerate(zip(t.shape, x.shape)):
        if want is not None and want != got:
            raise InputError(f"execute: input {pos} ({t.name}) dim {d} must have size {want}, got {got} "
                             f"(sizes {list(x.shape)})")
    _check_contiguity(t, x, pos)


def _check_contiguity(t: TensorVal, x: torch.Tensor, pos: int):
    if x.numel() == 0:  # no element is addressed, and torch gives empty tensors arbitrary strides
        return
    rank = t.rank
    order = list(reversed(range(rank)))  # innermost first
    if t.stride_order is not None:
        order = sorted(range(rank), key=lambda d: t.stride_order[d])
    expected = 1
    for d in order:
        # Broadcast dims (size 1, declared None, or expanded with stride 0) are not
        # part of the layout: the next dim continues from the last dense one
        if x.shape[d] == 1 or t.contiguity[d] is None or x.stride(d) == 0:
            continue
        if t.contiguity[d] is True and x.stride(d) != expected:
            raise InputError(f"execute: input {pos} ({t.name}) is declared contiguous in dim {d} "
                             f"(contiguity {list(t.contiguity)}, stride_order "
                             f"{list(t.stride_order) if t.stride_order else 'default'}), but its strides are "
                             f"{list(x.stride())} for sizes {list(x.shape)}; expected stride {expected} in dim {d}")
        expected = x.stride(d) * x.shape[d]


def _check_scalar(s: ScalarVal, x, pos: int):
    if isinstance(x, torch.Tensor) and x.dim() == 0:
        x = x.item()
    ok = {DataType.Bool: (bool,), DataType.Int: (int,), DataType.Int32: (int,)}.get(
        s.dtype, (int, float, complex) if s.dtype.is_complex else (int, float))
    if not isinstance(x, ok) or (isinstance(x, bool) and s.dtype is not DataType.Bool):
        raise InputTypeError(f"execute: input {pos} ({s.name}) must be a Python number of dtype {s.dtype}, "
                             f"got {type(x).__name__} {x!r}")
    if s.dtype.is_complex:
        return complex(x)
    bits = {DataType.Int: 64, DataType.Int32: 32}.get(s.dtype)
    if bits is not None and not -2**(bits - 1) <= x < 2**(bits - 1):
        raise InputError(f"execute: input {pos} ({s.name}) of dtype {s.dtype} must be in [-2**{bits - 1}, "
                         f"2**{bits - 1} - 1], got {x}")
    return x


def cpu_scalars_on_device(ir, inputs):
    """nvFuser's CPU scalars: a 0-dim CPU tensor given for a 0-dim input beside tensors on
    a GPU is a number of the fusion, not a tensor on another device.  Its value becomes a
    0-dim tensor on that GPU, written by a fill kernel that takes it as an argument (no
    copy from host memory).  CPU tensors of other ranks are left for ``bind`` to reject."""
    positions = ir.scalar_tensor_inputs()
    if not positions:
        return inputs
    dev = next((x.device for x in inputs if isinstance(x, torch.Tensor) and not x.is_cpu), None)
    if dev is None:
        return inputs
    moved = list(inputs)
    for pos in positions:
        x = moved[pos] if pos < len(moved) else None
        if isinstance(x, torch.Tensor) and x.is_cpu and x.dim() == 0:
            moved[pos] = torch.full((), x.item(), dtype=x.dtype, device=dev)
    return moved


def bind(ir: FusionIR, inputs, device=None) -> Binding:
    if not isinstance(inputs, (list, tuple)):
        raise InputTypeError(f"execute: inputs must be a list, got {type(inputs).__name__}")
    inputs = cpu_scalars_on_device(ir, inputs)
    if len(inputs) != len(ir.inputs):
        names = ", ".join(v.name for v in ir.inputs)
        raise InputError(f"execute: expected {len(ir.inputs)} inputs ({names}), got {len(inputs)}")
    values: dict[Val, object] = {}
    shapes: dict[Val, tuple] = {}
    devices = set()
    for pos, (v, x) in enumerate(zip(ir.inputs, inputs)):
        if isinstance(v, TensorVal):
            _check_tensor(v, x, pos)
            values[v] = x
            shapes[v] = tuple(x.shape)
            devices.add(x.device)
        else:
            values[v] = _check_scalar(v, x, pos)
    if len(devices) > 1:
        cpu = [f"{v.name} {list(x.shape)}" for v, x in zip(ir.inputs, inputs)
               if isinstance(v, TensorVal) and x.device.type == "cpu"]
        raise InputError(f"execute: all tensor inputs must be on one device, got {sorted(map(str, devices))}; "
                         f"only 0-dim CPU tensors (scalars) may join tensors on a GPU, got CPU tensor(s) "
                         f"{', '.join(cpu)}")
    if devices:
        dev = devices.pop()
        if device is not None and torch.device(device) != dev:
            raise InputError(f"execute: device={device} contradicts the inputs' device {dev}")
    else:
        dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    for v in ir.vals:
        if isinstance(v, ScalarVal) and v.is_constant:
            values[v] = v.value
    for e in ir.bound_exprs():
        try:
            if not any(isinstance(o, TensorVal) for o in e.outputs):  # extents, scalar arithmetic
                args = [shapes[v] if isinstance(v, TensorVal) else values[v] for v in e.inputs]
                values.update(zip(e.outputs, evaluate(e, args)))
                continue
            in_shapes = [shapes.get(v) if isinstance(v, TensorVal) else None for v in e.inputs]
            outs = output_shapes(e, in_shapes, values.__getitem__)
        except DefinitionError as err:
            raise InputError(f"execute: with these inputs, {err}") from None
        for o, s in zip(e.outputs, outs):
            if isinstance(o, TensorVal):
                shapes[o] = tuple(s)
    return Binding(values, shapes, dev)
