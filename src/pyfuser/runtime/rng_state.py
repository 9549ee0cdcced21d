"""Where random ops get (seed, offset) when the definition gives none: PyTorch's
default generator of the device, advanced like PyTorch's own random ops advance it,
so consecutive executes draw new numbers and ``torch.manual_seed`` replays them."""
from __future__ import annotations

import threading

import torch

# Reading and advancing a CUDA generator's offset are two calls: threads drawing at
# once would share an offset, and with it their random numbers.
_CUDA_LOCK = threading.Lock()
_OFFSET_STEP = 4  # offsets move in multiples of 4, as PyTorch's Philox offsets do


def draw_seed_offset(device: torch.device, n_ops: int) -> tuple[int, int]:
    """Reserve offsets for ``n_ops`` random ops; returns (seed, base offset).
    Random op k of the fusion then uses offset ``base + 4 * k``."""
    if device.type == "cuda":
        gen = torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
        with _CUDA_LOCK:
            seed = gen.initial_seed()
            offset = gen.get_offset()
            gen.set_offset(offset + _OFFSET_STEP * max(n_ops, 1))
        return seed, offset
    # The CPU generator is a Mersenne Twister with no offset; draw a fresh Philox seed
    # from it, which advances its state and replays after torch.manual_seed.
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())
    return seed, 0
