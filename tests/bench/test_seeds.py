"""The report's seed fusions (bench/seeds.py) at small sizes, against eager written by
hand: the 2022 API end to end, the scheduling-relevant patterns (a reshape at the top,
softmax and log_softmax rows, a rank-preserving broadcast of the mask) and dropout."""
from __future__ import annotations

import pytest
import torch

from pyfuser import Fusion, FusionDefinition
from pyfuser.bench.seeds import DROPOUT_KEEP_SCALE, SEEDS

from ..helpers import assert_matches, gen_for

# Odd extents on purpose (not multiples of a block size), and one row longer than
# a typical block.
SIZES = {
    "bert_softmax_dropout": [(2, 3, 16), (1, 2, 33)],
    "log_softmax_full": [(2, 8, 1001), (3, 1, 40)],
    "log_softmax_logsum": [(16, 1001), (5, 3000)],
    "log_softmax_sub": [(16, 1001), (5, 3000)],
}
CASES = [(name, sizes) for name, all_sizes in SIZES.items() for sizes in all_sizes]


def run_seed(name, sizes):
    case = SEEDS[name]
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        case.build(fd, *sizes)
    inputs = case.make_inputs(sizes, "cpu", gen_for(name, sizes))
    return inputs, fs.execute(inputs), case.eager(*inputs, *sizes)


@pytest.mark.parametrize("name,sizes", CASES, ids=lambda v: str(v))
def test_seed_fusion_matches_eager(name, sizes):
    inputs, outs, want = run_seed(name, sizes)
    if name == "bert_softmax_dropout":
        scaled_mask, probs, keep, dropped = outs
        assert_matches(scaled_mask, want[0])
        assert_matches(probs, want[1], tol=(1e-5, 1e-6))
        assert keep.dtype == torch.bool and keep.shape == probs.shape
        assert 0.8 < keep.float().mean().item() < 0.97
        assert_matches(dropped, (keep.float() * probs * DROPOUT_KEEP_SCALE).half())
        return
    assert len(outs) == len(want)
    for i, (got, ref) in enumerate(zip(outs, want)):
        # fp16 results may differ by one unit where the fp32 value sits on a rounding
        # boundary; log_softmax_full's last output is the fp32 copy of its fp16 one.
        half_precision = got.dtype == torch.float16 or (name == "log_softmax_full" and i == 2)
        assert_matches(got.contiguous(), ref.contiguous(), what=f"{name} output {i}",
                       tol=(2e-3, 2e-3) if half_precision else (1e-5, 1e-5))
    if name == "log_softmax_full":
        assert torch.equal(outs[2], outs[1].float())


def test_bert_dropout_is_fresh_each_execute_and_replays_after_manual_seed():
    case = SEEDS["bert_softmax_dropout"]
    with FusionDefinition() as fd:
        case.build(fd, *case.small_sizes)
    inputs = case.make_inputs(case.small_sizes, "cpu", gen_for("bert-rng"))
    torch.manual_seed(1)
    a = fd.execute(inputs)[2]
    b = fd.execute(inputs)[2]
    torch.manual_seed(1)
    c = fd.execute(inputs)[2]
    assert not torch.equal(a, b) and torch.equal(a, c)


def test_view_output_shares_storage_with_the_input():
    """log_softmax_full's T1 is a view of the input: it must be returned as a view
    (an alias moves no bytes), not a copy."""
    inputs, outs, _ = run_seed("log_softmax_full", SEEDS["log_softmax_full"].small_sizes)
    t1 = outs[0]
    assert t1.untyped_storage().data_ptr() == inputs[0].untyped_storage().data_ptr()
    assert t1.data_ptr() == inputs[0].data_ptr()
    inputs[0][0, 0] = 42.0
    assert t1[0, 0, 0].item() == 42.0


def test_seed_definitions_print_the_report_op_sequence():
    """Same op sequence as the report's files (the printer renames view -> reshape, and a
    broadcast_in_dim that adds no dim is the expand it is, as nvFuser records it).  The
    2022 form prints the ops in the order they were defined (nvFuser's form prints them
    depth first from the outputs)."""
    case = SEEDS["bert_softmax_dropout"]
    with FusionDefinition(Fusion()) as fd:
        case.build(fd, *case.full_sizes)
    ops = [line.split("fd.ops.")[1].split("(")[0] for line in repr(fd).splitlines() if "fd.ops." in line]
    assert ops == ["reshape", "mul", "cast", "sub", "div", "mul", "cast", "expand", "cast", "add", "max",
                   "broadcast_in_dim", "expand", "sub", "exp", "sum", "broadcast_in_dim",
                   "expand", "div", "rand_like", "gt", "cast", "mul", "mul", "cast", "expand"]
    assert "shape=[64, 12, 128, 128]" in repr(fd)
