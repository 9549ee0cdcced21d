"""Where random ops get (seed, offset) when the definition gives none: PyTorch's
default generator of the device, with nvFuser's contract between the two forms of
a random op.  After ``torch.manual_seed(s)``, the i-th execute of a fusion with one
random op draws exactly what the same op written with ``rng_seed=s, rng_offset=i``
draws; random op k of a fusion with n of them takes offset ``n * i + k``.

Offsets here count Philox calls' counter values (one per op and execute), while
PyTorch's CUDA generator counts 32-bit words, four per call: the CUDA offset is
divided by 4 on the way in and advanced by 4 per random op on the way out, so the
generator stays consistent with PyTorch's own random ops.

The CPU generator is a Mersenne Twister without an offset, so the offset is kept
here, tied to the generator's state: each draw advances the generator and notes
the state it left.  A draw that finds a noted state continues from its offset; one
that finds the state ``torch.manual_seed`` leaves starts at 0; and when the
generator has been used in between (say ``torch.randn`` for inputs), it takes a
fresh 62-bit offset from the generator, reproducible after the same seed and the
same calls.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import torch

# Reading and advancing a generator's offset are two calls: threads drawing at once
# would share an offset, and with it their random numbers.
_LOCK = threading.Lock()
_WORDS_PER_CALL = 4  # PyTorch's Philox offsets count 32-bit words; one call gives 4


def draw_seed_offset(device: torch.device, n_ops: int) -> tuple[int, int]:
    """Reserve offsets for ``n_ops`` random ops; returns (seed, base offset).
    Random op k of the fusion then uses offset ``base + k``."""
    n_ops = max(n_ops, 1)
    with _LOCK:
        if device.type == "cuda":
            gen = torch.cuda.default_generators[device.index if device.index is not None
                                                else torch.cuda.current_device()]
            seed = gen.initial_seed()
            base = -(-gen.get_offset() // _WORDS_PER_CALL)  # round up: never reuse words PyTorch used
            gen.set_offset(_WORDS_PER_CALL * (base + n_ops))
            return seed, base
        return _cpu_seed_offset(n_ops)


# The generator's state each recent draw left (its bytes) -> (seed, the offset the
# next draw from that state takes).  Keyed by state, so a state saved and restored
# (``fd.validate``, a benchmark swapping streams) continues as it would have.
_CPU_STATES: OrderedDict = OrderedDict()
_CPU_KEEP = 1024
_cpu_fresh: dict = {}  # seed -> the state torch.manual_seed(seed) leaves (one entry)


def _fresh_state(seed: int) -> bytes:
    if seed not in _cpu_fresh:
        _cpu_fresh.clear()
        _cpu_fresh[seed] = torch.Generator().manual_seed(seed).get_state().numpy().tobytes()
    return _cpu_fresh[seed]


def _cpu_seed_offset(n_ops: int) -> tuple[int, int]:
    gen = torch.default_generator
    seed = gen.initial_seed()
    state = gen.get_state().numpy().tobytes()
    known = _CPU_STATES.get(state)
    if known is not None and known[0] == seed:
        base = known[1]
    elif state == _fresh_state(seed):
        base = 0
    else:
        base = int(torch.randint(0, 2**62, (1,), dtype=torch.int64, generator=gen).item())
    # Advance the generator, so that torch.manual_seed(seed) afterwards is told apart
    # from "nothing happened since" (both would otherwise leave the fresh state).
    torch.randint(0, 2, (1,), generator=gen)
    _CPU_STATES[gen.get_state().numpy().tobytes()] = (seed, base + n_ops)
    while len(_CPU_STATES) > _CPU_KEEP:
        _CPU_STATES.popitem(last=False)
    return seed, base
