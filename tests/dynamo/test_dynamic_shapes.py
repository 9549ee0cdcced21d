"""Graphs with symbolic (dynamic) shapes through the backend against eager.

Dynamo marks sizes dynamic three ways: ``dynamic=True`` (every size symbolic from the
first compile), the default automatic dynamic (the first call compiles static sizes,
the first call with another size recompiles with that size symbolic), and
``torch._dynamo.mark_dynamic``.  In each, the graph's regions are translated with
symbolic extents (``translate.py``), so after its first compile no size needs another
Dynamo graph or another translation, and pyfuser compiles kernels only where a new size
falls into a size class its schedulers have not seen (other heuristics' params); a
size seen before compiles nothing.  No ``FallbackWarning`` may be raised (the
conftest makes one an error).

Counts asserted: Dynamo graphs compiled (Dynamo's ``unique_graphs``; with
``dynamic=True`` Dynamo restarts its first analysis once, calling the backend twice
for one graph), regions and translations (``pyfuser.dynamo.stats()``), kernels
compiled (``pyfuser.cache_info()["kernels_compiled"]``, since the test began).
Tolerances are test_zoo's.
"""
import copy

import pytest
import torch
from torch._dynamo.utils import counters

import pyfuser
import pyfuser.dynamo as pd
from pyfuser.bench import zoo

from .test_zoo import LOSS_TOL, assert_grads_match

MODES = ("automatic", "dynamic", "mark_dynamic")


class Counts:
    """Dynamo graphs and pyfuser kernels compiled since it was made."""

    def __init__(self):
        self.start = (counters["stats"]["unique_graphs"], pyfuser.cache_info()["kernels_compiled"])

    @property
    def graphs(self) -> int:
        return counters["stats"]["unique_graphs"] - self.start[0]

    @property
    def kernels(self) -> int:
        return pyfuser.cache_info()["kernels_compiled"] - self.start[1]

    def now(self) -> tuple:
        """(graphs, regions, translations, kernels)."""
        return self.graphs, pd.stats()["regions"], pd.stats()["fusions_created"], self.kernels


def compiled_with(model, mode):
    return torch.compile(model, backend="pyfuser", dynamic=True if mode == "dynamic" else None), Counts()


def marked(batch: dict, mode, dims=(0,)) -> dict:
    """``batch`` with its tensors' ``dims`` marked dynamic (mode "mark_dynamic")."""
    if mode == "mark_dynamic":
        for v in batch.values():
            if isinstance(v, torch.Tensor) and v.dim():
                torch._dynamo.mark_dynamic(v, [d for d in dims if d < v.dim()])
    return batch


def symbolic_fusions() -> int:
    """How many translated fusions have an input with a symbolic extent."""
    from pyfuser.dynamo.regions import region

    return sum(any(None in t.shape for t in tr.fd.ir.inputs if hasattr(t, "rank"))
               for tr in region._TRANSLATIONS.values() if not isinstance(tr, Exception))


def views_sizes_and_reductions(x):
    b, s, h = x.shape
    rows = torch.softmax((x * 2).reshape(b * s, h), -1)  # a view to a product of sizes
    back = rows.view(b, s, h) + x  # and back: no input has size b alone
    m = x.mean(1)  # a reduction over a symbolic dim, divided by a size
    filled = torch.full((b, h), 3.0) + m  # a fill of a symbolic shape
    return back * 0.5, filled.exp(), x.sum(0) / s


@pytest.mark.parametrize("mode", MODES)
def test_views_fills_and_reductions_over_symbolic_sizes(mode):
    compiled, counter = compiled_with(views_sizes_and_reductions, mode)
    shapes = [(2, 3, 8), (3, 5, 8), (4, 2, 8), (2, 3, 8)]
    for i, shape in enumerate(shapes):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(i))
        if mode == "mark_dynamic":
            torch._dynamo.mark_dynamic(x, [0, 1])
        for got, want in zip(compiled(x), views_sizes_and_reductions(x)):
            torch.testing.assert_close(got, want, rtol=1.3e-5, atol=1e-6)
        if i == 1:
            after_second = counter.now()[:3]
    assert counter.graphs == (2 if mode == "automatic" else 1)
    assert counter.now()[:3] == after_second
    assert symbolic_fusions() >= 1 and pd.stats().get("fallbacks", 0) == 0


def test_a_symbolic_graph_takes_sizes_as_inputs_and_guards_nothing_new():
    """SymInt placeholders (Dynamo passes the sizes a graph reads as inputs) reach the
    regions as Int scalars; sizes past the first compile's are served by it."""
    def fn(x, y):
        return (x.view(-1) * y.size(0)).view(x.shape[0], -1).softmax(-1) + y.sum()

    counter = Counts()
    compiled = torch.compile(fn, backend="pyfuser", dynamic=True)
    for n, m in [(2, 3), (5, 4), (3, 7), (6, 2)]:
        x, y = torch.randn(n, 6), torch.randn(m)  # first sizes all distinct: no duck-sizing guard
        torch.testing.assert_close(compiled(x, y), fn(x, y), rtol=1.3e-5, atol=1e-6)
    assert counter.graphs == 1
    assert pd.stats()["regions"] >= 1 and symbolic_fusions() >= 1


def test_ops_taking_a_size_stay_in_their_region():
    """An op with a SymInt argument (a product by a size, a view or an expand to a
    symbolic shape) joins the region around it, which takes the size as an Int
    input: left in ATen, it cut the region in two (BERT's loss backward at variable
    lengths ran an fp16 add over its logits as an ATen kernel of its own)."""
    from pyfuser.dynamo.report import logs, reports as report

    def fn(x, y):
        z = (x * 2).view(-1) * y.size(0)
        return z.view(x.shape[0], -1).softmax(-1).expand(2, x.shape[0], x.shape[1]) + y.sum()

    compiled = torch.compile(fn, backend="pyfuser", dynamic=True)
    with logs.collecting() as found:
        for n, m in [(2, 3), (5, 4), (3, 7)]:
            x, y = torch.randn(n, 6), torch.randn(m)
            torch.testing.assert_close(compiled(x, y), fn(x, y), rtol=1.3e-5, atol=1e-6)
    (rep, gm), = found
    outside = {o.node.name: o.code for o in report.build(gm, rep.name, rep.kind, explain=True).outside}
    assert "non_tensor" not in outside.values(), outside
    assert outside == {} or set(outside.values()) <= {"view_at_edge"}, outside


TABLE = torch.randn(16, 8, generator=torch.Generator().manual_seed(7))


def table_slices(x):
    """Slices of a static table at bounds computed from a symbolic size (LLaMA's
    ``cos[:seq]``): an end inside, a start and an end past the size, a negative start."""
    n = x.shape[0]
    return (x * 2 + TABLE[:n]) * TABLE[n - 2:n + 100].sum(0) + TABLE[-n:]


@pytest.mark.parametrize("mode", ["automatic", "dynamic"])
def test_slices_at_symbolic_bounds_fuse_and_clamp_as_aten_does(mode):
    from pyfuser.dynamo.report import logs, reports as report

    compiled, _ = compiled_with(table_slices, mode)
    with logs.collecting() as found:
        for n in (3, 5, 4, 9):
            x = torch.randn(n, 8, generator=torch.Generator().manual_seed(n))
            torch.testing.assert_close(compiled(x), table_slices(x), rtol=1.3e-5, atol=1e-6)
    left = [(o.node.name, o.code) for rep, gm in found for o in report.build(gm, rep.name, rep.kind).outside
            if "slice" in str(o.node.target) and o.code != "view_at_edge"]
    assert left == []
    assert symbolic_fusions() >= 1


def rope_like(x, cos, sin):
    """RoPE's rotate_half and a [CLS]-style select: their backwards are a slice_backward
    and a select_backward along a static dim of a tensor with a symbolic one."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    y = x * cos + rotated * sin
    return (y * y).sum() + (y[:, 0] * 3).sum()


def test_slice_and_select_backwards_along_a_static_dim_fuse_at_symbolic_sizes():
    """The backward's pads need only the padded dim's size: at a symbolic sequence
    length RoPE's slice_backward stayed in ATen ("symbolic shape") and cut the
    backward's regions.  Automatic dynamic shapes: the second size makes the rows
    symbolic, the last dim stays 8."""
    from pyfuser.dynamo.report import logs, reports as report

    compiled = torch.compile(rope_like, backend="pyfuser")
    with logs.collecting() as found:
        for n in (3, 5, 4):
            g = torch.Generator().manual_seed(n)
            x, cos, sin = (torch.randn(n, 8, generator=g) for _ in range(3))
            x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
            compiled(x1, cos, sin).backward()
            rope_like(x2, cos, sin).backward()
            torch.testing.assert_close(x1.grad, x2.grad, rtol=1.3e-5, atol=1e-5)
    backward = [report.build(gm, rep.name, rep.kind, explain=True) for rep, gm in found if rep.kind == "backward"]
    assert len(backward) == 2  # static, then symbolic rows
    kept = [(o.node.name, o.code) for r in backward for o in r.outside
            if "slice_backward" in str(o.node.target) or "select_backward" in str(o.node.target)]
    assert kept == []


# --- the zoo's MLP: LayerNorm -> Linear -> GELU -> Linear, cross-entropy --------------------

BATCHES = (2, 3, 5, 7, 4)


@pytest.mark.parametrize("mode", MODES)
def test_mlp_training_at_changing_batch_sizes(mode):
    built = zoo.build("mlp")
    reference, model = built.model, copy.deepcopy(built.model)
    compiled, counter = compiled_with(model, mode)
    g = torch.Generator().manual_seed(1)
    batches = [built.batch(n, g) for n in BATCHES]
    counts = []
    for step, batch in enumerate(batches * 2):  # every size twice: the second round compiles nothing
        got = zoo.loss(compiled(**marked(dict(batch), mode)))
        got.backward()
        want = zoo.loss(reference(**batch))
        want.backward()
        torch.testing.assert_close(got, want, **LOSS_TOL, msg=lambda m: f"step {step}, loss: {m}")
        assert_grads_match(reference, model, step)
        reference.zero_grad()
        model.zero_grad()
        counts.append(counter.now())
    print(f"\nmlp {mode}: (graphs, regions, fusions, kernels) per step {counts}")
    graphs = 2 if mode == "automatic" else 1
    first_dynamic = 1 if mode == "automatic" else 0
    assert counts[-1][0] == graphs, counts
    assert counts[-1][:3] == counts[first_dynamic][:3], "a new size made a new graph, region or translation"
    # From the second round's first step (the automatic mode's static graph saw batch 2
    # first), every size has been through the symbolic graph.
    assert counts[-1] == counts[len(BATCHES)], "a size seen before compiled something"
    assert pd.stats().get("fallbacks", 0) == 0 and symbolic_fusions() >= 1


def test_mlp_inference_at_changing_batch_sizes():
    built = zoo.build("mlp")
    model = built.model.eval()
    compiled, counter = compiled_with(model, "automatic")
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for n in BATCHES:
            batch = built.batch(n, g)
            torch.testing.assert_close(compiled(**batch), model(**batch), **LOSS_TOL)
    assert counter.graphs == 2 and pd.stats().get("fallbacks", 0) == 0


# --- the zoo's transformers at changing batch and sequence lengths ---------------------------

# (batch, sequence) per step: three distinct of each (the first compiles static sizes,
# the second the symbolic graph), then the second again: it must compile nothing.
SIZES = ((2, 8), (3, 6), (4, 4), (3, 6))


def batches_of(name):
    """The model (built for the longest sequence) and a batch maker per sequence
    length: the same seed and config give the same weights."""
    longest = max(s for _, s in SIZES)
    model = zoo.build(name, layers=1, seq=longest).model
    makers = {s: zoo.build(name, layers=1, seq=s).batch for _, s in SIZES}
    return model, makers


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "t5", "vit"])
def test_transformer_trains_at_changing_batch_and_sequence(name):
    pytest.importorskip("transformers")
    if name == "vit":  # its sequence is the image's patches: batch sizes only
        model, makers = zoo.build(name, layers=1).model, None
        batch_of = zoo.build(name, layers=1).batch
    else:
        model, makers = batches_of(name)
    reference, model = model, copy.deepcopy(model)
    compiled, counter = compiled_with(model, "automatic")
    g = torch.Generator().manual_seed(3)
    counts = []
    for step, (n, s) in enumerate(SIZES):
        batch = batch_of(n, g) if makers is None else makers[s](n, g)
        got = zoo.loss(compiled(**batch))
        got.backward()
        want = zoo.loss(reference(**batch))
        want.backward()
        torch.testing.assert_close(got, want, **LOSS_TOL, msg=lambda m: f"step {step}, loss: {m}")
        assert_grads_match(reference, model, step)
        reference.zero_grad()
        model.zero_grad()
        counts.append(counter.now())
    print(f"\n{name}: (graphs, regions, fusions, kernels) per step {counts}")
    assert counts[-1][:3] == counts[1][:3], "a size after the dynamic recompile made a new graph or translation"
    assert counts[-1] == counts[-2], "a size seen before compiled a kernel"
    assert pd.stats().get("fallbacks", 0) == 0 and symbolic_fusions() >= 1
