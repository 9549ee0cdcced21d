"""The backend's view fast path (``views.reinterpret``, ``reinterpret_chain``): every
op of ``fast_views.VIEW_OPS`` on inputs at nonzero storage offsets (split, chunk, narrow,
select and slices of a graph intermediate and of a graph input), transposed,
expanded and sliced with a step, alone and in chains; forward and backward exactly
eager's (views move no math).  Each test also checks the fast path ran."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pyfuser.dynamo.regions import views
from pyfuser.dynamo.rewrites import fast_views

aten = torch.ops.aten


def _split_last(t):
    return (t.shape[0], 2, t.shape[1] // 2)


# VIEW_OPS op -> (the view applied to a 2-D tensor whose last dim is even, the op the
# compiled graph holds: AOTAutograd traces detach as alias).
OPS = {
    aten.view.default: (lambda t: t.view(_split_last(t)), aten.view.default),
    aten._unsafe_view.default: (lambda t: aten._unsafe_view(t, _split_last(t)), aten._unsafe_view.default),
    aten.permute.default: (lambda t: t.permute(1, 0), aten.permute.default),
    aten.transpose.int: (lambda t: t.transpose(0, 1), aten.transpose.int),
    aten.t.default: (lambda t: t.t(), aten.t.default),
    aten.unsqueeze.default: (lambda t: t.unsqueeze(1), aten.unsqueeze.default),
    aten.squeeze.dim: (lambda t: t[1:2].squeeze(0), aten.squeeze.dim),
    aten.squeeze.dims: (lambda t: torch.squeeze(t[1:2], (0,)), aten.squeeze.dims),
    aten.squeeze.default: (lambda t: t[1:2].squeeze(), aten.squeeze.default),
    aten.expand.default: (lambda t: t.expand(3, *t.shape), aten.expand.default),
    aten.slice.Tensor: (lambda t: t[:, 1::2], aten.slice.Tensor),
    aten.select.int: (lambda t: t.select(1, 1), aten.select.int),
    aten.alias.default: (lambda t: aten.alias(t), aten.alias.default),
    aten.detach.default: (lambda t: t.detach(), aten.alias.default),
}


def test_every_fast_pathed_op_is_covered():
    assert set(OPS) == set(fast_views.VIEW_OPS)


# The view's input, from x [4, 16] and inputs arriving at an offset (xo), transposed
# (xt), expanded (xe) and with a step (xs); ``cumsum`` makes the intermediate and
# reads the view: an ATen op, so no region takes the view in.
SOURCES = {
    "split": lambda x, xo, xt, xe, xs: x.cumsum(-1).split(8, -1)[1],
    "chunk": lambda x, xo, xt, xe, xs: x.cumsum(-1).chunk(4, -1)[2],
    "narrow": lambda x, xo, xt, xe, xs: x.cumsum(-1).narrow(-1, 6, 8),
    "select": lambda x, xo, xt, xe, xs: x.cumsum(-1).view(4, 2, 8).select(1, 1),
    "slice": lambda x, xo, xt, xe, xs: x.cumsum(-1)[1:, 4:12],
    "step": lambda x, xo, xt, xe, xs: x.cumsum(-1)[:, ::2],
    "transposed": lambda x, xo, xt, xe, xs: x.cumsum(-1)[:, 2:10].t(),
    "expanded": lambda x, xo, xt, xe, xs: x.cumsum(-1)[:1, 4:12].expand(4, 8),
    "input_split": lambda x, xo, xt, xe, xs: x.split(8, -1)[1],
    "input_narrow": lambda x, xo, xt, xe, xs: x.narrow(0, 1, 3),
    "input_select": lambda x, xo, xt, xe, xs: x.view(4, 2, 8)[:, 1],
    "input_at_offset": lambda x, xo, xt, xe, xs: xo,
    "input_transposed": lambda x, xo, xt, xe, xs: xt,
    "input_expanded": lambda x, xo, xt, xe, xs: xe,
    "input_step": lambda x, xo, xt, xe, xs: xs,
}


@pytest.fixture
def taken(monkeypatch):
    """Records ``(view ops, fast)`` per fast-path view run: the op(s) it stands for and
    whether the input had the traced strides (the view built from traced numbers)."""
    log = []
    real, real_chain = views.reinterpret, views.reinterpret_chain

    def reinterpret(x, in_stride, size, stride, delta, op, args, kwargs):
        log.append(((op,), x.stride() == in_stride))
        return real(x, in_stride, size, stride, delta, op, args, kwargs)

    def reinterpret_chain(x, in_stride, size, stride, delta, chain):
        log.append((tuple(op for op, _, _ in chain), x.stride() == in_stride))
        return real_chain(x, in_stride, size, stride, delta, chain)

    monkeypatch.setattr(views, "reinterpret", reinterpret)
    monkeypatch.setattr(views, "reinterpret_chain", reinterpret_chain)
    return log


def leaves():
    g = torch.Generator().manual_seed(0)
    shapes = ((4, 16), (4, 12), (8, 4), (1, 8), (4, 16))
    return [torch.randn(*s, generator=g).requires_grad_() for s in shapes]


def graph_inputs(x, bo, bt, be, bs):
    return x, bo[:, 3:11], bt.t(), be.expand(4, 8), bs[:, ::2]


def _outs_and_grads(fn, args, forward_done=lambda: None):
    outs = fn(*graph_inputs(*args))
    forward_done()
    live = [o for o in outs if o.requires_grad]
    g = torch.Generator().manual_seed(1)
    tangents = [torch.randn(o.shape, generator=g) for o in live]
    return outs, torch.autograd.grad(live, args, tangents, allow_unused=True) if live else ()


def _assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if a is None or b is None:
            assert a is None and b is None
            continue
        assert a.shape == b.shape and a.stride() == b.stride()
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("op", list(OPS), ids=str)
def test_view_op_matches_eager(op, taken):
    view, traced_as = OPS[op]

    def fn(*inputs):
        return tuple(view(src(*inputs)).cumsum(0) for src in SOURCES.values())

    args = leaves()
    want = _outs_and_grads(fn, args)
    compiled = torch.compile(fn, backend="pyfuser", dynamic=False)
    forward = []
    got = _outs_and_grads(compiled, [a.detach().requires_grad_() for a in args], lambda: forward.extend(taken))
    _assert_same(got[0], want[0])
    _assert_same(got[1], want[1])
    fast = [ops for ops, hit in forward if hit and ops[-1] is traced_as]
    assert len(fast) == len(SOURCES), forward  # each source's view went through the fast path
    assert all(hit for _, hit in taken)


def chains(x):
    a = x.cumsum(-1)[1:, 2:14:2].t().unsqueeze(0).expand(2, 6, 3)[:, 1:].transpose(1, 2)
    b = x.cumsum(-1).view(4, 4, 4).permute(2, 0, 1)[1].select(1, 2)
    return a.cumsum(0), b.cumsum(0)


def test_chains_of_views_match_eager(taken):
    x = torch.randn(4, 16, requires_grad=True)
    want = chains(x)
    got = torch.compile(chains, backend="pyfuser", dynamic=False)(x)
    _assert_same(got, want)
    (ga,) = torch.autograd.grad(sum(o.sum() for o in got), x)
    (wa,) = torch.autograd.grad(sum(o.sum() for o in want), x)
    _assert_same([ga], [wa])
    lengths = sorted(len(ops) for ops, hit in taken if hit)
    assert lengths[-2:] == [4, 7], taken  # both chains built in one step each


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


@pytest.mark.parametrize("op", list(OPS), ids=str)
def test_other_strides_than_traced_take_the_fallback(op, taken):
    """Traced at an offset; run at another offset with the traced strides (fast) and
    with other strides (the op itself): both exactly what the op gives."""
    view = OPS[op][0]
    traced = torch.randn(4, 12)[:, 2:10]
    gm = make_fx(lambda t: view(t) * 1, tracing_mode="fake")(traced)  # fake: the offsets are kept
    assert fast_views.fast_views(gm) >= 1
    for x, fast in ((torch.randn(5, 12)[1:, 3:11], True), (torch.randn(8, 4).t(), False)):
        taken.clear()
        got, want = gm(x), view(x) * 1
        _assert_same([got], [want])
        assert taken and all(hit == fast for _, hit in taken)
        gm_views = make_fx(view, tracing_mode="fake")(traced)
        fast_views.fast_views(gm_views)
        got_view, want_view = gm_views(x), view(x)
        assert (got_view.shape, got_view.stride(), got_view.storage_offset()) == (
            want_view.shape, want_view.stride(), want_view.storage_offset())
        assert got_view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
