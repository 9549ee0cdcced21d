"""Kernel paths the scheduler tests do not reach by themselves: layout and creation
ops inside kernels, 64-bit indexing (forced), reductions of re-indexed or expanded
tensors, three dependent reduction levels, empty reduced extents, every cast."""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import Choices

from .common import DataType, check, define_input, from_torch, fusion, gen_for, make_tensor, sources_of

MULTIPASS = {"persistent": False, "block_j": 8}
PEELED = {"persistent": False, "block_j": 8, "block_k": 1, "align": 4}


def _x(shape=(33, 20), dtype=torch.float32, name="x"):
    return make_tensor(shape, dtype, gen_for("misc", name, shape, str(dtype)))


@pytest.mark.parametrize("params", [{}, {"block": 16}, {"block": 64, "int64": True}], ids=str)
def test_slice_pad_cat(params):
    x = _x()

    def build(fd):
        t = define_input(fd, x)
        s = fd.ops.slice(t, [1, 2], [30, 19], [2, 1])  # [15, 17], stepped rows
        p = fd.ops.pad(s, [1, 2, 0, 3], 0.5)  # [18, 20]
        c = fd.ops.cat([p, fd.ops.neg(p)], dim=1)  # [18, 40]
        fd.add_output(fd.ops.mul(c, fd.define_scalar(2.0)))

    with Choices(**params):
        check(fusion(build), [x], n_launches=1)


@pytest.mark.parametrize("params", [{}, {"block": 64, "int64": True}], ids=str)
def test_iota_full_squeeze_and_0dim(params):
    x = _x()
    y = _x((5, 1, 20), name="y")
    s0 = torch.tensor(1.25)

    def build(fd):
        t, u, z = define_input(fd, x), define_input(fd, y), fd.define_tensor(shape=[], contiguity=[])
        i = fd.ops.iota(20, 3, 2, dtype=DataType.Int)
        f = fd.ops.full([33, 20], 1.5, DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.mul(t, f), fd.ops.broadcast_in_dim(i, shape=[33, 20], broadcast_dims=[1])))
        fd.add_output(fd.ops.mul(fd.ops.squeeze(u, [1]), fd.ops.exp(z)))

    with Choices(**params):
        check(fusion(build), [x, y, s0])


@pytest.mark.parametrize("params", [{}, {"block": 64, "int64": True}], ids=str)
def test_iota_along_a_size_1_dim(params):
    """An iota whose coordinate is the constant 0 (a size-1 dim), or an offset from it
    (a one-element slice of a longer iota): the constant is converted like a tensor."""
    x = _x((7, 1), name="col")

    def build(fd):
        t = define_input(fd, x)
        one = fd.ops.iota(fd.ops.size(t, 1), 2, 3, dtype=DataType.Int)
        fourth = fd.ops.slice(fd.ops.iota(5, 0.5, 1.0, dtype=DataType.Float), [3], [4])
        for i in (one, fourth):
            fd.add_output(fd.ops.add(t, fd.ops.broadcast_in_dim(i, shape=[7, 1], broadcast_dims=[1])))
        fd.add_output(fd.ops.iota(1, 4, 1, dtype=DataType.Int32))

    with Choices(**params):
        got = check(fusion(build), [x])
    assert got[0].eq(x + 2).all() and got[1].eq(x + 3.5).all() and got[2].tolist() == [4]


@pytest.mark.parametrize("params", [{}, MULTIPASS, PEELED, {"int64": True}, {**MULTIPASS, "int64": True},
                                    {**PEELED, "int64": True}], ids=str)
def test_three_dependent_reduction_levels(params):
    """max -> sum(exp(x - max)) -> var_mean of the softmax: one pass per level."""
    x = _x()

    def build(fd):
        t = define_input(fd, x)
        d = fd.ops.sub(t, fd.ops.max(t, dims=[1], keepdim=True))
        y = fd.ops.div(fd.ops.exp(d), fd.ops.sum(fd.ops.exp(d), dims=[1], keepdim=True))
        v, mu = fd.ops.var_mean(y, dims=[1], keepdim=True)
        fd.add_output(fd.ops.sub(y, mu))
        fd.add_output(v)

    with Choices(**params):
        check(fusion(build), [x], n_launches=1, scheduler="inner_normalization")


@pytest.mark.parametrize("params", [{}, {"persistent": False, "block_j": 4}], ids=str)
def test_keepdim_and_dropped_results_together(params):
    x = _x((3, 4, 9))

    def build(fd):
        t = define_input(fd, x)
        s2 = fd.ops.sum(t, dims=[2], keepdim=True)
        fd.add_output(fd.ops.sum(t, dims=[2], keepdim=False))
        fd.add_output(s2)
        fd.add_output(fd.ops.sub(t, s2))

    with Choices(**params):
        check(fusion(build), [x], n_launches=1, tol=(1e-5, 1e-4))


@pytest.mark.parametrize("params", [{}, {"persistent": False, "block_j": 16}], ids=str)
def test_reductions_of_permuted_and_reshaped_inputs(params):
    x = _x()

    def build(fd):
        t = define_input(fd, x)
        r = fd.ops.reshape(t, [11, 3, 20])
        fd.add_output(fd.ops.sub(r, fd.ops.sum(r, dims=[1, 2], keepdim=True)))

    def build_p(fd):
        p = fd.ops.permute(define_input(fd, x), [1, 0])
        fd.add_output(fd.ops.sum(p, dims=[1]))
        fd.add_output(fd.ops.max(p, dims=[1]))

    with Choices(**params):
        check(fusion(build), [x], n_launches=1, tol=(1e-5, 1e-4))
        check(fusion(build_p), [x], n_launches=1, tol=(1e-5, 1e-4))


@pytest.mark.parametrize("params", [{}, {"persistent": False, "block_j": 4}], ids=str)
def test_outer_normalization(params):
    """x - sum(x, 0): full-shape outputs from the outer-reduction tile."""
    x = _x()

    def build(fd):
        t = define_input(fd, x)
        m = fd.ops.sum(t, dims=[0], keepdim=True)
        fd.add_output(fd.ops.sub(t, m))
        fd.add_output(m)

    with Choices(**params):
        check(fusion(build), [x], n_launches=1, tol=(1e-5, 1e-4), scheduler="outer_reduction")


@pytest.mark.parametrize("which", ["row", "column"])
def test_reductions_of_expanded_inputs(which):
    base = _x((1, 9) if which == "row" else (5, 1), name=which)
    x = base.expand(5, 9)  # stride 0 in one dim

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[False, False])
        fd.add_output(fd.ops.sum(t, dims=[1]))
        fd.add_output(fd.ops.sum(t, dims=[0]))

    check(fusion(build), [x], tol=(1e-5, 1e-4))


def test_int32_sums_accumulate_in_int64():
    x = torch.full((3, 5), 2**31 - 5, dtype=torch.int32)
    x[1, 2] = -(2**31)

    def build(fd):
        t = define_input(fd, x)
        fd.add_output(fd.ops.sum(t, dims=[1]))
        fd.add_output(fd.ops.sum(t, dims=[0]))

    a, b = check(fusion(build), [x])
    assert a.dtype == torch.int64 and a[0].item() == 5 * (2**31 - 5)


@pytest.mark.parametrize("params", [{}, {"persistent": False, "block_j": 4}], ids=str)
def test_reduction_over_an_empty_extent(params):
    """[3, 0] -> [3]: sums are 0, products 1, variances NaN, in every row."""
    x = torch.empty(3, 0)

    def build(fd):
        t = define_input(fd, x)
        fd.add_output(fd.ops.sum(t, dims=[1]))
        fd.add_output(fd.ops.prod(t, dims=[1]))
        v, m = fd.ops.var_mean(t, dims=[1])
        fd.add_output(v)

    with Choices(**params):
        s, p, v = check(fusion(build), [x])
    assert torch.equal(s, torch.zeros(3)) and torch.equal(p, torch.ones(3)) and v.isnan().all()

    def build_outer(fd):
        fd.add_output(fd.ops.sum(define_input(fd, torch.empty(0, 5)), dims=[0]))

    with Choices(**params):
        (s,) = check(fusion(build_outer), [torch.empty(0, 5)])
    assert torch.equal(s, torch.zeros(5))


CAST_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.bool]


@pytest.mark.parametrize("dst", CAST_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("src", CAST_DTYPES, ids=lambda d: str(d)[6:])
def test_every_cast(src, dst):
    """Exact: a cast rounds once (to nearest even), like torch."""
    if src == dst:
        pytest.skip("no-op")
    gen = gen_for("cast_all", str(src), str(dst))
    x = (torch.randn(3, 257, generator=gen, dtype=torch.float64) * 300)
    if not src.is_floating_point:
        x = x.round()
    x = x.to(src)

    def build(fd):
        fd.add_output(fd.ops.cast(define_input(fd, x), dtype=from_torch(dst)))

    (got,) = fusion(build).execute([x])
    want = x.to(dst)
    assert got.dtype == dst
    if dst == torch.bfloat16:  # the interpreter truncates fp32 -> bf16: one ulp at most
        torch.testing.assert_close(got, want, rtol=2 ** -7, atol=0)
    else:
        assert torch.equal(got, want), f"{src} -> {dst}"


def _scaled_mask_fusion(B, H, S, small_shape, random=False):
    """Scores [B, H, S, S] plus a smaller tensor broadcast into them (the BERT fusion's
    [B, 1, 1, S] scaled mask), minus the row max; the smaller tensor is an output too.
    ``random``: it is scaled by uniform draws of its own shape."""
    def build(fd):
        x = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=DataType.Float)
        m = fd.define_tensor(shape=[-1 if n > 1 else 1 for n in small_shape], contiguity=[True] * 4,
                             dtype=DataType.Float)
        scaled = fd.ops.mul(m, fd.define_scalar(-2.0))
        if random:
            seed, offset = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
            u = fd.ops.uniform(fd.define_scalar(0.0), fd.define_scalar(1.0), shape=list(small_shape),
                               rng_seed=seed, rng_offset=offset)
            scaled = fd.ops.mul(scaled, u)
        y = fd.ops.add(x, fd.ops.broadcast_in_dim(scaled, shape=[B, H, S, S], broadcast_dims=[0, 1, 2, 3]))
        mx = fd.ops.max(y, dims=[3], keepdim=True)
        fd.add_output(fd.ops.sub(y, fd.ops.broadcast_in_dim(mx, shape=[B, H, S, S], broadcast_dims=[0, 1, 2, 3])))
        fd.add_output(scaled)
    return build


@pytest.mark.parametrize("block_k", [1, 2, 8, 64])
@pytest.mark.parametrize("persistent", [True, False], ids=["one_block", "multipass"])
def test_output_broadcast_over_kept_dims_is_stored_once_per_element(block_k, persistent):
    """The BERT fusion's shape: a [B, 1, 1, S] output computed on the [B, H, S, S] row
    tile.  A one-block tile stores it over its own rows (programs 0..B-1, one row
    each); a multi-pass tile where the walk met it, in the programs whose rows hold
    h == 0 and s == 0 (a guard over the program's rows)."""
    B, H, S = 3, 2, 5
    g = gen_for("rows guard", block_k, persistent)
    x, m = make_tensor((B, H, S, S), torch.float32, g), make_tensor((B, 1, 1, S), torch.float32, g)
    ov = dict(block_k=block_k) if persistent else dict(MULTIPASS, block_k=block_k)
    with Choices(**ov):
        check(fusion(_scaled_mask_fusion(B, H, S, (B, 1, 1, S))), [x, m], n_launches=1,
              scheduler="inner_normalization", **ov)


@pytest.mark.parametrize("small", [(3, 1, 5, 5), (1, 2, 1, 5), (1, 1, 1, 5)], ids=["b1ss", "1h1s", "111s"])
@pytest.mark.parametrize("random", [False, True], ids=["plain", "random"])
def test_smaller_outputs_stored_over_their_own_rows(small, random):
    """Other shapes of the smaller output (its rows unravel with size-1 dims between
    kept ones), and random draws, which belong to the output's own element index."""
    B, H, S = 3, 2, 5
    g = gen_for("own rows", small, random)
    x, m = make_tensor((B, H, S, S), torch.float32, g), make_tensor(small, torch.float32, g)
    with Choices(block_k=4):
        check(fusion(_scaled_mask_fusion(B, H, S, small, random)), [x, m] + ([7, 3] if random else []),
              n_launches=1, scheduler="inner_normalization", block_k=4, persistent=True)


def test_smaller_output_source_is_a_loop_over_its_own_rows():
    """The one-block tile's kernel text: a loop over the small output's rows, and no
    reduction over the program's rows to decide whether it stores (the multi-pass
    tile keeps that guard)."""
    B, H, S = 3, 2, 5
    g = gen_for("own rows src")
    x, m = make_tensor((B, H, S, S), torch.float32, g), make_tensor((B, 1, 1, S), torch.float32, g)
    seen = []
    for ov in (dict(block_k=4), dict(MULTIPASS, block_k=4)):
        with Choices(**ov):
            fd = fusion(_scaled_mask_fusion(B, H, S, (B, 1, 1, S)))
            check(fd, [x, m], n_launches=1)
        seen += sources_of(fd)
    one_block, multipass = seen
    assert "for k_o in range(pid, T" in one_block and "tl.num_programs(0)):" in one_block
    assert "tl.reduce(tl.where(kmask &" not in one_block
    assert "for k_o in" not in multipass and "tl.reduce(tl.where(kmask &" in multipass


@pytest.mark.parametrize("params", [PEELED, dict(PEELED, align=8, block_j=64)], ids=["align4", "align8"])
def test_peeled_chunks_of_rows_compared_as_integers(params):
    """A cross-entropy gradient's shape: an iota along the row compared with each row's
    target, on peeled chunks of a misaligned fp16 row (what wide rows of it run)."""
    R, V = 5, 1001
    g = gen_for("peeled int compare", str(params))
    x = make_tensor((R, V), torch.float16, g)
    t = torch.randint(0, V, (R, 1), generator=g)
    t[2] = -100  # an ignored row

    def build(fd):
        tx = define_input(fd, x)
        tt = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Int)
        iota = fd.ops.broadcast_in_dim(fd.ops.iota(V, 0, 1, dtype=DataType.Int), shape=[1, V], broadcast_dims=[1])
        hit = fd.ops.bitwise_and(fd.ops.eq(iota, tt), fd.ops.ne(tt, -100))
        w = fd.ops.where(hit, -0.25, 0.0)
        e = fd.ops.exp(fd.ops.cast(tx, DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.sub(w, fd.ops.mul(e, fd.ops.sum(w, dims=[1], keepdim=True))),
                                  DataType.Half))

    with Choices(**params):
        check(fusion(build), [x, t], n_launches=1, **{k: v for k, v in params.items() if k != "block_j"})


def test_a_row_narrower_than_its_block_has_a_constant_length():
    """``reduction.constant_row_length``: a log-softmax row of 257 in a block of 512
    lanes passes its length as a compile-time constant; the same fusion at another
    length that fits the same block (300) takes a kernel with the length at run time
    (``schedulers.reduction_schedulers.CONSTANT_ROW_LENGTHS``), and 257 again its constant kernel; each
    matches the reference."""
    fd = fusion(lambda fd: _log_softmax(fd))
    for width in (257, 300, 257):
        x = make_tensor((6, width), torch.float16, gen_for("constant row", width))
        check(fd, [x], n_launches=1, scheduler="inner_normalization", persistent=True)
    srcs = sources_of(fd)
    assert len(srcs) == 2
    assert ["\n    J: tl.constexpr," in s for s in srcs] == [True, False]


def _log_softmax(fd):
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
    xf = fd.ops.cast(x, DataType.Float)
    d = fd.ops.sub(xf, fd.ops.broadcast_in_dim(fd.ops.max(xf, dims=[1]), shape=[-1, -1], broadcast_dims=[0]))
    fd.add_output(fd.ops.cast(fd.ops.sub(d, fd.ops.broadcast_in_dim(
        fd.ops.log(fd.ops.sum(fd.ops.exp(d), dims=[1])), shape=[-1, -1], broadcast_dims=[0])), DataType.Half))
