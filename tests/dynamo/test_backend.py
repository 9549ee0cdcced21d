"""The backend on small functions: registration, forward and backward against
eager, what stays in ATen, fallbacks and their warnings, dumps, autocast."""
import copy
import dataclasses
import warnings

import pytest
import torch
import torch.nn.functional as F

import pyfuser
import pyfuser.dynamo as pd
from pyfuser.dynamo import rules
from pyfuser.dynamo.regions import region
from pyfuser.dynamo.rewrites import registry
from pyfuser.dynamo.rewrites.fast_views import fast_views
from pyfuser.dynamo.rules import Rule

aten = torch.ops.aten


def spy_on_rewrite(mp, name, spy):
    """The registry's rewrite ``name`` replaced by ``spy`` while ``mp`` is in force."""
    mp.setattr(registry, "REWRITES", tuple(dataclasses.replace(r, fn=spy) if r.name == name else r
                                           for r in registry.REWRITES))


def grads_of(fn, *xs):
    xs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in xs]
    out = fn(*xs)
    out.float().sum().backward()
    return out.detach(), [x.grad for x in xs if x.requires_grad]


def check_against_eager(fn, *xs, rtol=1.3e-5, atol=1e-6):
    want, want_grads = grads_of(fn, *xs)
    got, got_grads = grads_of(torch.compile(fn, backend="pyfuser"), *xs)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)


def test_backends_are_registered():
    names = torch._dynamo.list_backends()
    assert "pyfuser" in names and "nvprims_nvfuser" in names
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("pyfuser") is pd.pyfuser_backend
    assert lookup_backend("nvprims_nvfuser") is pd.pyfuser_backend


def softmax_gelu(x, w):
    y = torch.softmax(x * 0.5 + w, dim=-1)
    return F.gelu(y) * torch.rsqrt(x.abs() + 1)


def test_forward_and_backward_match_eager():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 16, generator=g), torch.randn(16, generator=g)
    launches = pyfuser.cache_info()["launches"]
    check_against_eager(softmax_gelu, x, w)
    assert pd.stats()["fusions_created"] >= 2  # one forward, one backward region
    assert pyfuser.cache_info()["launches"] > launches


def test_layer_norm_and_log_softmax():
    g = torch.Generator().manual_seed(1)
    x, wt, b = torch.randn(6, 32, generator=g), torch.randn(32, generator=g), torch.randn(32, generator=g)

    def fn(x, wt, b):
        return F.log_softmax(F.layer_norm(x, (32,), wt, b), dim=-1)

    check_against_eager(fn, x, wt, b, rtol=1e-4, atol=1e-5)


def test_views_and_reductions_inside_regions():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 4, generator=g)

    def fn(x):
        y = (x.exp() * 2).transpose(1, 2).reshape(2, 12)
        m = y.mean(dim=1, keepdim=True)
        v, mu = torch.var_mean(y, dim=0)
        return (y - m).sum(0) * v + mu.unsqueeze(0).expand(3, 12)[1:].sum(0)

    check_against_eager(fn, x, rtol=1e-5, atol=1e-5)


def test_a_single_view_stays_in_aten():
    def fn(x):
        return (x.view(8, 2) * 3).t()

    x = torch.randn(4, 4)
    torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x), fn(x))
    assert pd.stats().get("regions", 0) == 0


def test_unsupported_op_runs_in_aten_between_fusions():
    def fn(x):
        y = torch.sigmoid(x * 2 + 1)
        z = torch.cumsum(y, dim=1)  # not translated: ATen
        return torch.tanh(z) * y - 1

    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 8, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.FallbackWarning)  # an op pyfuser never claims warns nothing
        check_against_eager(fn, x)
    assert pd.stats()["regions"] >= 2 and pd.stats().get("fallbacks", 0) == 0


def test_failed_translation_falls_back_with_one_warning(monkeypatch):
    def broken(t, n, a):
        raise RuntimeError("simulated translator bug")

    monkeypatch.setitem(rules.RULES, aten.exp.default, Rule(broken))

    def fn(x):
        a = torch.exp(x * 2) + 1
        b = torch.exp(a * 3) - 1
        return torch.cumsum(a, 0) + b

    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 5, generator=g) * 0.1
    with pytest.warns(pd.FallbackWarning, match="simulated translator bug") as record:
        check_against_eager(fn, x)
    ours = [w for w in record if issubclass(w.category, pd.FallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert pd.stats()["fallbacks"] >= 2


def test_failed_execute_falls_back_with_one_warning(monkeypatch):
    def broken(self, inputs, **kw):
        raise RuntimeError("simulated launch failure")

    monkeypatch.setattr(pyfuser.FusionDefinition, "execute", broken)
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(4, 16, generator=g), torch.randn(16, generator=g)
    with pytest.warns(pd.FallbackWarning, match="simulated launch failure") as record:
        check_against_eager(softmax_gelu, x, w)
    assert len([w for w in record if issubclass(w.category, pd.FallbackWarning)]) == 1


def test_new_input_strides_get_their_own_translation():
    def fn(x):
        return torch.exp(x) * x + 1

    g = torch.Generator().manual_seed(6)
    x = torch.randn(5, 6, generator=g)
    gm = torch.fx.symbolic_trace(fn)
    from torch._dynamo.backends.common import aot_autograd

    compiled = torch.compile(fn, backend="pyfuser", dynamic=False)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x.t()), fn(x.t()))  # Dynamo recompiles; a new layout
    assert pd.stats()["fusions_created"] == 2
    del gm, aot_autograd


def test_translation_cache_shares_identical_regions():
    def fn(x, y):
        a = torch.exp(x) * 2 + 1
        b = torch.cumsum(a, 1)  # splits the graph into two identical regions
        return torch.exp(b) * 2 + 1 + y

    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(3, 4, generator=g) * 0.1, torch.randn(3, 4, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x, y), fn(x, y))
    s = pd.stats()
    assert s["regions"] == 2


def test_dumps_work_for_backend_fusions(monkeypatch, capsys):
    monkeypatch.setenv("PYFUSER_DUMP", "segmented_fusion")
    g = torch.Generator().manual_seed(8)
    x = torch.randn(4, 8, generator=g)
    with torch.no_grad():
        torch.compile(lambda x: torch.softmax(x * 2, -1), backend="pyfuser")(x)
    assert "segmented fusion" in capsys.readouterr().out.lower()


def test_autocast_casts_are_fused():
    lin = torch.nn.Linear(16, 16)

    def fn(x):
        return F.gelu(lin(x)).float().softmax(-1)

    g = torch.Generator().manual_seed(9)
    x = torch.randn(4, 16, generator=g)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = torch.compile(fn, backend="pyfuser")(x)
        want = fn(x)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-3)
    ops = {e.op for t in region._TRANSLATIONS.values() if not isinstance(t, Exception) for e in t.fd.ir.exprs}
    assert "cast" in ops and "erf" in ops


def test_dynamic_shapes_are_fused():
    """More in test_dynamic_shapes.py; a FallbackWarning is an error here (conftest)."""
    def fn(x):
        return torch.softmax(x * 2, -1) + 1

    compiled = torch.compile(fn, backend="pyfuser", dynamic=True)
    for n in (3, 5):
        x = torch.randn(n, 8)
        torch.testing.assert_close(compiled(x), fn(x))
    assert pd.stats()["regions"] == 1 and pd.stats()["fusions_created"] == 1 and pd.stats()["region_calls"] == 2


def test_regions_without_inputs():
    def fn(x):
        noise = torch.rand(4, 8) * 0.5 + 1.0  # a region of its own: no inputs
        total = torch.cumsum(noise, 1)  # ATen
        return x * 2 + (total > 0)  # always True: the value does not depend on the draw

    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x), fn(x))
    assert pd.stats()["regions"] == 2 and pd.stats()["fusions_created"] == 2


def test_failed_partitioning_runs_the_graph_in_aten(monkeypatch):
    from pyfuser.dynamo import backend
    from pyfuser.dynamo.partition import partitioner as partition

    def half_done(gm):
        partition.fuse_regions(gm)  # mutates the copy, then fails
        raise RuntimeError("simulated partitioner bug")

    monkeypatch.setattr(backend, "fuse_regions", half_done)
    g = torch.Generator().manual_seed(10)
    x, w = torch.randn(4, 16, generator=g), torch.randn(16, generator=g)
    with pytest.warns(pd.FallbackWarning, match="simulated partitioner bug") as record:
        check_against_eager(softmax_gelu, x, w)
    assert len([w for w in record if issubclass(w.category, pd.FallbackWarning)]) == 1


def test_outputs_never_alias_where_aten_copies():
    def fn(x):
        a = x.clone()  # an identity in the fusion: pyfuser would hand back x itself
        b = (a * 2).exp()
        return a, b, b.clone(), torch.cumsum(a, 0) + torch.cumsum(b, 0)

    x = torch.randn(3, 4)
    with torch.no_grad():
        a, b, b2, _ = torch.compile(fn, backend="pyfuser")(x)
    assert pd.stats()["regions"] == 1
    assert a.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert b.untyped_storage().data_ptr() != b2.untyped_storage().data_ptr()
    torch.testing.assert_close(a, x)
    torch.testing.assert_close(b2, b)


def test_a_column_sum_of_row_results_stays_in_its_region():
    def fn(x, w):  # a row reduction (layer norm) feeding a column reduction (sum over rows)
        return (F.layer_norm(x, (16,)) * w).sum(0) + 1

    g = torch.Generator().manual_seed(11)
    x, w = torch.randn(6, 16, generator=g), torch.randn(16, generator=g)
    before = pyfuser.cache_info()["launches"]
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x, w), fn(x, w), rtol=1e-5, atol=1e-5)
    assert pd.stats()["regions"] == 1
    assert pyfuser.cache_info()["launches"] - before == 1  # the inner-outer tile


def test_a_bias_gradient_over_a_reshape_joins_the_layer_norm_kernel(monkeypatch):
    """A linear layer feeding a layer norm: its bias gradient is the sum of the layer
    norm's dx viewed as [tokens, hidden], taken as ``dx.sum((0, 1))`` (``sum_views``),
    so the backward region computes it beside dw (the inner-outer tile) instead of
    leaving a sum over a reshape to ATen."""
    graphs = graphs_partitioned(monkeypatch)
    torch.manual_seed(14)
    lin = torch.nn.Linear(8, 16)
    w = torch.randn(16, requires_grad=True)
    ref_lin, ref_w = copy.deepcopy(lin), w.detach().clone().requires_grad_()

    def fn(layer, w, x):
        y = F.layer_norm(layer(x), (16,)) * w
        return (y * y).sum()

    x = torch.randn(2, 3, 8)
    torch.compile(lambda x: fn(lin, w, x), backend="pyfuser")(x).backward()
    fn(ref_lin, ref_w, x).backward()
    for got, want in ((lin.bias.grad, ref_lin.bias.grad), (lin.weight.grad, ref_lin.weight.grad), (w.grad, ref_w.grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    backward = graphs[-1]  # after fuse_regions: regions are submodules
    outside = [n for n in backward.graph.nodes if n.op == "call_function" and "sum" in str(n.target)]
    assert not outside, [n.format_node() for n in outside]
    inside = [n for _, m in backward.named_children() if isinstance(m, region.FusedRegion)
              for n in m.fallback.graph.nodes if n.op == "call_function" and "sum" in str(n.target)]
    assert {tuple(n.meta["val"].shape) for n in inside} >= {(16,)}
    assert all(tuple(n.args[0].meta["val"].shape) == (2, 3, 16) for n in inside)
    assert pd.stats().get("fallbacks", 0) == 0


def test_a_row_reduction_of_a_column_sum_stays_in_its_region_and_the_segmenter_splits_it():
    """The partitioner does not restate the schedulers (docs/TUNING.md#region-cuts): a
    column sum feeding a row reduction is one region, which the segmenter runs as two
    kernels (no tile holds both), with no host step."""
    def fn(x):
        return (x * x.sum(0)).sum(1) + 1

    g = torch.Generator().manual_seed(13)
    x = torch.randn(6, 16, generator=g)
    before = pyfuser.cache_info()["launches"]
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x), fn(x), rtol=1e-5, atol=1e-5)
    assert pd.stats()["regions"] == 1
    assert pd.stats().get("fallbacks", 0) == 0
    assert pyfuser.cache_info()["launches"] - before == 2


def test_a_reshape_of_a_normalized_value_moves_below_its_pointwise_users():
    """``sink_views``: log-softmax viewed as [2, 3, 8] and combined with a [2, 3, 8]
    tensor is computed on [6, 8] with that tensor viewed, so no reshape follows the
    row reduction inside the region and it is not cut."""
    def fn(x, y):
        return torch.log_softmax(x, -1).view(2, 3, 8) * 2 + y

    g = torch.Generator().manual_seed(12)
    x, y = torch.randn(6, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    with torch.no_grad():
        got = torch.compile(fn, backend="pyfuser")(x, y)
    torch.testing.assert_close(got, fn(x, y), rtol=1e-5, atol=1e-5)
    assert got.shape == (2, 3, 8) and got.is_contiguous()
    assert pd.stats()["regions"] == 1


def test_a_reshape_of_a_normalized_shape_stays_in_its_region():
    def fn(x, w):  # w broadcasts over the new leading dim: the view cannot move below the product
        return torch.log_softmax(x, -1).view(2, 3, 8) * w + 1

    g = torch.Generator().manual_seed(12)
    x, w = torch.randn(6, 8, generator=g), torch.randn(3, 8, generator=g)
    before = pyfuser.cache_info()["launches"]
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x, w), fn(x, w), rtol=1e-5, atol=1e-5)
    assert pd.stats()["regions"] == 1
    assert pd.stats().get("fallbacks", 0) == 0
    assert pyfuser.cache_info()["launches"] - before == 2


def test_repeat_calls_run_the_prepared_launches_directly(monkeypatch, capsys):
    """A region's second call with the same strides skips ``fd.execute`` (its
    fingerprint); misaligned inputs, dumps and scheduler overrides still go through it."""
    from pyfuser.schedulers.base import Choices

    calls = []
    execute = pyfuser.FusionDefinition.execute

    def counting(self, inputs, **kw):
        calls.append(len(inputs))
        return execute(self, inputs, **kw)

    monkeypatch.setattr(pyfuser.FusionDefinition, "execute", counting)

    def fn(x):
        return torch.exp(x) * x + 1

    g = torch.Generator().manual_seed(9)
    x = torch.randn(4, 8, generator=g)
    compiled = torch.compile(fn, backend="pyfuser", dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), fn(x))
        assert len(calls) == 1
        launches = pyfuser.cache_info()["launches"]
        y = x * 2
        torch.testing.assert_close(compiled(y), fn(y))
        assert len(calls) == 1 and pyfuser.cache_info()["launches"] > launches
        odd = torch.randn(33, generator=g)[1:].view(4, 8)  # same strides, 4-byte aligned
        assert odd.data_ptr() % 16
        torch.testing.assert_close(compiled(odd), fn(odd))
        assert len(calls) == 2
        monkeypatch.setenv("PYFUSER_DUMP", "cache")
        torch.testing.assert_close(compiled(y), fn(y))
        assert len(calls) == 3 and "cache fusion" in capsys.readouterr().out
        monkeypatch.delenv("PYFUSER_DUMP")
        with Choices(num_warps=2):
            torch.testing.assert_close(compiled(y), fn(y))
        assert len(calls) == 4
        torch.testing.assert_close(compiled(y), fn(y))
        assert len(calls) == 4


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gathers_inside_the_log_softmax_fusion(reduction, monkeypatch):
    """nll_loss_forward becomes a gather in the fusion: no full log-probabilities
    stored for ATen's gather."""
    seen = []
    real = region.FusedRegion.__init__

    def spy(self, submodule, name):
        seen.append({str(n.target) for n in submodule.graph.nodes if n.op == "call_function"})
        real(self, submodule, name)

    monkeypatch.setattr(region.FusedRegion, "__init__", spy)
    g = torch.Generator().manual_seed(13)
    x = torch.randn(12, 37, generator=g)
    target = torch.randint(0, 37, (12,), generator=g)
    target[3] = -100  # ignored

    def fn(x, target):
        return F.cross_entropy(x * 1.5, target, reduction=reduction, ignore_index=-100)

    check_against_eager(lambda x: fn(x, target), x, rtol=1e-5, atol=1e-6)
    assert any("aten.gather.default" in ops for ops in seen)
    assert not any("aten.nll_loss_forward.default" in ops for ops in seen)


def graphs_partitioned(monkeypatch) -> list:
    """The ATen graphs the backend hands to ``fuse_regions`` from now on, in order."""
    from pyfuser.dynamo import backend

    graphs = []
    real = backend.fuse_regions

    def spy(gm):
        graphs.append(gm)
        return real(gm)

    monkeypatch.setattr(backend, "fuse_regions", spy)
    return graphs


def test_cross_entropy_backward_recomputes_the_log_probabilities(monkeypatch):
    """nll_loss_backward is a select in the log-softmax backward's fusion, so nothing
    holds on to the fp32 log-probabilities: the forward saves the 16-bit logits and
    two per-row values, the backward recomputes the rest (min-cut rematerialization)."""
    graphs = graphs_partitioned(monkeypatch)
    g = torch.Generator().manual_seed(14)
    x = torch.randn(12, 37, generator=g).to(torch.bfloat16)
    target = torch.randint(0, 37, (12,), generator=g)
    target[5] = -100

    def fn(x):
        return F.cross_entropy((x * 1.5).float(), target)

    check_against_eager(fn, x, rtol=1e-2, atol=1e-2)
    assert len(graphs) == 2
    ops = {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}
    assert not {"aten.nll_loss_backward.default", "aten.nll_loss_forward.default"} & ops
    saved = [n.meta["val"] for n in graphs[1].graph.nodes if n.op == "placeholder"]
    assert not [v for v in saved if v.dtype == torch.float32 and v.shape == (12, 37)]
    assert [v for v in saved if v.dtype == torch.bfloat16 and v.shape == (12, 37)]


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_the_nll_loss_backward_formula_matches_aten(reduction):
    """decompositions.nll_loss_backward, the table's decomposition, against ATen."""
    from pyfuser.dynamo.decompositions import nll_loss_backward

    g = torch.Generator().manual_seed(15)
    x = torch.log_softmax(torch.randn(6, 9, generator=g), 1)
    target = torch.tensor([1, 8, -100, 0, 4, 4])
    total = (target != -100).sum().float()
    grad = torch.rand(6 if reduction == 0 else (), generator=g)
    want = aten.nll_loss_backward(grad, x, target, None, reduction, -100, total)
    torch.testing.assert_close(nll_loss_backward(grad, x, target, None, reduction, -100, total), want)


def test_cross_entropy_with_an_out_of_range_target_is_nan_not_a_number():
    x = torch.randn(4, 7)
    target = torch.tensor([1, 7, 2, -100])
    with torch.no_grad():
        loss = torch.compile(lambda x: F.cross_entropy(x, target), backend="pyfuser")(x)
    assert loss.isnan()


def test_cpu_scalars_are_copied_to_the_device_once_per_value():
    cache = {}
    a = region.moved(torch.tensor(-3.5), torch.device("meta"), cache)
    b = region.moved(torch.tensor(-3.5), torch.device("meta"), cache)
    c = region.moved(torch.tensor(float("nan")), torch.device("meta"), cache)
    d = region.moved(torch.tensor(float("nan")), torch.device("meta"), cache)
    e = region.moved(torch.tensor(-3.5, dtype=torch.float64), torch.device("meta"), cache)
    assert a is b and c is d and a is not c and e is not a
    assert a.device.type == "meta" and e.dtype == torch.float64
    v = region.moved(torch.ones(3), torch.device("meta"), cache)  # not a scalar: always copied
    assert v.device.type == "meta" and len(cache) == 3


def test_a_clone_of_a_transposed_tensor_is_a_copy_kernel():
    """Attention heads made contiguous for a bmm: the clone alone becomes a region,
    and its output is a new contiguous tensor, not a view of the input."""
    def fn(x, y):
        q = x.view(4, 64, 8, 32).transpose(1, 2)  # [4, 8, 64, 32], not contiguous
        return torch.bmm(q.reshape(32, 64, 32), y)

    g = torch.Generator().manual_seed(14)
    x, y = torch.randn(4, 64, 256, generator=g), torch.randn(32, 32, 16, generator=g)
    launches = pyfuser.cache_info()["launches"]
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x, y), fn(x, y), rtol=1e-5, atol=1e-5)
    assert pd.stats()["regions"] == 1
    assert pyfuser.cache_info()["launches"] == launches + 1


def test_a_cat_of_one_transposed_tensor_and_empty_ones_is_a_copy_kernel():
    """A key/value cache's first update, ``cat([tensor([]), keys])`` with transposed
    keys (GPT-2 and LLaMA in training), is a copy: it becomes one pyfuser copy kernel,
    as a clone of a transposed tensor does, and its result is a new tensor."""
    def fn(x, y):
        k = x.view(4, 64, 8, 32).transpose(1, 2)  # [4, 8, 64, 32], not contiguous
        cache = torch.cat([torch.tensor([], dtype=x.dtype), k], dim=-2)
        return cache, torch.matmul(cache, y)

    g = torch.Generator().manual_seed(25)
    x, y = torch.randn(4, 64, 256, generator=g), torch.randn(32, 16, generator=g)
    launches = pyfuser.cache_info()["launches"]
    with torch.no_grad():
        got = torch.compile(fn, backend="pyfuser")(x, y)
    for a, w in zip(got, fn(x, y)):
        torch.testing.assert_close(a, w, rtol=1e-5, atol=1e-5)
    assert got[0].is_contiguous() and got[0].untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert pd.stats()["regions"] == 1
    assert pyfuser.cache_info()["launches"] == launches + 1


def test_outputs_are_written_in_aten_layout(monkeypatch):
    """A pointwise region whose output ATen lays out as a permutation of row-major
    (LLaMA's keys: repeated for grouped-query attention, transposed for the scores'
    matmul and cast to bf16, which keeps the transposed strides) has its kernel write
    that layout directly: the fusion outputs the permuted tensor row-major and the
    region returns the permuted view, with no copy into ATen's strides after the
    kernel.  Values and strides match eager."""
    from pyfuser.dynamo.regions.region import FusedRegion

    graphs = graphs_partitioned(monkeypatch)
    b, s, kv, rep, d = 2, 16, 2, 3, 8

    def fn(k, q):
        k = k.transpose(1, 2) * 2.0 + 1.0  # [b, kv, s, d]
        k = k[:, :, None].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)
        kt = k.transpose(-1, -2).to(torch.bfloat16)  # ATen: strides of [b, H, s, d]
        return kt, torch.matmul(q, kt)

    g = torch.Generator().manual_seed(24)
    k = torch.randn(b, s, kv, d, generator=g)
    q = torch.randn(b, kv * rep, s, d, generator=g).to(torch.bfloat16)
    with torch.no_grad():
        got = torch.compile(fn, backend="pyfuser")(k, q)
    want = fn(k, q)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=0, atol=0)
    assert got[0].stride() == want[0].stride()
    regions = [m for gm in graphs for m in gm.modules() if isinstance(m, FusedRegion)]
    assert regions and not any(m.broken for m in regions)
    assert all(not r for m in regions for r in m.restride.values())


def test_set_is_a_copy():
    from pyfuser import FusionDefinition, DataType

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.set(fd.ops.permute(t0, [1, 0])))
    x = torch.randn(5, 7)
    (out,) = fd.execute([x])
    assert out.is_contiguous() and out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, x.t(), rtol=0, atol=0)


def test_misaligned_matmuls_are_padded_and_match_eager(monkeypatch):
    """A 16-bit linear layer with 64 inputs and 1001 outputs over 250 tokens (sizes
    cuBLAS runs slowly: not multiples of 8): every matmul runs on zero-padded operands
    (forward: N = 1001 padded, the result sliced back and copied contiguous where it
    leaves the graph; backward: M = 250, K = 1001 and M = 1001, K = 250).  The logits
    (contiguous, as eager's), loss and every gradient match eager."""
    import copy

    from pyfuser.dynamo.rewrites import pad_matmuls

    monkeypatch.setattr(pad_matmuls, "ALWAYS", True)  # on CPU padding is off by default
    graphs = graphs_partitioned(monkeypatch)
    torch.manual_seed(3)
    lin = torch.nn.Linear(64, 1001)
    ref = copy.deepcopy(lin)
    x = torch.randn(250, 64)
    target = torch.randint(0, 1001, (250,))
    target[7] = -100

    def fn(layer, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = layer(x)
        return F.cross_entropy(logits.float(), target), logits

    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.FallbackWarning)
        loss, logits = torch.compile(lambda x: fn(lin, x), backend="pyfuser")(xa)
        loss.backward()
    want_loss, want_logits = fn(ref, xb)
    want_loss.backward()
    assert logits.is_contiguous()
    torch.testing.assert_close(logits, want_logits, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(loss, want_loss, rtol=1e-3, atol=1e-3)
    for got, want in ((lin.weight.grad, ref.weight.grad), (lin.bias.grad, ref.bias.grad), (xa.grad, xb.grad)):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3)
    mms = [n for gm in graphs for n in gm.graph.nodes if n.op == "call_function"
           and str(n.target) in ("aten.mm.default", "aten.addmm.default")]
    assert len(mms) == 3
    for n in mms:
        a, b = (x.meta["val"].shape for x in n.args[-2:])
        assert a[0] % 8 == 0 and a[1] % 8 == 0 and b[0] % 8 == 0 and b[1] % 8 == 0, n.format_node()
    assert sum(str(n.target) == "aten.mm.default" for n in mms) == 2
    # forward: one region reads the logits view once, copies it and keeps the loss statistics
    readers = [a for n in graphs[0].graph.nodes if n.op == "call_module" for a in n.args
               if isinstance(a, torch.fx.Node) and tuple(a.meta["val"].shape) == (250, 1001)]
    assert len(readers) == 1, readers
    # backward: the bias gradient sums the padded gradient, through a slice left to ATen
    from pyfuser.dynamo.rules import ATEN_ONLY
    slices = [n for n in graphs[1].graph.nodes if n.meta.get(ATEN_ONLY)]
    assert slices and all(u.op == "call_module" or u.meta.get(ATEN_ONLY) for n in slices for u in n.users)


def test_matmuls_with_a_symbolic_token_count_pad_their_static_dims(monkeypatch):
    """The same layer compiled with dynamic shapes, at two token counts: the token
    count (M) is symbolic, so only the static dims are padded (its alignment is not
    known when the graph is compiled), and no rewrite falls back."""
    import copy

    from pyfuser.dynamo.rewrites import pad_matmuls

    monkeypatch.setattr(pad_matmuls, "ALWAYS", True)
    graphs = graphs_partitioned(monkeypatch)
    torch.manual_seed(4)
    lin = torch.nn.Linear(64, 1001)
    ref = copy.deepcopy(lin)

    def fn(layer, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return layer(x).float().square().mean()

    compiled = torch.compile(lambda x: fn(lin, x), backend="pyfuser", dynamic=True)
    for tokens in (250, 123):
        x = torch.randn(tokens, 64)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.FallbackWarning)
            loss = compiled(xa)
            loss.backward()
        want = fn(ref, xb)
        want.backward()
        torch.testing.assert_close(loss, want, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(xa.grad, xb.grad, rtol=2e-2, atol=2e-3)
    mms = [n for gm in graphs for n in gm.graph.nodes if n.op == "call_function"
           and str(n.target) in ("aten.mm.default", "aten.addmm.default")]
    static = [d for n in mms for x in n.args[-2:] for d in x.meta["val"].shape if isinstance(d, int)]
    assert mms and 1001 not in static and all(d % 8 == 0 for d in static), static


def test_views_between_regions_are_built_from_their_traced_strides():
    """``rewrites/fast_views.py``: the views of a compiled graph (here a transpose, a view
    and an expand around a matmul, all left to ATen) become ``reinterpret`` nodes, the
    results equal eager; an input arriving with other strides than traced takes the
    original op."""
    from pyfuser.dynamo.regions import views

    graphs = []
    real = fast_views

    def spy(gm):
        n = real(gm)
        graphs.append((gm, n))
        return n

    with pytest.MonkeyPatch.context() as mp:
        spy_on_rewrite(mp, "fast_views", spy)
        g = torch.Generator().manual_seed(21)
        a, b = torch.randn(6, 4, generator=g), torch.randn(6, 5, generator=g)

        def fn(a, b):
            return (a.t() @ b).view(2, 2, 5).expand(3, 2, 2, 5) * 2.0

        torch._dynamo.reset()
        got = torch.compile(fn, backend="pyfuser")(a, b)
    torch.testing.assert_close(got, fn(a, b))
    assert graphs and graphs[0][1] >= 3
    targets = [n.target for n in graphs[0][0].graph.nodes if n.op == "call_function"]
    assert views.reinterpret in targets and torch.ops.aten.t.default not in targets

    x = torch.randn(4, 6, generator=g)
    y = views.reinterpret(x, (6, 1), (6, 4), (1, 6), 0, torch.ops.aten.t.default, (x,), {})
    assert y.stride() == (1, 6) and torch.equal(y, x.t())
    xt = x.t()  # strides (1, 6), not the traced (6, 1): ATen's op runs
    z = views.reinterpret(xt, (6, 1), (6, 4), (1, 6), 0, torch.ops.aten.t.default, (xt,), {})
    assert torch.equal(z, x)


def test_chains_of_views_are_one_view_of_the_first_input():
    """A view of a view used nowhere else is built from the first view's input in one
    step (``views.reinterpret_chain``); an input with other strides than traced
    replays the chain's ops."""
    from pyfuser.dynamo.regions import views

    graphs = []
    real = fast_views

    def spy(gm):
        graphs.append(gm)
        return real(gm)

    def fn(a, b):
        h = (a @ b).view(2, 3, 4, 5).permute(0, 2, 1, 3)  # view, then permute: one chain
        return (h.reshape(2, 4, 15).transpose(1, 2) * 2.0).sum(-1)

    g = torch.Generator().manual_seed(23)
    a, b = torch.randn(6, 7, generator=g), torch.randn(7, 20, generator=g)
    with pytest.MonkeyPatch.context() as mp:
        spy_on_rewrite(mp, "fast_views", spy)
        torch._dynamo.reset()
        got = torch.compile(fn, backend="pyfuser")(a, b)
    torch.testing.assert_close(got, fn(a, b))
    targets = [n.target for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert views.reinterpret_chain in targets

    x = torch.randn(6, 20, generator=g)
    chain = ((torch.ops.aten.view.default, ([2, 3, 4, 5],), {}), (torch.ops.aten.permute.default, ([0, 2, 1, 3],), {}))
    want = x.view(2, 3, 4, 5).permute(0, 2, 1, 3)
    y = views.reinterpret_chain(x, (20, 1), (2, 4, 3, 5), (60, 5, 20, 1), 0, chain)
    assert y.stride() == want.stride() and torch.equal(y, want)
    xs = torch.randn(20, 6, generator=g).t()  # other strides: the chain's ops run (view needs a copy here)
    chain = ((torch.ops.aten.reshape.default, ([2, 3, 4, 5],), {}), chain[1])
    z = views.reinterpret_chain(xs, (20, 1), (2, 4, 3, 5), (60, 5, 20, 1), 0, chain)
    assert torch.equal(z, xs.reshape(2, 3, 4, 5).permute(0, 2, 1, 3))


def test_detach_in_the_model_still_stops_the_gradient():
    """``detach`` decomposes to ``alias`` (a view the min-cut partitioner may
    recompute) below autograd: a detached branch in the user's forward still gets no
    gradient."""
    g = torch.Generator().manual_seed(22)
    x = torch.randn(5, 7, generator=g)

    def fn(x):
        y = torch.tanh(x)
        return (y * y.detach().exp()).sum(dim=1)

    check_against_eager(fn, x)


def test_attention_layers_save_softmax_statistics_not_probabilities(monkeypatch):
    """A mask made from scalars (an iota compared with a bound, as BERT's) that every
    layer's softmax reads is rebuilt in each region that reads it (``remat.py``), so
    min-cut saves each layer's 16-bit scores and two per-row statistics instead of
    its fp32 probabilities (the last layer, nearest the backward, may still save
    them); gradients match eager."""
    graphs = graphs_partitioned(monkeypatch)
    B, H, S, D, layers = 2, 2, 8, 4, 4

    def fn(q, k, v):
        cond = (torch.arange(S) >= 0)[None, None, :, None].expand(B, 1, S, S)
        mask = torch.where(cond, torch.tensor(0.0), torch.finfo(torch.float32).min)
        x = q
        for _ in range(layers):
            p = torch.softmax(torch.matmul(x, k.transpose(-1, -2)) / 2.0 + mask, dim=-1)
            x = torch.matmul(p.to(torch.bfloat16), v)
        return x

    g = torch.Generator().manual_seed(21)
    q, k, v = (torch.randn(B, H, S, D, generator=g).to(torch.bfloat16).requires_grad_() for _ in range(3))
    out = torch.compile(fn, backend="pyfuser")(q, k, v)
    out.float().sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    fn(q, k, v).float().sum().backward()
    for a, t in zip(got, (q, k, v)):
        torch.testing.assert_close(a, t.grad, rtol=2e-2, atol=2e-2)
    assert len(graphs) == 2
    saved = [n.meta["val"] for n in graphs[1].graph.nodes if n.op == "placeholder"
             and isinstance(n.meta.get("val"), torch.Tensor)]
    probs = [s for s in saved if s.dtype == torch.float32 and s.shape == (B, H, S, S)]
    stats = [s for s in saved if s.dtype == torch.float32 and s.shape == (B, H, S, 1)]
    assert len(probs) <= 1 and len(stats) >= 2 * (layers - 1)
    assert not [s for s in saved if s.shape == (B, 1, S, S)]  # the mask is not saved either


@pytest.mark.parametrize("mask", ["bf16", "fp32", "bool", "fp32+bool"])
def test_softmax_of_16_bit_scores_is_recomputed_not_saved(monkeypatch, mask):
    """A softmax computed in fp32 from 16-bit scores (autocast's softmax, LLaMA's
    ``softmax(dtype=float32)``) is recomputed in the backward from the scores and two
    row statistics, in every layer, even where the mask comes from an input that all
    layers share (a padding mask, as the zoo's causal models have; in fp32, the
    model's dtype, it promotes the masked scores to fp32; "fp32+bool" also selects
    with a bool mask of the scores' full size): min-cut's bias toward saving what lies
    nearest the backward saved the fp32 probabilities, twice the bytes of the scores
    (``remat.tag_upcast_softmax``).  Gradients match eager."""
    graphs = graphs_partitioned(monkeypatch)
    B, H, S, D, layers = 2, 2, 8, 4, 3

    def fn(q, k, v, keep, full):
        bias = None if mask == "bool" else torch.where(keep, 0.0, -1e4).to(
            torch.bfloat16 if mask == "bf16" else torch.float32)
        x = q
        for _ in range(layers):
            s = torch.matmul(x, k.transpose(-1, -2)) * 0.5
            s = torch.where(keep, s, torch.finfo(s.dtype).min) if bias is None else s + bias
            if mask == "fp32+bool":
                s = torch.where(full, s, -1e4)
            p = torch.softmax(s, dim=-1, dtype=torch.float32)
            x = torch.matmul(p.to(torch.bfloat16), v)
        return x

    g = torch.Generator().manual_seed(23)
    q, k, v = (torch.randn(B, H, S, D, generator=g).to(torch.bfloat16).requires_grad_() for _ in range(3))
    keep = (torch.rand(B, 1, S, S, generator=g) > 0.2) | torch.eye(S, dtype=torch.bool)
    full = (torch.rand(B, H, S, S, generator=g) > 0.1) | torch.eye(S, dtype=torch.bool)
    out = torch.compile(fn, backend="pyfuser")(q, k, v, keep, full)
    out.float().sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    fn(q, k, v, keep, full).float().sum().backward()
    for a, t in zip(got, (q, k, v)):
        torch.testing.assert_close(a, t.grad, rtol=2e-2, atol=2e-2)
    assert len(graphs) == 2
    saved = [n.meta["val"] for n in graphs[1].graph.nodes if n.op == "placeholder"
             and isinstance(n.meta.get("val"), torch.Tensor)]
    assert not [s for s in saved if s.dtype == torch.float32 and s.shape == (B, H, S, S)]
    assert len([s for s in saved if s.dtype == torch.float32 and s.shape == (B, H, S, 1)]) >= 2 * layers


def test_the_backend_computes_the_key_gradient_transposed(monkeypatch):
    """End to end: grouped-query attention trained through the backend; the backward's
    key-gradient bmm is computed transposed and the gradients match eager's."""
    graphs = graphs_partitioned(monkeypatch)

    def attention(q, k, v):
        b, h, s, d = q.shape
        rep = h // k.shape[1]
        k = k[:, :, None].expand(b, k.shape[1], rep, s, d).reshape(b, h, s, d)
        v = v[:, :, None].expand(b, v.shape[1], rep, s, d).reshape(b, h, s, d)
        p = torch.softmax((q @ k.transpose(2, 3)).float() * d ** -0.5, -1).to(q.dtype)
        return (p @ v).sum()

    gen = torch.Generator().manual_seed(23)
    q = torch.randn(2, 4, 16, 8, generator=gen).bfloat16().requires_grad_()
    k = torch.randn(2, 2, 16, 8, generator=gen).bfloat16().requires_grad_()
    v = torch.randn(2, 2, 16, 8, generator=gen).bfloat16().requires_grad_()
    torch._dynamo.reset()
    torch.compile(attention, backend="pyfuser")(q, k, v).backward()
    want = [t.grad for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    attention(q, k, v).backward()
    for got, ref in zip(want, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2)
    backward = graphs[-1]
    bmms = [n.meta["val"] for n in backward.graph.nodes if n.target == torch.ops.aten.bmm.default]
    transposed = [n for n in backward.graph.nodes if n.target == torch.ops.aten.transpose.int
                  and n.args[0].target == torch.ops.aten.bmm.default]
    assert len(bmms) == 4 and len(transposed) == 1  # the key gradient's product, turned


def test_wide_misaligned_dims_pad_to_whole_cache_lines():
    """A misaligned dim pads to a multiple of 8 elements (16 bytes); one of 4096 or
    more (a vocabulary) to a multiple of 64 (128 bytes): GPT-2's 50257 words to 50304.
    Aligned dims are left alone (symbolic ones: the test above)."""
    from pyfuser.dynamo.rewrites.pad_matmuls import _pad_amount

    assert [_pad_amount(n) for n in (1001, 250, 4095, 4097, 30522, 50257)] == [7, 6, 1, 63, 6, 47]
    assert [_pad_amount(n) for n in (768, 4096, 50264, 30528)] == [0, 0, 0, 0]
