"""The backend's graph rewrites on small traced graphs: each rewrites what it should,
leaves alone what it should not, and the rewritten graph computes what the traced one
did (``one_hot``, ``sink_views``, ``sum_views``, ``pad_matmuls``' sums of padded
tensors)."""
from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pyfuser.dynamo.rewrites.one_hot import one_hot_sums
from pyfuser.dynamo.rewrites.registry import propagate_meta
from pyfuser.dynamo.rewrites.sink_views import sink_views
from pyfuser.dynamo.rewrites.sum_views import sums_through_views

aten = torch.ops.aten


def traced(fn, *args):
    """``fn`` traced to ATen with fake tensors (node meta as the backend sees it)."""
    return make_fx(fn, tracing_mode="fake", pre_dispatch=False)(*args)


def targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def one_hot_grad(g, target, classes, keepdim=True, zero=0.0):
    t = target.unsqueeze(1)
    hit = (torch.arange(classes).unsqueeze(0) == t) & (t != -100)
    return torch.where(hit, g, zero).sum(1, keepdim=keepdim)


def test_the_sum_of_a_one_hot_row_is_one_value_per_row():
    g = torch.tensor(-0.125)
    target = torch.tensor([3, -100, 0, 9, 12, -5])  # 12 and -5 are no class: no hit, sum 0
    for keepdim in (True, False):
        gm = traced(lambda g, t: one_hot_grad(g, t, 10, keepdim), g, target)
        assert one_hot_sums(gm) == 1
        propagate_meta(gm)
        assert aten.sum.dim_IntList not in targets(gm)
        torch.testing.assert_close(gm(g, target), one_hot_grad(g, target, 10, keepdim))


def test_a_selection_with_another_default_keeps_its_sum():
    g, target = torch.tensor(0.5), torch.tensor([1, 2, 3])
    gm = traced(lambda g, t: one_hot_grad(g, t, 5, zero=1.0), g, target)
    assert one_hot_sums(gm) == 0
    assert aten.sum.dim_IntList in targets(gm)


def test_a_selection_that_varies_along_the_sum_keeps_it():
    target, g = torch.tensor([1, 2, 3]), torch.randn(3, 5)
    gm = traced(lambda g, t: one_hot_grad(g, t, 5), g, target)  # g is [3, 5]: not one value per row
    assert one_hot_sums(gm) == 0


def log_softmax(x):  # decomposed, as AOTAutograd hands it to the backend
    m = x - x.amax(-1, keepdim=True)
    return m - m.exp().sum(-1, keepdim=True).log()


def test_a_reshape_moves_below_an_add_and_folds_into_the_next():
    def fn(x, y):
        r = log_softmax(x)  # a row reduction's result
        s = r.view(2, 3, 8) + y
        return s.view(6, 8) * 2, s.sum((0, 1))

    x, y = torch.randn(6, 8), torch.randn(2, 3, 8)
    gm = traced(fn, x, y)
    assert sink_views(gm) >= 2  # the add moved, the view chain folded
    propagate_meta(gm)
    adds = [n for n in gm.graph.nodes if n.target is aten.add.Tensor]
    assert [tuple(n.meta["val"].shape) for n in adds] == [(6, 8)]
    assert sums_through_views(gm) == 1
    propagate_meta(gm)
    sums = [n for n in gm.graph.nodes if n.target is aten.sum.dim_IntList and n.meta["val"].shape == (8,)]
    assert [(tuple(n.args[0].meta["val"].shape), list(n.args[1])) for n in sums] == [((6, 8), [0])]
    for got, want in zip(gm(x, y), fn(x, y)):
        torch.testing.assert_close(got, want)


def test_reshapes_of_values_without_a_row_reduction_stay():
    def fn(x, y):
        return (x * 2).view(2, 3, 8) + y

    gm = traced(fn, torch.randn(6, 8), torch.randn(2, 3, 8))
    assert sink_views(gm) == 0


def test_a_broadcast_operand_keeps_the_reshape_in_place():
    def fn(x, w):
        return log_softmax(x).view(2, 3, 8) * w

    gm = traced(fn, torch.randn(6, 8), torch.randn(3, 8))
    assert sink_views(gm) == 0


def test_casts_between_the_selection_and_its_sum_apply_to_the_row_value():
    """Under fp16 autocast the nll gradient is cast to fp16 (the logits' dtype) and back
    to fp32 before log-softmax's backward sums it."""
    g = torch.tensor(-1 / 3)
    target = torch.tensor([3, -100, 0, 9])

    def fn(g, t):
        hit = (torch.arange(10).unsqueeze(0) == t.unsqueeze(1)) & (t.unsqueeze(1) != -100)
        return torch.where(hit, g, 0.0).to(torch.float16).to(torch.float32).sum(1, keepdim=True)

    gm = traced(fn, g, target)
    assert one_hot_sums(gm) == 1
    propagate_meta(gm)
    assert aten.sum.dim_IntList not in targets(gm)
    got, want = gm(g, target), fn(g, target)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# -- the embedding's weight gradient ---------------------------------------------------------
def test_the_embedding_gradient_is_an_index_add_of_its_rows():
    from pyfuser.dynamo.decompositions import embedding_dense_backward

    g = torch.Generator().manual_seed(0)
    grad = torch.randn(4, 6, 5, generator=g)
    ids = torch.randint(0, 9, (4, 6), generator=g)
    ids[0, :3] = 2  # repeated rows, some of them the padding row
    for padding_idx in (-1, 2):
        want = aten.embedding_dense_backward(grad, ids, 9, padding_idx, False)
        got = embedding_dense_backward(grad, ids, 9, padding_idx, False)
        torch.testing.assert_close(got, want)
    # 16-bit gradients summed in fp32 and rounded once (600 rows into one; ATen's CUDA
    # kernel sums in fp32 too, its CPU one in fp16)
    many = torch.randn(600, 5, generator=g).half()
    same = torch.zeros(600, dtype=torch.long)
    got = embedding_dense_backward(many, same, 3, -1, False)
    assert got.dtype == torch.float16
    want = aten.embedding_dense_backward(many.float(), same, 3, -1, False).half()
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert embedding_dense_backward(grad, ids, 9, -1, True) is NotImplemented  # scaled by frequency: ATen's
    torch.use_deterministic_algorithms(True)
    try:
        assert embedding_dense_backward(grad, ids, 9, -1, False) is NotImplemented  # atomics: not deterministic
    finally:
        torch.use_deterministic_algorithms(False)


def test_an_index_add_into_fresh_zeros_runs_in_place():
    from pyfuser.dynamo.rewrites.in_place import index_add_in_place

    def grad(rows, ids):
        return rows.new_zeros((9, 5)).index_add(0, ids, rows)

    def shared(rows, ids):  # the zeros are read again: the copy stays
        z = rows.new_zeros((9, 5))
        return z.index_add(0, ids, rows), z + 1

    rows, ids = torch.randn(7, 5), torch.tensor([0, 3, 3, 8, 1, 0, 3])
    gm = traced(grad, rows, ids)
    assert index_add_in_place(gm) == 1
    assert aten.index_add_.default in targets(gm) and aten.index_add.default not in targets(gm)
    torch.testing.assert_close(gm(rows, ids), grad(rows, ids))
    gm = traced(shared, rows, ids)
    assert index_add_in_place(gm) == 0
    for got, want in zip(gm(rows, ids), shared(rows, ids)):
        torch.testing.assert_close(got, want)


# -- transposed_matmuls ------------------------------------------------------------------
def gqa_key_grad(q, g, kv_heads):
    """The gradient of grouped-query keys as attention's backward forms it: the bmm
    gives the gradient of their transpose, which is transposed back and summed over
    the query heads that share a key head."""
    b, h, s, d = q.shape
    kt = torch.bmm(q.reshape(b * h, s, d).transpose(1, 2), g.reshape(b * h, s, s))  # [b*h, d, s]
    k = kt.view(b, h, d, s).float().transpose(2, 3)
    return k.reshape(b, kv_heads, h // kv_heads, s, d).sum(2).to(q.dtype)


def test_a_bmm_read_transposed_is_computed_transposed():
    from pyfuser.dynamo.rewrites.transposed_matmuls import transposed_matmuls

    gen = torch.Generator().manual_seed(21)
    q, g = torch.randn(2, 4, 6, 8, generator=gen), torch.randn(2, 4, 6, 6, generator=gen)
    gm = traced(lambda q, g: gqa_key_grad(q, g, 2), q, g)
    assert transposed_matmuls(gm) == 1
    propagate_meta(gm)
    (bmm,) = [n for n in gm.graph.nodes if n.target == aten.bmm.default]
    assert bmm.meta["val"].shape == (8, 6, 8) and bmm.meta["val"].is_contiguous()  # [b*h, s, d]
    (summed,) = [n for n in gm.graph.nodes if n.target == aten.sum.dim_IntList]
    assert summed.args[0].meta["val"].stride()[-1] == 1  # the sum reads the keys' gradient in order
    torch.testing.assert_close(gm(q, g), gqa_key_grad(q, g, 2), rtol=1e-5, atol=1e-5)


def test_bmms_read_in_order_or_handed_out_stay():
    from pyfuser.dynamo.rewrites.transposed_matmuls import transposed_matmuls

    gen = torch.Generator().manual_seed(22)
    a, b = torch.randn(3, 5, 7, generator=gen), torch.randn(3, 7, 4, generator=gen)
    in_order = traced(lambda a, b: torch.bmm(a, b).exp(), a, b)  # read row-major: already in order
    handed_out = traced(lambda a, b: torch.bmm(a, b).transpose(1, 2), a, b)  # the caller sees its layout
    both = traced(lambda a, b: (torch.bmm(a, b).transpose(1, 2).exp(), torch.bmm(a, b).exp()), a, b)
    into_matmul = traced(lambda a, b: torch.bmm(torch.bmm(a, b).transpose(1, 2), a), a, b)
    for gm in (in_order, handed_out, into_matmul):
        assert transposed_matmuls(gm) == 0
    assert transposed_matmuls(both) == 1  # two bmms: only the one read transposed turns



def test_a_bmm_whose_reshape_would_copy_when_turned_stays():
    """One reader takes the product transposed, another through a ``reshape`` that is a
    view now and would copy in the transposed layout: the bmm stays (without that
    reader it turns)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from pyfuser.dynamo.rewrites.transposed_matmuls import transposed_matmuls

    fake = FakeTensorMode()

    def built(with_reshape):
        graph = torch.fx.Graph()
        a, b = graph.placeholder("a"), graph.placeholder("b")
        a.meta["val"], b.meta["val"] = fake.from_tensor(torch.randn(3, 5, 7)), fake.from_tensor(torch.randn(3, 7, 4))
        product = graph.call_function(aten.bmm.default, (a, b))
        outs = [graph.call_function(aten.exp.default, (graph.call_function(aten.transpose.int, (product, 1, 2)),))]
        if with_reshape:
            outs.append(graph.call_function(aten.exp.default,
                                            (graph.call_function(aten.reshape.default, (product, [15, 4])),)))
        graph.output(tuple(outs))
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        propagate_meta(gm)
        return gm

    assert transposed_matmuls(built(with_reshape=True)) == 0
    assert transposed_matmuls(built(with_reshape=False)) == 1


def fused_qkv_attention(x, w_qkv, w_out, heads):
    """Self-attention with one projection for the queries, keys and values, ``chunk``
    split into heads: the chunks are strided views of the fused projection."""
    b, s, d = x.shape
    q, k, v = (x @ w_qkv).chunk(3, dim=-1)
    q, k, v = (t.view(b, s, heads, d // heads).transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) * (d // heads) ** -0.5
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d) @ w_out


class FusedQkvAttention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, d))


def test_a_view_the_turned_layout_cannot_take_leaves_that_bmm_alone():
    """With one head the forward's ``probs @ v`` is viewed as [tokens, dim] for the
    output projection, a view the transposed layout cannot take.  AOTAutograd calls the
    backend under the Python dispatcher, where a meta view that cannot be taken raises
    ``ValueError`` (torch's Python reference), not ``RuntimeError``.  That bmm stays,
    and the pass goes on."""
    from torch._dispatch.python import enable_python_dispatcher

    from pyfuser.dynamo.rewrites.transposed_matmuls import transposed_matmuls

    gen = torch.Generator().manual_seed(23)
    x, w_qkv, w_out = torch.randn(2, 3, 4, generator=gen), torch.randn(4, 12, generator=gen), torch.randn(4, 4, generator=gen)
    gm = traced(functools.partial(fused_qkv_attention, heads=1), x, w_qkv, w_out)
    with enable_python_dispatcher():
        assert transposed_matmuls(gm) == 0
    torch.testing.assert_close(gm(x, w_qkv, w_out), fused_qkv_attention(x, w_qkv, w_out, 1))


@pytest.mark.parametrize("heads", [1, 2])
def test_fused_qkv_attention_through_the_backend_matches_eager(monkeypatch, heads):
    """Forward and gradients through the backend; with one head the key gradient's bmm
    is turned (read transposed by the region that concatenates the three gradients)."""
    from pyfuser.dynamo.rewrites import registry
    from pyfuser.dynamo.rewrites.transposed_matmuls import transposed_matmuls

    turned = []
    monkeypatch.setattr(registry, "REWRITES", tuple(
        dataclasses.replace(r, fn=lambda gm: turned.append(transposed_matmuls(gm)) or turned[-1])
        if r.name == "transposed_matmuls" else r for r in registry.REWRITES))
    torch.manual_seed(24)
    model = FusedQkvAttention(8, heads)
    x = torch.randn(2, 5, 8, requires_grad=True)
    got = torch.compile(model, backend="pyfuser")(x)
    got_grads = torch.autograd.grad(got.square().sum(), [x, *model.parameters()])
    want = model(x)
    want_grads = torch.autograd.grad(want.square().sum(), [x, *model.parameters()])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert turned == ([0, 1] if heads == 1 else [0, 0])


def test_a_failing_rewrite_is_skipped_and_the_others_apply(monkeypatch):
    """A pass that raises half-way through is skipped with one warning, on a fresh copy
    of the graph (none of its half rewrite is kept); the passes after it still run, and
    the traced graph is never touched."""
    import pytest

    from pyfuser.dynamo.regions.region import FallbackWarning
    from pyfuser.dynamo.rewrites import registry
    from pyfuser.dynamo.rewrites.registry import Rewrite

    def half_then_raise(gm):
        next(n for n in gm.graph.nodes if n.target == aten.exp.default).target = aten.sin.default
        raise ValueError("half way")

    def cos_to_tanh(gm):
        hits = [n for n in gm.graph.nodes if n.target == aten.cos.default]
        for n in hits:
            n.target = aten.tanh.default
        gm.recompile()
        return len(hits)

    monkeypatch.setattr(registry, "REWRITES", (Rewrite("half", "aten", half_then_raise),
                                               Rewrite("tanh", "aten", cos_to_tanh)))
    gm = traced(lambda x: x.exp() + x.cos(), torch.randn(4))
    with pytest.warns(FallbackWarning, match="the half rewrite failed"):
        out = registry.rewritten(gm, "aten")
    assert targets(out).count(aten.exp.default) == 1 and aten.sin.default not in targets(out)
    assert aten.tanh.default in targets(out) and aten.cos.default not in targets(out)
    assert aten.cos.default in targets(gm) and aten.sin.default not in targets(gm)


def test_the_rewrites_share_one_copy_of_the_graph(monkeypatch):
    from pyfuser.dynamo.rewrites import registry

    copies = []
    real = registry.copy_graph
    monkeypatch.setattr(registry, "copy_graph", lambda gm: copies.append(gm) or real(gm))
    gm = traced(lambda x: (x.exp() + x.cos()).sum(0), torch.randn(4, 3))
    out = registry.rewritten(gm, "aten")
    assert len(copies) == 1 and out is not gm
    torch.testing.assert_close(out(torch.ones(4, 3)), gm(torch.ones(4, 3)))


# -- broadcast_copies --------------------------------------------------------------------
def position_bias_softmaxes(table, buckets, s1, s2):
    """T5's relative position bias: an embedding lookup [q, k, heads] viewed as
    [1, heads, q, k], added to two layers' [batch, heads, q, k] scores."""
    bias = table[buckets].permute(2, 0, 1).unsqueeze(0)
    return (s1 + bias).softmax(-1), (s2 + bias).softmax(-1)


def bias_step(table, s1, s2, buckets):
    """A loss over two T5-like layers sharing the position bias."""
    a, b = position_bias_softmaxes(table, buckets, s1, s2)
    return (a * s2).sum() + (b * s1).sum()


def bias_inputs(heads, q, k, batch, seed):
    gen = torch.Generator().manual_seed(seed)
    table, buckets = torch.randn(32, heads, generator=gen), torch.randint(0, 32, (q, k), generator=gen)
    return table, buckets, torch.randn(batch, heads, q, k, generator=gen), torch.randn(batch, heads, q, k, generator=gen)


def test_a_strided_tensor_read_broadcast_is_copied_in_order_once():
    from pyfuser.dynamo.rewrites.broadcast_copies import broadcast_copies

    args = bias_inputs(heads=4, q=128, k=128, batch=2, seed=31)  # 65536 bias elements, read 4 times over
    gm = traced(position_bias_softmaxes, *args)
    assert broadcast_copies(gm) == 1
    propagate_meta(gm)
    adds = [n for n in gm.graph.nodes if n.target == aten.add.Tensor]
    assert len(adds) == 2
    for add in adds:
        bias = add.args[1]
        assert bias.target == aten.clone.default and bias.meta["val"].is_contiguous()
    assert adds[0].args[1] is adds[1].args[1]  # one copy for both readers
    for got, want in zip(gm(*args), position_bias_softmaxes(*args)):
        torch.testing.assert_close(got, want)


def test_strided_tensors_read_once_in_size_or_small_stay():
    from pyfuser.dynamo.rewrites.broadcast_copies import broadcast_copies

    small = traced(position_bias_softmaxes, *bias_inputs(heads=4, q=64, k=64, batch=2, seed=32))
    x, y = torch.randn(256, 512), torch.randn(512, 256)
    transposed = traced(lambda x, y: x.t() * y, x, y)  # read once, at its own size
    rows = traced(lambda x, y: x.t().unsqueeze(0) + y.unsqueeze(0).expand(3, 512, 256).permute(0, 2, 1).mT,
                  x, y)  # read broadcast but the result keeps its layout
    for gm in (small, transposed, rows):
        assert broadcast_copies(gm) == 0


def test_t5_like_attention_with_a_copied_bias_matches_eager(monkeypatch):
    """Through the backend, forward and backward: the copy and its gradient (an
    identity) keep the math."""
    from pyfuser.dynamo.rewrites import registry

    real, copies = next(r.fn for r in registry.REWRITES if r.name == "broadcast_copies"), []

    def counted(gm):
        copies.append(real(gm))
        return copies[-1]

    monkeypatch.setattr(registry, "REWRITES", tuple(dataclasses.replace(r, fn=counted) if r.name == "broadcast_copies"
                                                    else r for r in registry.REWRITES))

    from pyfuser.dynamo.rewrites import broadcast_copies

    # a quarter of the sizes of the test above, the rule's threshold with them: what the
    # interpreter runs here is 16 times smaller
    monkeypatch.setattr(broadcast_copies, "LAYOUT_COPY_MIN_NUMEL", broadcast_copies.LAYOUT_COPY_MIN_NUMEL // 16)
    table, buckets, s1, s2 = bias_inputs(heads=4, q=32, k=32, batch=2, seed=33)
    table.requires_grad_(True)
    s1.requires_grad_(True)

    step = functools.partial(bias_step, buckets=buckets)

    torch._dynamo.reset()
    got = torch.compile(step, backend="pyfuser")(table, s1, s2)
    got_grads = torch.autograd.grad(got, (table, s1))
    want = step(table, s1, s2)
    want_grads = torch.autograd.grad(want, (table, s1))
    assert copies and copies[0] == 1  # the forward's bias read by both layers was copied
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_t5_like_bias_gradient_is_summed_by_the_softmax_backward():
    """The position bias's gradient, every layer's score gradient summed over the
    batch: each layer's sum moves into the region of its softmax backward
    (``reduce_before_leaving``), whose one kernel sums it (the inner-outer tile's
    groups' walk), and the gradients match eager's."""
    import pyfuser.dynamo as pd

    table, buckets, s1, s2 = bias_inputs(heads=2, q=16, k=16, batch=3, seed=34)
    table.requires_grad_(True)
    s1.requires_grad_(True)

    step = functools.partial(bias_step, buckets=buckets)

    torch._dynamo.reset()
    e = pd.explain(step, table, s1, s2)
    (bwd,) = [g for g in e.graphs if g.kind == "backward"]
    summing = [r for r in bwd.regions if any(n.target == "aten.sum.dim_IntList" for n in r.nodes)]
    # two layers: each softmax backward's row sum and batch sum, in the region that computes them
    assert sum(n.target == "aten.sum.dim_IntList" for r in summing for n in r.nodes) == 4
    for r in summing:
        assert [s.scheduler for s in r.segments] == ["inner_outer"]
    torch._dynamo.reset()
    got = torch.compile(step, backend="pyfuser")(table, s1, s2)
    got_grads = torch.autograd.grad(got, (table, s1))
    want_grads = torch.autograd.grad(step(table, s1, s2), (table, s1))
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
