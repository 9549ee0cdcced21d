"""``index.div_magic``: the multiply-and-shift that replaces a kernel's integer
division by a runtime extent must equal ``//`` for every int32 index."""
from __future__ import annotations

import random

import pytest

from pyfuser.codegen.index import div_magic

# Divisors around every power of two, small ones, and random ones up to 2^31 - 1.
_rnd = random.Random(0)
DIVISORS = sorted({1, 2, 3, 5, 7, 12, 128, 1536, 30522, 2**31 - 1}
                  | {(1 << k) + e for k in range(31) for e in (-1, 0, 1) if 1 <= (1 << k) + e < 2**31}
                  | {_rnd.randrange(1, 2**31) for _ in range(300)})


def numerators(d):
    """Where a rounding error would show first: around multiples of d, and the int32 top."""
    top = 2**31 - 1
    out = {0, 1, d - 1, d, d + 1, top, top - 1, top - top % d, top - top % d - 1}
    for q in (1, 2, 3, top // d, top // d - 1, _rnd.randrange(0, top // d + 1)):
        out |= {q * d - 1, q * d, q * d + d - 1}
    out |= {_rnd.randrange(0, 2**31) for _ in range(50)}
    return [n for n in out if 0 <= n < 2**31]


def test_multiply_shift_equals_floor_division():
    for d in DIVISORS:
        m, p = div_magic(d)
        assert 2**31 <= m < 2**32, (d, m)
        for n in numerators(d):
            assert (n * m) >> p == n // d, (n, d, m, p)
            assert n * m < 2**64


@pytest.mark.parametrize("width,multiply", [(30522, True), (4096, False)])
def test_flat_kernels_divide_by_multiply_unless_the_width_allows_vector_loads(width, multiply, monkeypatch):
    """A bias broadcast over rows is indexed by ``x % width`` in a flat kernel: with
    a width that is a multiple of 16 Triton reads that remainder and vectorizes the
    bias load, so ``%`` stays; any other width gets the multiply and shift."""
    import torch

    from pyfuser import DataType, FusionDefinition
    from pyfuser.runtime import plan as plan_mod

    seen = []
    original = plan_mod.load_kernel
    monkeypatch.setattr(plan_mod, "load_kernel", lambda n, s, d: (seen.append(s), original(n, s, d))[1])
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
        fd.add_output(fd.ops.add(a, fd.ops.broadcast_in_dim(b, shape=[3, width], broadcast_dims=[1])))
    g = torch.Generator().manual_seed(width)
    x, y = torch.randn(3, width, generator=g).half(), torch.randn(width, generator=g).half()
    assert torch.equal(fd.execute([x, y])[0], x + y)
    assert any("_dm" in s for s in seen) == multiply
