"""Split outer reductions: programs along the reduced extent, partials in scratch,
the strip's last program folds them (see ``codegen.tiles.split``).  Checked against the
reference executor on random inputs, executed twice (the counters reset)."""
from __future__ import annotations

import pytest
import torch

from pyfuser.codegen.emit import split_eligible
from pyfuser.ir.concretize import bind
from pyfuser.schedulers import Choices

from .common import DataType, check, define_input, fusion, gen_for, kernels_of, make_tensor

SPLIT = {"persistent": False, "block_j": 8, "block_k": 8}


def _x(shape, dtype=torch.float16, name="x"):
    return make_tensor(shape, dtype, gen_for("split", name, shape, str(dtype)))


@pytest.mark.parametrize("stages", [1, 3], ids=["stages1", "stages3"])
@pytest.mark.parametrize("split", [1, 2, 4, 16])
@pytest.mark.parametrize("shape", [(37, 20), (5, 3), (129, 33), (0, 6)], ids=str)
def test_column_sums_with_a_pointwise_side_output(split, shape, stages):
    """The bias-gradient shape: dw = sum(dy * x, 0), db = sum(dy, 0), plus dx; the
    chunk loop plain or software-pipelined (``stages``)."""
    x, dy = _x(shape), _x(shape, name="dy")

    def build(fd):
        tx, tdy = define_input(fd, x), define_input(fd, dy)
        xf, gf = fd.ops.cast(tx, DataType.Float), fd.ops.cast(tdy, DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(xf, gf), dims=[0]), DataType.Half))
        fd.add_output(fd.ops.sum(gf, dims=[0], keepdim=True))
        fd.add_output(fd.ops.cast(fd.ops.mul(gf, 2.0), DataType.Half))

    fd = fusion(build)
    with Choices(**SPLIT, split=split, stages=stages):
        for _ in range(2):
            check(fd, [x, dy], n_launches=1, scheduler="outer_reduction", split=split, stages=stages)


@pytest.mark.parametrize("op", ["max", "min", "var_mean", "prod"])
def test_other_reductions_fold_their_partials(op):
    x = _x((70, 19), torch.float32)

    def build(fd):
        t = define_input(fd, x)
        if op == "var_mean":
            v, m = fd.ops.var_mean(t, dims=[0], correction=1)
            fd.add_output(v)
            fd.add_output(m)
        else:
            fd.add_output(getattr(fd.ops, op)(fd.ops.mul(t, 0.5 if op == "prod" else 1.0), dims=[0]))

    fd = fusion(build)
    with Choices(**SPLIT, split=4):
        for _ in range(2):
            check(fd, [x], n_launches=1, scheduler="outer_reduction", split=4)


def test_nan_propagates_through_the_partials():
    x = _x((40, 9), torch.float32)
    x[33, 4] = float("nan")

    def build(fd):
        fd.add_output(fd.ops.max(define_input(fd, x), dims=[0]))

    with Choices(**SPLIT, split=4):
        (out,) = check(fusion(build), [x], scheduler="outer_reduction", split=4)
    assert out[4].isnan() and not out[:4].isnan().any()


def test_outputs_that_need_the_reduction_at_every_row_are_not_split():
    x = _x((16, 8), torch.float32)

    def build(fd):
        t = define_input(fd, x)
        m = fd.ops.sum(t, dims=[0], keepdim=True)
        fd.add_output(fd.ops.sub(t, fd.ops.broadcast_in_dim(m, shape=[16, 8], broadcast_dims=[0, 1])))

    fd = fusion(build)
    shapes = bind(fd.ir, [x]).shapes
    assert not split_eligible(fd.ir.outputs, shapes, fd.ir.inputs[0], (0,))
    with Choices(**SPLIT, split=4):  # asked for anyway: the scheduler falls back to one program per strip
        check(fd, [x], n_launches=1)


@pytest.mark.parametrize("params", [{"persistent": False, "block_j": 8, "block_k": 8},
                                    {**SPLIT, "split": 4}], ids=["multi-pass", "split"])
def test_a_side_output_is_written_in_the_reduction_pass(params):
    """The gradient stored beside its column sum is written from the values the
    reduction pass loads: each input is read once, not again in a last pass."""
    x = _x((40, 24))

    def build(fd):
        xf = fd.ops.cast(define_input(fd, x), DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.mul(xf, 3.0), DataType.Half))
        fd.add_output(fd.ops.sum(xf, dims=[0]))

    fd = fusion(build)
    with Choices(**params):
        check(fd, [x], n_launches=1, scheduler="outer_reduction")
    (src,) = [k[0].source for k in fd._runtime.kernels.values()]
    assert src.count("tl.load(T0_ptr") == 1, src


def test_a_split_column_kernel_on_stored_row_statistics_in_a_cached_general_plan():
    """Layer-norm backward: a row kernel stores mean and rstd-like statistics, the
    column kernel (split) reads them; the cached program reuses its scratch buffer
    and counters on every execute."""
    import pyfuser
    from tests.runtime.general_fusions import define, layer_norm_backward, layer_norm_backward_inputs

    fd = define(layer_norm_backward, 40, 24)
    with Choices(split=4, persistent=False, block_j=8, block_k=8):
        for seed in range(3):
            inputs = layer_norm_backward_inputs(40, 24, seed=seed)
            before = pyfuser.cache_info()["launches"]
            check(fd, inputs, what=f"execute {seed}")
            assert pyfuser.cache_info()["launches"] - before >= 2
    plan = list(fd._runtime.plans.values())[-1]
    assert plan.general and any(getattr(p, "split", 1) == 4 for _, p in kernels_of(fd))
