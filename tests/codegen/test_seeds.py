"""The report's seed fusions (``pyfuser.bench.seeds``) at reduced sizes, written with
the 2022 API as in the report: every output matches the reference executor (random
ones through the same RNG state the runtime drew), each execute is exactly one
kernel launch, and the log-softmax's first output is a view of the input."""
from __future__ import annotations

import pytest
import torch

from pyfuser import Fusion, FusionDefinition
from pyfuser.bench.seeds import SEEDS
from pyfuser.reference import run_reference
from pyfuser.runtime.args import make_rng_state

from .common import assert_matches, gen_for, launches, tol_for

# The CPU-friendly sizes of the seed list, plus odd ones and the 30522-wide vocabulary row.
SIZES = {
    "bert_softmax_dropout": [SEEDS["bert_softmax_dropout"].small_sizes, (1, 2, 7), (2, 1, 33)],
    "log_softmax_full": [SEEDS["log_softmax_full"].small_sizes, (1, 3, 129), (1, 3, 30522)],
    "log_softmax_logsum": [SEEDS["log_softmax_logsum"].small_sizes, (7, 1), (2, 30522)],
    "log_softmax_sub": [SEEDS["log_softmax_sub"].small_sizes, (1, 7), (3, 30522)],
}
CASES = [(name, sizes) for name, all_sizes in SIZES.items() for sizes in all_sizes]


def _build(case, sizes):
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        case.build(fd, *sizes)
    return fs, fd


def _reference(fd, inputs, seed):
    """The reference executor with the random state an execute after
    ``torch.manual_seed(seed)`` draws."""
    torch.manual_seed(seed)
    rng_state, _ = make_rng_state(fd.ir, inputs[0].device)
    return run_reference(fd.ir, inputs, rng_state=rng_state)


def _tol(dtype):
    # log-softmax of values up to ~12 in magnitude: fp32 results are O(10), so the
    # relative tolerance dominates; fp16 outputs compare at fp16 precision.
    return tol_for(dtype) if dtype != torch.float32 else (1e-5, 2e-5)


@pytest.mark.parametrize("name,sizes", CASES, ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in CASES])
def test_seed_fusion(name, sizes):
    case = SEEDS[name]
    fs, fd = _build(case, sizes)
    inputs = case.make_inputs(sizes, "cpu", gen_for("seed", name, sizes))
    for attempt in range(2):  # the first execute plans and compiles, the second takes the cached path
        torch.manual_seed(1234 + attempt)
        with launches() as n:
            outs = fs.execute(inputs)
        assert n[0] == 1, f"{name} {sizes}: {n[0]} kernel launches per execute, expected exactly 1"
        want = _reference(fd, inputs, 1234 + attempt)
        assert len(outs) == len(want)
        for i, (g, w) in enumerate(zip(outs, want)):
            assert_matches(g, w, what=f"{name} {sizes} output {i} (execute {attempt})",
                           tol=_tol(w.dtype) if w.dtype.is_floating_point else None)
        # and the deterministic outputs against PyTorch eager, written by hand
        eager = case.eager(*inputs, *sizes)
        comparable = [0, 1] if name == "bert_softmax_dropout" else range(len(eager))
        for i in comparable:
            assert_matches(outs[i], eager[i], what=f"{name} {sizes} output {i} vs eager",
                           tol=_tol(eager[i].dtype) if eager[i].dtype.is_floating_point else None)


@pytest.mark.parametrize("sizes", SIZES["bert_softmax_dropout"], ids=str)
def test_bert_dropout_outputs_are_consistent(sizes):
    """The keep mask keeps about 90%, and the dropped-out output is mask * softmax * 1.11111."""
    case = SEEDS["bert_softmax_dropout"]
    fs, _ = _build(case, sizes)
    inputs = case.make_inputs(sizes, "cpu", gen_for("bert", sizes))
    scaled_mask, probs, keep, dropped = fs.execute(inputs)
    assert keep.dtype == torch.bool and dropped.dtype == torch.float16
    frac = keep.float().mean().item()
    assert 0.75 < frac < 0.99 if keep.numel() > 400 else 0.5 < frac <= 1.0, frac
    assert_matches(dropped, (keep.float() * probs * 1.11111).half(), what="dropout")
    assert scaled_mask.shape == inputs[1].shape  # the small [B, 1, 1, S] tensor met on the way


@pytest.mark.parametrize("sizes", SIZES["log_softmax_full"], ids=str)
def test_log_softmax_full_view_output_aliases_input(sizes):
    case = SEEDS["log_softmax_full"]
    fs, _ = _build(case, sizes)
    (x,) = case.make_inputs(sizes, "cpu", gen_for("alias", sizes))
    for _ in range(2):
        with launches() as n:
            view, out16, out32 = fs.execute([x])
        assert n[0] == 1
        assert view.shape == (sizes[0], sizes[1], sizes[2])
        assert view.data_ptr() == x.data_ptr()
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert torch.equal(view.reshape(x.shape), x)


@pytest.mark.parametrize("sizes", [s for s in SIZES["log_softmax_logsum"] if s[1] > 1], ids=str)
def test_log_softmax_logsum_output_is_an_expand_of_the_row_values(sizes):
    """The output broadcasts a per-row value over the row: as nvFuser allocates expanded
    outputs, it comes back as a stride-0 expand of the [R, 1] values the kernel stores."""
    case = SEEDS["log_softmax_logsum"]
    fs, fd = _build(case, sizes)
    (x,) = case.make_inputs(sizes, "cpu", gen_for("expand", sizes))
    for _ in range(2):  # the first execute, then the cached one
        (out,) = fs.execute([x])
        assert out.shape == sizes and out.stride() == (1, 0)
        assert out.untyped_storage().nbytes() == sizes[0] * 4
        assert_matches(out, fd.reference([x])[0], what="logsum", tol=tol_for(torch.float32))


def test_view_only_fusion_launches_nothing():
    """A fusion whose only output is a view of its input costs no kernel."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True])
        fd.add_output(fd.ops.view(t, original_shape=[6, 35], new_shape=[2, 3, 35]))
    x = torch.randn(6, 35)
    with launches() as n:
        (y,) = fd.execute([x])
    assert n[0] == 0
    assert y.data_ptr() == x.data_ptr() and y.shape == (2, 3, 35)
