"""The pointwise broadcast tile (``schedulers.pointwise``, ``tiles.flat.BroadcastTile``):
heavy ops on values broadcast along some dims are computed once per tile row or
column.  Each case checks that the tile was chosen (its ``outer`` dims) and every
output against the reference executor, on random inputs with poisoned outputs, with
the default block and with blocks small enough for several programs on both grid
axes and partial tiles along each."""
from __future__ import annotations

import pytest
import torch

from pyfuser.bench import training as T
from pyfuser.schedulers import Choices

from .common import DataType, check, define_input, fusion, gen_for, kernels_of, make_tensor

BLOCKS = pytest.mark.parametrize("block", [None, 64, 256], ids=["default", "block64", "block256"])


def _blocked(block):
    return Choices(block=block) if block else Choices()


def _x(shape, dtype=torch.float32, name="x", **kw):
    return make_tensor(shape, dtype, gen_for("broadcast_tile", name, shape, str(dtype)), **kw)


@BLOCKS
@pytest.mark.parametrize("sizes", [(9, 5, 48, DataType.BFloat16), (33, 8, 32, DataType.Half), (4, 4, 16, DataType.Float)],
                         ids=lambda s: "x".join(map(str, s[:3])) + f"-{s[3].name}")
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
def test_rope_shares_cos_and_sin_across_heads(sizes, backward, block):
    """cos/sin of the [T, D] angles vary along dims 0 and 2: the heads (dim 1) go on k."""
    *shape, dt = sizes
    tdt = {DataType.BFloat16: torch.bfloat16, DataType.Half: torch.float16, DataType.Float: torch.float32}[dt]
    fd = fusion(lambda fd: T.build_rope(fd, sizes, backward=backward))
    inputs = [_x(shape, tdt)] + ([_x(shape, tdt, "dy")] if backward else []) + [T.rope_angles(shape[0], shape[-1])]
    with _blocked(block):
        check(fd, inputs, n_launches=1, scheduler="pointwise", outer=(1,))


def _heavy_op_on_rows(R, D):
    """x * erf(tanh(s)) with s a per-row scale; tanh(s) is also an output, reached on
    the walk and stored once per row."""

    def build(fd):
        x, s = fd.define_tensor(shape=[-1, -1]), fd.define_tensor(shape=[-1, 1])
        t = fd.ops.tanh(s)
        g = fd.ops.erf(fd.ops.broadcast_in_dim(t, shape=[R, D], broadcast_dims=[0, 1]))
        fd.add_output(fd.ops.mul(x, g))
        fd.add_output(t)

    return fusion(build)


@BLOCKS
@pytest.mark.parametrize("shape", [(37, 20), (5, 64), (130, 16)], ids=str)
def test_a_heavy_op_on_rows_is_computed_once_per_row(shape, block):
    """tanh and erf of a per-row scale broadcast along the row: rows on k, both on
    [BLOCK_K, 1] blocks."""
    R, D = shape
    with _blocked(block):
        check(_heavy_op_on_rows(R, D), [_x(shape), _x((R, 1), name="s")], n_launches=1, scheduler="pointwise", outer=(0,))


@BLOCKS
def test_strided_inputs_and_a_reached_output(block):
    """x read through a permute of a non-contiguous input; the broadcast angle's cos
    is also an output of its own [T, 1, D] shape, written once per element."""
    T_, H, D = 11, 6, 32
    xp = _x((H, T_, D), torch.float16).transpose(0, 1)  # [T, H, D] view, not contiguous

    def build(fd):
        x = define_input(fd, xp, contiguous=False)
        th = fd.define_tensor(shape=[-1, 1, -1])
        c = fd.ops.cos(th)
        cb = fd.ops.broadcast_in_dim(c, shape=[T_, H, D], broadcast_dims=[0, 1, 2])
        y = fd.ops.mul(fd.ops.cast(x, DataType.Float), cb)
        fd.add_output(fd.ops.cast(y, DataType.Half))
        fd.add_output(c)

    with _blocked(block):
        check(fusion(build), [xp, _x((T_, 1, D), name="th")], n_launches=1, scheduler="pointwise", outer=(1,))


def test_the_split_that_shares_most_heavy_ops_wins():
    """sin(theta) is shared by the heads, tanh(x) is not; the heads still go on k."""
    T_, H, D = 7, 4, 16

    def build(fd):
        x, th = fd.define_tensor(shape=[-1, -1, -1]), fd.define_tensor(shape=[-1, -1])
        s = fd.ops.broadcast_in_dim(fd.ops.sin(th), shape=[T_, H, D], broadcast_dims=[0, 2])
        fd.add_output(fd.ops.add(fd.ops.tanh(x), s))

    check(fusion(build), [_x((T_, H, D)), _x((T_, D), name="th")], n_launches=1, outer=(1,))


@pytest.mark.parametrize("case", ["no_heavy_op", "random", "short_rows", "few_shared"])
def test_flat_tile_where_sharing_does_not_pay(case):
    """No heavy op; a random op (one Philox call per 4 consecutive elements needs the
    flat walk); a contiguous last dim under 16; fewer than 4 elements sharing a value."""
    shape = {"short_rows": (40, 4, 8), "few_shared": (40, 3, 32)}.get(case, (40, 8, 32))
    T_, H, D = shape

    def build(fd):
        x, th = fd.define_tensor(shape=[-1, -1, -1]), fd.define_tensor(shape=[-1, -1])
        b = fd.ops.broadcast_in_dim(th, shape=[T_, H, D], broadcast_dims=[0, 2])
        y = fd.ops.mul(x, b if case == "no_heavy_op" else fd.ops.cos(b))
        if case == "random":
            y = fd.ops.mul(y, fd.ops.rand_like(x))
        fd.add_output(y)

    fd = fusion(build)
    inputs = [_x(shape), _x((T_, D), name="th")]
    if case == "random":  # random values: the reference draws its own; check the tile and the shape
        assert fd.execute(inputs)[0].shape == shape
        assert [p.outer for _, p in kernels_of(fd)] == [()]
    else:
        check(fd, inputs, n_launches=1, outer=())


@BLOCKS
@pytest.mark.parametrize("shape", [(2, 3, 40, 24), (1, 2, 16, 70), (3, 1, 33, 17)], ids=str)
def test_a_transposed_input_walks_the_transpose_tile(shape, block):
    """K^T made contiguous ([B, H, S, D] read as [B, H, D, S]), with a contiguous
    input of the output's layout beside it: the input's unit-stride dim (2 of the
    output) goes on k.  Where S is not a multiple of 16, j walks S alone and each
    program takes one (b, h): the stores stay contiguous along j."""
    B, H, S, D = shape
    kt = _x((B, H, S, D), torch.float16).transpose(2, 3)  # [B, H, D, S], unit stride along dim 2
    y = _x((B, H, D, S), torch.float32, "y")

    def build(fd):
        t = define_input(fd, kt, contiguous=False)
        u = define_input(fd, y)
        fd.add_output(fd.ops.set(t))
        fd.add_output(fd.ops.add(fd.ops.cast(t, DataType.Float), u))

    with _blocked(block):
        check(fusion(build), [kt, y], n_launches=1, scheduler="pointwise", outer=(2,),
              grid_dims=() if S % 16 == 0 else (0, 1))


def test_a_new_transposition_plans_again():
    """The unit-stride dim is part of the input signature: the same fusion on the
    other transposition (unit stride at the output's dim 0) plans its own tile."""
    base = _x((20, 24, 32), torch.float16)

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1, -1], contiguity=[False] * 3, dtype=DataType.Half)
        fd.add_output(fd.ops.mul(fd.ops.cast(t, DataType.Float), 2.0))

    fd = fusion(build)
    a = base.permute(2, 1, 0)  # [32, 24, 20]: unit stride along dim 0
    b = base.permute(0, 2, 1)  # [20, 32, 24]: unit stride along dim 1
    check(fd, [a], n_launches=1)
    check(fd, [b], n_launches=1)
    assert sorted(p.outer for _, p in kernels_of(fd)) == [(0,), (1,)]


def test_short_transposed_dims_stay_flat():
    x = _x((40, 8, 64), torch.float16).transpose(1, 2)  # [40, 64, 8]: the last dim is 8 long

    def build(fd):
        fd.add_output(fd.ops.set(define_input(fd, x, contiguous=False)))

    check(fusion(build), [x], n_launches=1, outer=())


@pytest.mark.parametrize("block", [16, 64], ids=["block16", "block64"])
@pytest.mark.parametrize("shape", [(37, 20), (5, 64), (3, 7)], ids=str)
def test_one_row_a_program_holds_the_rows_values_as_scalars(shape, block):
    """One row per program: ``k`` is the program's row, a scalar, with no row mask;
    the row's values (a heavy op, a row output stored once per row) are scalars and
    every output still matches, with several column blocks per row."""
    R, D = shape
    fd = _heavy_op_on_rows(R, D)
    with Choices(outer=(0,), block_outer=1, block=block):
        check(fd, [_x(shape), _x((R, 1), name="s")], n_launches=1, scheduler="pointwise", outer=(0,), block_outer=1)
    (src,) = [s.source for s, _ in fd._runtime.kernels.values()]
    assert "k = tl.program_id(1)\n" in src and "kmask" not in src


@BLOCKS
@pytest.mark.parametrize("shape", [(37, 45), (8, 19), (130, 16)], ids=str)
def test_per_row_inputs_walk_the_row_tile_under_a_pad(shape, block):
    """BERT's log-softmax backward from saved statistics, with the labels' one-hot
    term, the tangent added and the result padded for a GEMM: the per-row inputs
    (statistics, labels) put the rows on k and are read once per row, not once per
    element under the pad's column predicate."""
    R, V = shape
    x = _x((R, V), torch.float16)
    stats = _x((R, 1), name="m")
    labels = torch.randint(-1, V + 1, (R, 1), generator=gen_for("broadcast_tile", "labels", R, V))
    tangent = _x((R, V), torch.float16, "t")

    def build(fd):
        xs, m = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half), fd.define_tensor(shape=[-1, 1])
        lab = fd.define_tensor(shape=[-1, 1], dtype=DataType.Int)
        t = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        cols = fd.ops.broadcast_in_dim(fd.ops.iota(V, 0, 1, dtype=DataType.Int), shape=[1, V], broadcast_dims=[1])
        hit = fd.ops.where(fd.ops.eq(cols, lab), -0.25, 0.0)
        y = fd.ops.sub(hit, fd.ops.mul(fd.ops.exp(fd.ops.sub(fd.ops.cast(xs, DataType.Float), m)), m))
        y = fd.ops.add(t, fd.ops.cast(y, DataType.Half))
        fd.add_output(fd.ops.pad(y, [0, 3, 0, 0], 0.0))

    fd = fusion(build)
    with _blocked(block):
        check(fd, [x, stats, labels, tangent], n_launches=1, scheduler="pointwise", outer=(0,))
    src = "\n".join(s.source for s, _ in fd._runtime.kernels.values())
    assert "broadcast_to" not in src


def test_a_forced_outer_drops_the_transpose_tiles_grid_dims():
    """``Choices(outer=...)`` alone on a transposed input whose rows are not a multiple
    of 16 long: the transpose tile's grid dims (0, 1) belong to its own outer (2,), so
    the forced tile takes none, and the kernel still runs."""
    kt = _x((2, 3, 17, 24), torch.float16).transpose(2, 3)  # [2, 3, 24, 17], unit stride along dim 2

    def build(fd):
        fd.add_output(fd.ops.set(define_input(fd, kt, contiguous=False)))

    with Choices(outer=(1,)):
        check(fusion(build), [kt], n_launches=1, scheduler="pointwise", outer=(1,), grid_dims=())
