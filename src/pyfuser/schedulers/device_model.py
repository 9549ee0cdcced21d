"""The GPU the heuristics plan for: ``DeviceModel``, its presets and its override.

Every rule that depends on the GPU (SMs, the register file, shared memory, warps per
SM, L2, grid limits, bandwidth, GEMM rate) reads it from the segment's model
(``Segment.model``), never from a number written for one GPU kind.  Where the model
comes from, first match wins:

1. a ``with device_model("a100"):`` block (a context variable, per thread, as
   ``Choices``): plan and generate kernels as if for another GPU, on any machine;
2. ``PYFUSER_DEVICE_MODEL`` (a preset's name), read when a fusion is planned;
3. the device's own properties (``DeviceModel.of``), queried once per device index;
4. no GPU at all: the ``h200`` preset, so that CPU planning (the interpreter's
   kernels, the golden kernels, ``bench.offline``) is the same on every machine.

The model is part of the runtime's plan signature, so plans and kernels made for one
GPU kind are never reused for another.  docs/CODEGEN.md "The device model" lists
which rule reads which property.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass

import torch

from ..errors import ChoicesError
from ..settings import DEVICE_MODELS, read

KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class DeviceModel:
    """What the heuristics know of a GPU.  Frozen: equal models plan alike, and a model
    is a part of the plan's signature."""

    name: str  # a preset's name, or the device's (torch's ``name``)
    arch: int  # compute capability as one number: 90 for sm_90
    sms: int  # streaming multiprocessors
    l2_bytes: int
    registers_per_sm: int  # 32-bit registers of one SM's register file
    shared_bytes_per_sm: int  # shared memory of one SM
    shared_bytes_per_block: int  # the most one program (thread block) may use (opt-in)
    max_warps_per_sm: int  # resident warps per SM
    bandwidth: int  # DRAM bytes per second (the vendor's peak)
    matmul_flops: int  # dense 16-bit tensor-core FLOP/s with fp32 accumulation (the vendor's peak)
    max_grid_y: int = 65535  # CUDA's limit on a grid's second axis (the pointwise k blocks)

    @property
    def register_file_bytes(self) -> int:
        return 4 * self.registers_per_sm

    @classmethod
    def of(cls, device=None) -> DeviceModel:
        """The model of ``device`` (a ``torch.device``, an index or None: the current
        CUDA device), from its properties, once per index; the ``h200`` preset when
        no GPU is present."""
        if not torch.cuda.is_available():
            return PRESETS["h200"]
        index = device.index if isinstance(device, torch.device) else device
        return _of_index(torch.cuda.current_device() if index is None else index)


def _of_index(index: int) -> DeviceModel:
    hit = _BY_INDEX.get(index)
    if hit is None:
        hit = _BY_INDEX[index] = from_properties(torch.cuda.get_device_properties(index))
    return hit


_BY_INDEX: dict = {}


def from_properties(p) -> DeviceModel:
    """A model from ``torch.cuda.get_device_properties``'s answer: what torch reports,
    and what it does not report (bandwidth, GEMM rate; shared memory and warps on old
    torch) from the preset of the same architecture, else the nearest older one."""
    arch = p.major * 10 + p.minor
    base = _nearest_preset(arch)
    threads = getattr(p, "max_threads_per_multi_processor", 0)
    return DeviceModel(
        name=p.name, arch=arch, sms=p.multi_processor_count, l2_bytes=p.L2_cache_size,
        registers_per_sm=getattr(p, "regs_per_multiprocessor", 0) or base.registers_per_sm,
        shared_bytes_per_sm=getattr(p, "shared_memory_per_multiprocessor", 0) or base.shared_bytes_per_sm,
        shared_bytes_per_block=getattr(p, "shared_memory_per_block_optin", 0) or base.shared_bytes_per_block,
        max_warps_per_sm=threads // 32 if threads else base.max_warps_per_sm,
        bandwidth=base.bandwidth, matmul_flops=base.matmul_flops)


def _nearest_preset(arch: int) -> DeviceModel:
    older = [m for m in PRESETS.values() if m.arch <= arch]
    return max(older, key=lambda m: m.arch) if older else min(PRESETS.values(), key=lambda m: m.arch)


# The presets' numbers are the vendors' published specifications: NVIDIA's product
# datasheets (SMs, L2, bandwidth, tensor FLOP/s), the Hopper, Ampere (GA100) and Ada
# (AD102) architecture whitepapers, and the CUDA C++ Programming Guide's table of
# technical specifications per compute capability (registers, shared memory, warps
# per SM, grid limits).  L2 sizes are as CUDA reports them (``L2_CACHE_SIZE``).
PRESETS = {
    # H200 SXM: 132 SMs, 60 MiB L2 as CUDA reports it, 4.8 TB/s HBM3e, 989 TFLOP/s
    # dense FP16/BF16.  sm_90: 228 KiB shared memory per SM (227 KiB per block), 64
    # warps per SM.  Also the model without a GPU: the golden kernels are planned for it.
    "h200": DeviceModel("h200", 90, 132, 60 * MIB, 65536, 228 * KIB, 227 * KIB, 64, 4_800 * 10**9, 989 * 10**12),
    # H100 SXM5: 132 SMs, 50 MiB L2, 3.35 TB/s HBM3, 989 TFLOP/s dense FP16/BF16; sm_90.
    "h100": DeviceModel("h100", 90, 132, 50 * MIB, 65536, 228 * KIB, 227 * KIB, 64, 3_350 * 10**9, 989 * 10**12),
    # A100 SXM4 80 GB: 108 SMs, 40 MiB L2, 2.039 TB/s HBM2e, 312 TFLOP/s dense
    # FP16/BF16.  sm_80: 164 KiB shared memory per SM (163 KiB per block), 64 warps per SM.
    "a100": DeviceModel("a100", 80, 108, 40 * MIB, 65536, 164 * KIB, 163 * KIB, 64, 2_039 * 10**9, 312 * 10**12),
    # GeForce RTX 4090 (AD102): 128 SMs, 72 MiB L2, 1.008 TB/s GDDR6X, 165.2 TFLOP/s
    # dense FP16 with FP32 accumulation.  sm_89: 100 KiB shared memory per SM (99 KiB
    # per block), 48 warps per SM.
    "sm89": DeviceModel("sm89", 89, 128, 72 * MIB, 65536, 100 * KIB, 99 * KIB, 48, 1_008 * 10**9,
                        165_200 * 10**9),
}
assert tuple(PRESETS) == DEVICE_MODELS, "settings.DEVICE_MODELS names the presets"
H200 = PRESETS["h200"]


def preset(name: str) -> DeviceModel:
    """The preset ``name``; ``ChoicesError`` naming the presets otherwise."""
    hit = PRESETS.get(name)
    if hit is None:
        raise ChoicesError(f"device_model: no preset {name!r}; presets: {', '.join(PRESETS)}")
    return hit


_OVERRIDE: contextvars.ContextVar = contextvars.ContextVar("pyfuser_device_model", default=None)


class device_model:  # noqa: N801  (used as a function: ``with device_model("a100"):``)
    """Plan and generate kernels inside the block as if for ``model`` (a preset's name or
    a ``DeviceModel``), whatever GPU is present.  The model in force is part of every
    plan's signature and of the prepared programs' fingerprint.  Scoped to the thread
    (a ``contextvars`` variable); nested blocks: the inner one wins."""

    __slots__ = ("model", "_tokens")

    def __init__(self, model):
        if isinstance(model, str):
            model = preset(model)
        if not isinstance(model, DeviceModel):
            raise ChoicesError(f"device_model: expected a preset's name or a DeviceModel, got {model!r}")
        self.model = model
        self._tokens = []

    def __enter__(self) -> DeviceModel:
        self._tokens.append(_OVERRIDE.set(self.model))
        return self.model

    def __exit__(self, *exc):
        _OVERRIDE.reset(self._tokens.pop())
        return False

    def __repr__(self):
        return f"device_model({self.model.name!r})"


# ``model_override()``: the ``device_model`` block's model in force, or None; the one
# part of the model a cached execute's fingerprint reads (one context-variable read).
model_override = _OVERRIDE.get


def model_for(device=None) -> DeviceModel:
    """The model the heuristics plan with for inputs on ``device`` (a ``torch.device``;
    CPU inputs and None: the current GPU's): the override, ``PYFUSER_DEVICE_MODEL``,
    the device's own, in that order (module docstring)."""
    m = _OVERRIDE.get()
    if m is not None:
        return m
    name = read("device_model")
    if name:
        return PRESETS[name]
    if isinstance(device, torch.device) and device.type != "cuda":
        device = None
    return DeviceModel.of(device)


def current_model() -> DeviceModel:
    """``model_for(None)``: the model a plan made now, outside any segment, would use."""
    return model_for(None)


def prev_pow2(n: int) -> int:
    """The largest power of 2 not above ``n`` (1 for ``n`` < 2)."""
    return 1 if n < 2 else 1 << (n.bit_length() - 1)
