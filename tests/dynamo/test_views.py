"""The backend's view fast path (``views.reinterpret``) on inputs that start past
their storage's first element: a ``split``/``chunk``/``narrow`` result, then a view."""
import torch

from pyfuser.dynamo import views


def split_then_view(x, w):
    q, k = (x @ w).split(8, -1)
    k = k.view(2, 4, 2, 4).transpose(1, 2)
    return k @ k.transpose(-1, -2), q


def test_split_then_view_matches_eager():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 4, 8, generator=g), torch.randn(8, 16, generator=g)
    want = split_then_view(x, w)
    got = torch.compile(split_then_view, backend="pyfuser")(x, w)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_reinterpret_offset_is_relative_to_its_input():
    base = torch.arange(24.0)
    x = base[5:17].view(3, 4)  # storage offset 5
    want = x[1:, 1:].t()
    got = views.reinterpret(x, x.stride(), tuple(want.shape), want.stride(),
                            want.storage_offset() - x.storage_offset(), None, (), {})
    assert got.storage_offset() == want.storage_offset()
    torch.testing.assert_close(got, want)
