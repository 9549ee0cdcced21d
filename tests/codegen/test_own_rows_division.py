"""A smaller output stored over its own rows whose row index needs a division.

The attention mask of a padded batch ([B, 1, S, S], from a [1, 1, S, 1] position
test and a [B, 1, 1, S] padding mask) is an output of the [B, H, S, S] softmax tile;
unravelling its row counter to the position input's coordinate divides by S.  Under
Triton's interpreter that counter is a Python int, which the magic-number division's
``.to(tl.uint64)`` fails on (a known gap); compiled for a GPU it is a tensor, and the
kernel matches the reference there."""
import torch

from .common import DataType, check, fusion, gen_for, make_tensor

B, H, S = 3, 2, 8


def _mask_beside_softmax(fd):
    x = fd.define_tensor(shape=[B, H, S, S], contiguity=[True] * 4, dtype=DataType.Float)
    pos = fd.define_tensor(shape=[1, 1, S, 1], contiguity=[None, None, True, None], dtype=DataType.Float)
    pad = fd.define_tensor(shape=[B, 1, 1, S], contiguity=[True, None, None, True], dtype=DataType.Float)
    mask = fd.ops.add(pos, pad)
    y = fd.ops.add(x, mask)
    fd.add_output(fd.ops.sub(y, fd.ops.max(y, dims=[3], keepdim=True)))
    fd.add_output(mask)


def test_broadcast_mask_beside_a_softmax_tile():
    g = gen_for("own rows division")
    inputs = [make_tensor(s, torch.float32, g) for s in ((B, H, S, S), (1, 1, S, 1), (B, 1, 1, S))]
    check(fusion(_mask_beside_softmax), inputs, n_launches=1)
