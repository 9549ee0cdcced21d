"""An int64 iota compared with an int64 label per row runs as a 32-bit comparison
(``ir.peephole.narrow_comparisons``): the same truth for every label, those outside
[0, 2**31) included, whose low 32 bits would match a column if truncated."""
from __future__ import annotations

import torch

from .common import DataType, check, fusion, sources_of

# Labels around every edge: matches, the ignore index, values whose low 32 bits are a
# column (2**32 + 5, -2**32 + 3), the int32 limits, and int64's.
LABELS = [0, 5, 39, -100, 2**32 + 5, -(2**32) + 3, 2**31 - 1, 2**31, -(2**31), 2**63 - 1, -(2**63), 3, 40, 17]


def one_hot(n, start, step, op, iota_first):
    def build(fd):
        lab = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        g = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        i = fd.ops.broadcast_in_dim(fd.ops.iota(n, start, step, DataType.Int), shape=[len(LABELS), n],
                                    broadcast_dims=[1])
        x = fd.ops.broadcast_in_dim(lab, shape=[len(LABELS), n], broadcast_dims=[0])
        hit = getattr(fd.ops, op)(*((i, x) if iota_first else (x, i)))
        fd.add_output(fd.ops.where(hit, g, 0.0))
    return fusion(build)


def test_labels_outside_int32_never_match_and_the_rest_compare_exactly():
    lab = torch.tensor(LABELS, dtype=torch.int64)
    g = torch.randn(len(LABELS), 40, generator=torch.Generator().manual_seed(3)) + 2.0
    for start, step, op, first in ((0, 1, "eq", True), (0, 1, "ne", False), (3, 2, "eq", False), (39, -1, "eq", True)):
        fd = one_hot(40, start, step, op, first)
        got, = check(fd, [lab, g])
        cols = torch.arange(40) * step + start
        hit = (cols[None, :] == lab[:, None]) if op == "eq" else (cols[None, :] != lab[:, None])
        assert torch.equal(got, torch.where(hit, g, 0.0)), (start, step, op)
        assert any("tl.int32) ==" in s or "tl.int32) !=" in s for s in sources_of(fd)), "compared in 64 bits"
