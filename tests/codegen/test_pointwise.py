"""Pointwise scheduler: generated kernels against the reference executor.

Shapes include 1, odd extents and a 30522-wide (vocabulary) row; inputs are random,
never zero, and outputs are poisoned before the launch (conftest), so an element
that is not written, or read from the wrong address, fails.
"""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import Choices

from .common import BF16_CHAIN, DataType, check, define_input, from_torch, fusion, gen_for, make_tensor

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
SHAPES_1D = [(1,), (7,), (129,), (1001,)]
SHAPES_2D = [(1, 7), (7, 1), (3, 129), (13, 77), (2, 30522)]


# The interpreter's default block holds a whole small tensor in one program; 64
# elements per program exercises several programs and a partial last block.
BLOCKS = pytest.mark.parametrize("block", [None, 64], ids=["default_block", "block64"])


def _blocked(block):
    return Choices(block=block) if block else Choices()


def _chain_tol(dtype):
    """Ops computed in bf16 round every intermediate (see common.BF16_CHAIN)."""
    return BF16_CHAIN if dtype == torch.bfloat16 else None


def _id(x):
    return str(x).replace("torch.", "")


def _mix(fd, x, y, z):
    """Unary, binary and ternary ops with constants, computed in fp32 for half inputs."""
    a = fd.ops.mul(fd.ops.add(x, y), fd.define_scalar(0.5))
    b = fd.ops.sub(fd.ops.exp(fd.ops.neg(fd.ops.abs(y))), fd.ops.tanh(x))
    c = fd.ops.where(fd.ops.gt(x, z), a, b)
    d = fd.ops.div(fd.ops.sqrt(fd.ops.abs(c)), fd.ops.add(fd.ops.abs(z), fd.define_scalar(1.0)))
    return fd.ops.lerp(d, fd.ops.maximum(x, y), fd.define_scalar(0.25))


def _mix_eager(x, y, z):
    a = (x + y) * 0.5
    b = torch.exp(-y.abs()) - torch.tanh(x)
    c = torch.where(x > z, a, b)
    d = torch.sqrt(c.abs()) / (z.abs() + 1.0)
    return torch.lerp(d, torch.maximum(x, y), 0.25)


@BLOCKS
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("shape", SHAPES_1D + SHAPES_2D, ids=_id)
def test_elementwise_mix(shape, dtype, block):
    gen = gen_for("mix", shape, str(dtype))
    xs = [make_tensor(shape, dtype, gen) for _ in range(3)]

    def build(fd):
        # Half inputs are cast to fp32 first, as autocast traces do: the reference
        # executor rounds after every op on half tensors, the kernels round once.
        ts = [fd.ops.cast(define_input(fd, x), dtype=DataType.Float) for x in xs]
        fd.add_output(fd.ops.cast(_mix(fd, *ts), dtype=from_torch(dtype)))

    fd = fusion(build)
    with _blocked(block):
        (got,) = check(fd, xs, n_launches=1, what=f"mix {shape}")
    # The reference is the spec, but make sure it is the computation meant here.
    assert torch.allclose(got.float(), _mix_eager(*(x.float() for x in xs)).to(dtype).float(), rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.float16), (torch.float16, torch.float32),
                                     (torch.bfloat16, torch.float16), (torch.float32, torch.bfloat16),
                                     (torch.float32, torch.int32), (torch.int64, torch.float32),
                                     (torch.int32, torch.int64), (torch.float16, torch.bool),
                                     (torch.bool, torch.float32), (torch.float32, torch.float64)],
                         ids=_id)
def test_casts(src, dst):
    gen = gen_for("cast", str(src), str(dst))
    x = make_tensor((5, 129), src, gen)
    if src.is_floating_point:
        x = x * 7.3  # casts to int truncate magnitudes up to ~29

    def build(fd):
        t = define_input(fd, x)
        fd.add_output(fd.ops.cast(t, dtype=from_torch(dst)))
        # a cast feeding arithmetic: fp16 -> fp32 -> fp16 round trip after a multiply
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.cast(t, dtype=DataType.Float), fd.define_scalar(3.0)),
                                  dtype=from_torch(dst)))

    check(fusion(build), [x], n_launches=1, what=f"cast {src}->{dst}")


@BLOCKS
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("M,N", [(1, 1), (7, 1), (1, 7), (13, 129), (3, 1001)], ids=str)
def test_broadcast_bias_and_expand(M, N, dtype, block):
    """[M, N] + [N] bias (broadcast_in_dim) * [M, 1] scale (expand)."""
    gen = gen_for("bcast", M, N, str(dtype))
    x = make_tensor((M, N), dtype, gen)
    bias = make_tensor((N,), dtype, gen)
    scale = make_tensor((M, 1), torch.float32, gen)

    def build(fd):
        tx, tb, ts = define_input(fd, x), define_input(fd, bias), define_input(fd, scale)
        b2 = fd.ops.broadcast_in_dim(tb, shape=[M, N], broadcast_dims=[1])
        s2 = fd.ops.expand(ts, shape=[M, N])
        y = fd.ops.mul(fd.ops.add(tx, b2), s2)
        fd.add_output(y)
        fd.add_output(fd.ops.cast(y, dtype=from_torch(dtype)))

    with _blocked(block):
        check(fusion(build), [x, bias, scale], n_launches=1, tol=_chain_tol(dtype), what=f"bias {M}x{N}")


@BLOCKS
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("shape,dims", [((7, 129), [1, 0]), ((3, 5, 7), [2, 0, 1]), ((2, 3, 5, 7), [0, 2, 3, 1]),
                                        ((1, 9, 1), [2, 1, 0])], ids=str)
def test_permute(shape, dims, dtype, block):
    gen = gen_for("permute", shape, str(dtype))
    x = make_tensor(shape, dtype, gen)
    y = make_tensor([shape[d] for d in dims], dtype, gen)

    def build(fd):
        tx, ty = define_input(fd, x), define_input(fd, y)
        p = fd.ops.permute(tx, dims=dims)
        fd.add_output(fd.ops.add(fd.ops.sin(p), ty))
        fd.add_output(fd.ops.mul(ty, fd.define_scalar(2.0)))

    with _blocked(block):
        check(fusion(build), [x, y], n_launches=1, tol=_chain_tol(dtype), what=f"permute {shape} {dims}")


@BLOCKS
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("M,N", [(1, 7), (7, 129), (3, 1001)], ids=str)
def test_outputs_of_different_shapes(M, N, dtype, block):
    """One kernel writes the [M, N] result and the [N] and [M, 1] tensors it met on the way."""
    gen = gen_for("multi", M, N, str(dtype))
    x = make_tensor((M, N), dtype, gen)
    b = make_tensor((N,), dtype, gen)
    m = make_tensor((M, 1), dtype, gen, high=1.0)

    def build(fd):
        tx, tb, tm = define_input(fd, x), define_input(fd, b), define_input(fd, m)
        b2 = fd.ops.mul(tb, fd.define_scalar(-0.75))  # [N], written once per element
        m2 = fd.ops.exp(tm)  # [M, 1]
        y = fd.ops.add(fd.ops.mul(tx, fd.ops.broadcast_in_dim(b2, shape=[M, N], broadcast_dims=[1])), m2)
        fd.add_output(y)
        fd.add_output(b2)
        fd.add_output(m2)
        fd.add_output(fd.ops.cast(y, dtype=DataType.Half))

    with _blocked(block):
        check(fusion(build), [x, b, m], n_launches=1, tol=_chain_tol(dtype), what=f"multi {M}x{N}")


@BLOCKS
@pytest.mark.parametrize("op", ["pad", "cat"])
def test_outputs_below_a_pad_or_cat_are_written_inside_their_extents(op, block):
    """A value computed below a pad (or a cat) and also an output is stored only where
    its coordinates are inside it: the padded border (the other cat piece) maps to
    coordinates before its first column, which would overwrite the previous row's end
    and run past the last element."""
    gen = gen_for("pad_out", op)
    x = make_tensor((5, 60), torch.float32, gen)
    z = make_tensor((5, 3), torch.float32, gen)

    def build(fd):
        tx, tz = define_input(fd, x), define_input(fd, z)
        y = fd.ops.mul(tx, fd.define_scalar(2.0))
        fd.add_output(y)
        fd.add_output(fd.ops.pad(y, [4, 0, 0, 2]) if op == "pad" else fd.ops.cat([tz, y], dim=1))

    with _blocked(block):
        check(fusion(build), [x, z], n_launches=1, what=f"{op} output")


@pytest.mark.parametrize("params, kernels", [({}, 1), ({"persistent": False, "block_j": 4}, 2)],
                         ids=["one_block", "multipass"])
def test_an_output_wider_than_the_walk_gets_a_kernel_that_covers_it(params, kernels):
    """A padded tensor that is an output while the kernel walks a slice of it (here the
    reference is the row sum's input): the walk reaches only the slice's window of
    the padded tensor, so it cannot be stored from there.  A one-block row tile
    computes it over rows of its own (``emit._store_own_rows``: 5 rows where the tile
    has 3); otherwise the plan stores it from a kernel of its own.  Every element, pad
    value included, is written."""
    x = make_tensor((3, 5), torch.float32, gen_for("window"))

    def build(fd):
        tx = define_input(fd, x)
        wide = fd.ops.pad(tx, [0, 0, 0, 2], fd.define_scalar(0.5))
        fd.add_output(fd.ops.sum(tx, dims=[1], keepdim=True))
        fd.add_output(fd.ops.slice(wide, start_indices=[1, 0], end_indices=[4, 5]))
        fd.add_output(wide)

    with Choices(**params):
        check(fusion(build), [x], what="window", n_launches=kernels)


# --- strided inputs ---------------------------------------------------------------


def _strided(kind, dtype, gen):
    base = make_tensor((33, 130), dtype, gen)
    if kind == "transposed":
        return base.t()  # [130, 33], strides (1, 130)
    if kind == "sliced":
        return base[1:-2, 3:120]  # rows padded: strides (130, 1), offset storage
    if kind == "stepped":
        return base[::2, ::3]
    if kind == "expanded":
        return make_tensor((1, 130), dtype, gen).expand(33, 130)
    raise AssertionError(kind)


@BLOCKS
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("kind", ["transposed", "sliced", "stepped", "expanded"])
def test_strided_inputs(kind, dtype, block):
    gen = gen_for("strided", kind, str(dtype))
    x = _strided(kind, dtype, gen)
    y = make_tensor(tuple(x.shape), dtype, gen)
    assert not x.is_contiguous()

    def build(fd):
        tx = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=from_torch(dtype))
        ty = define_input(fd, y)
        fd.add_output(fd.ops.add(fd.ops.mul(tx, fd.define_scalar(1.5)), ty))

    with _blocked(block):
        check(fusion(build), [x, y], n_launches=1, tol=_chain_tol(dtype), what=kind)


@BLOCKS
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
def test_stride_order_input(dtype, block):
    """A channels-last-like input declared with stride_order (dim 1 innermost)."""
    gen = gen_for("stride_order", str(dtype))
    x = make_tensor((3, 5, 7, 11), dtype, gen).permute(0, 3, 1, 2)  # [3, 11, 5, 7], dim 1 innermost
    y = make_tensor(tuple(x.shape), dtype, gen)

    def build(fd):
        tx = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True, True, True, True], dtype=from_torch(dtype),
                              stride_order=[3, 0, 2, 1])
        ty = define_input(fd, y)
        fd.add_output(fd.ops.sub(fd.ops.relu(tx), ty))
        fd.add_output(fd.ops.permute(fd.ops.neg(tx), dims=[0, 2, 3, 1]))

    # The permuted output is not reached from the first one's coordinates, so the
    # segmenter gives it a second kernel: only the values are checked here.
    with _blocked(block):
        check(fusion(build), [x, y], tol=_chain_tol(dtype), what="stride_order")


# --- reshape at the top of the fusion ------------------------------------------


@BLOCKS
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("shape,new", [((6, 35), [2, 3, 5, 7]), ((2, 3, 5, 7), [6, -1]), ((1001,), [7, 11, 13]),
                                       ((4, 129), [516])], ids=str)
def test_reshape_first(shape, new, dtype, block):
    gen = gen_for("reshape", shape, str(dtype))
    x = make_tensor(shape, dtype, gen)
    resolved = list(torch.empty(shape).reshape(new).shape)
    bias = make_tensor((resolved[-1],), dtype, gen)

    def build(fd):
        tx, tb = define_input(fd, x), define_input(fd, bias)
        r = fd.ops.reshape(tx, new_shape=new)
        b = fd.ops.broadcast_in_dim(tb, shape=resolved, broadcast_dims=[len(resolved) - 1])
        fd.add_output(fd.ops.add(fd.ops.cast(r, dtype=DataType.Float), b))

    with _blocked(block):
        check(fusion(build), [x, bias], n_launches=1, what=f"reshape {shape}->{new}")


def test_reshape_of_strided_input():
    """A reshape of a non-contiguous input cannot be pure re-indexing of a flat index;
    the coordinates must go through the strides."""
    gen = gen_for("reshape_strided")
    x = make_tensor((35, 6), torch.float32, gen).t()  # [6, 35] transposed storage

    def build(fd):
        tx = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.reshape(tx, new_shape=[2, 3, 5, 7]), fd.define_scalar(2.0)))

    check(fusion(build), [x], what="reshape strided")


@pytest.mark.parametrize("block", [64, 1024])
def test_even_blocks_drop_the_mask_and_uneven_ones_keep_it(block):
    """EVEN (blocks tile the tensor exactly) is computed per launch: the same cached
    kernel runs a shape that divides and one that does not, and both are right."""
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.mul(fd.ops.tanh(x), 3.0))

    fd = fusion(build)
    with _blocked(block):
        for shape in [(64, 16), (63, 16), (128, 8)]:
            x = make_tensor(shape, torch.float32, gen_for("pointwise", "even", shape))
            check(fd, [x], n_launches=1)
