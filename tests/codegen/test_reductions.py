"""Inner and outer reduction schedulers against the reference executor, in their
persistent and multi-pass variants (forced with ``schedulers.Choices``)."""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import Choices

from .common import DataType, assert_matches, check, define_input, fusion, gen_for, make_tensor

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
ROW_SHAPES = [(1, 7), (7, 1), (13, 129), (3, 1001), (2, 30522)]
# persistent: one block holds the reduced extent; multi-pass: chunks of 16 (an odd
# number of chunks for the shapes above, and a partial last chunk).
# few_rows: 2 rows per program, so several programs and a partial last one.
VARIANTS = {"default": {}, "persistent": {"persistent": True}, "multipass": {"persistent": False, "block_j": 16},
            "few_rows": {"persistent": True, "block_k": 2}}


def variant_params(variant, J):
    """Multi-pass over a 30522-wide row in chunks of 1024 (30 chunks, the last one
    partial): chunks of 16 would take the interpreter minutes."""
    v = dict(VARIANTS[variant])
    if v.get("block_j") and J > 4096:
        v["block_j"] = 1024
    return v


def _id(x):
    return str(x).replace("torch.", "")


def _forced(params):
    return {"persistent": params["persistent"]} if "persistent" in params else {}


def _sum_tol(x: torch.Tensor, dims, out_dtype):
    """Results are rounded once to the output dtype (rtol: two of its ulps); the fp32
    accumulation, reassociated, adds an absolute error that grows with sum(|x|)."""
    rtol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[out_dtype]
    mag = x.double().abs().sum(dims).max().item() if x.numel() else 0.0
    return rtol, max(mag * 2e-6, 1e-6)


def plant_extremes(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Put each row's max and min (along ``dim``) at the start or end of the row's
    aligned body (past a peeled head or tail of up to 7 elements), in the middle, or
    at the row's very ends, so a kernel that skips a chunk cannot pass by luck."""
    x = x.clone()
    J = x.shape[dim]
    if J < 2 or not x.dtype.is_floating_point:
        return x
    v = x.movedim(dim, -1)
    places = [(8, J // 2 + 1), (J - 9, 9), (J // 2, J - 10), (0, J - 1), (J - 1, 0), (1, J - 2)]
    for r in range(v.shape[0]):
        hi, lo = (min(max(p, 0), J - 1) for p in places[r % len(places)])
        if hi == lo:
            lo = (hi + 1) % J
        v[r, hi] = 9.5 + 0.0625 * (r % 8)
        v[r, lo] = -9.5 - 0.0625 * (r % 8)
    return x


def _tol(op, x, dims, out_dtype):
    rtol, atol = _sum_tol(x, dims, out_dtype)
    if op == "var_mean":  # a mean: the sum's error over the count
        n = 1
        for d in dims:
            n *= x.shape[d]
        atol = max(atol / max(n, 1), 1e-6)
    return rtol, atol


def _reduce(fd, op, t, dims, keepdim):
    if op == "var_mean":
        var, mean = fd.ops.var_mean(t, dims=dims, correction=1, keepdim=keepdim)
        fd.add_output(var)
        fd.add_output(mean)
        return
    fd.add_output(getattr(fd.ops, op)(t, dims=dims, keepdim=keepdim))


def _input(op, shape, dtype, gen, dim=None):
    if op == "prod":  # stays finite over 30522 elements
        return make_tensor(shape, dtype, gen, low=0.995, high=1.005)
    x = make_tensor(shape, dtype, gen)
    return plant_extremes(x, dim) if dim is not None and len(shape) == 2 else x


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod", "var_mean"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_id)
def test_inner_reduction(shape, op, dtype, variant):
    if variant == "few_rows" and shape[-1] == 30522:
        pytest.skip("one row per program already")
    if op == "prod" and shape[-1] == 30522 and (variant, dtype) != ("default", torch.float32):
        pytest.skip("tl.reduce with a user combine is slow in the interpreter; one wide prod is enough")
    gen = gen_for("inner", shape, op, str(dtype), variant)
    x = _input(op, shape, dtype, gen, dim=1)

    def build(fd):
        _reduce(fd, op, define_input(fd, x), [1], keepdim=False)

    forced = variant_params(variant, shape[-1])
    fd = fusion(build)
    if op == "prod" and dtype != torch.float32:
        # torch's CPU prod of fp16/bf16 (so the reference executor's) multiplies in
        # half precision: 1% off over 129 elements.  The kernels, like torch on CUDA,
        # accumulate in fp32: compare with the fp64 product rounded once.
        with Choices(**forced):
            (got,) = fd.execute([x])
        assert_matches(got, x.double().prod(1).to(dtype), what=f"prod {shape}", tol=_sum_tol(x, [1], dtype))
        return
    if op == "sum" and shape[-1] == 1:  # held as the squeeze it is (frontend ops.sum): no kernel
        check(fd, [x], n_launches=0, what=f"{op} {shape}")
        return
    with Choices(**forced):
        check(fd, [x], n_launches=1, tol=_tol(op, x, [1], dtype), what=f"{op} {shape}",
              scheduler="inner_reduction" if shape[-1] > 1 else None, **_forced(forced))


@pytest.mark.parametrize("variant", ["persistent", "multipass"])
@pytest.mark.parametrize("op", ["sum", "max", "var_mean", "prod"])
@pytest.mark.parametrize("shape,dims,keepdim", [
    ((3, 5, 7), [1, 2], False),
    ((3, 5, 7), [1, 2], True),
    ((5, 7, 9), [0, 2], False),  # the kept dim sits between two reduced ones
    ((5, 7, 9), [0, 2], True),
    ((6, 35), [0, 1], False),  # everything: a 0-dim result
    ((2, 1, 9, 1), [2, 3], True),
], ids=str)
def test_inner_reduction_dims(shape, dims, keepdim, op, variant):
    gen = gen_for("inner_dims", shape, dims, keepdim, op, variant)
    x = _input(op, shape, torch.float32, gen)

    def build(fd):
        _reduce(fd, op, define_input(fd, x), dims, keepdim)

    with Choices(**VARIANTS[variant]):
        check(fusion(build), [x], n_launches=1, tol=_tol(op, x, dims, torch.float32), what=f"{op} {shape} {dims}",
              **_forced(VARIANTS[variant]))


@pytest.mark.parametrize("variant", ["persistent", "multipass"])
def test_reduction_of_computed_values(variant):
    """The reduced tensor is computed in the kernel (cast + mul + exp), fp16 in and out,
    with a sum whose dtype is given."""
    gen = gen_for("computed", variant)
    x = make_tensor((9, 1001), torch.float16, gen, high=2.0)
    w = make_tensor((1001,), torch.float32, gen)

    def build(fd):
        tx, tw = define_input(fd, x), define_input(fd, w)
        y = fd.ops.mul(fd.ops.exp(fd.ops.cast(tx, dtype=DataType.Float)),
                       fd.ops.broadcast_in_dim(tw, shape=[9, 1001], broadcast_dims=[1]))
        fd.add_output(fd.ops.sum(y, dims=[1], keepdim=True, dtype=DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.max(y, dims=[1]), dtype=DataType.Half))

    with Choices(**VARIANTS[variant]):
        check(fusion(build), [x, w], n_launches=1, tol=(1e-5, 1e-3), what="computed")


def test_reduction_of_strided_input():
    gen = gen_for("strided_red")
    x = make_tensor((129, 13), torch.float32, gen).t()  # [13, 129], rows strided by 1, elements by 13

    def build(fd):
        tx = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(tx, dims=[1]))
        fd.add_output(fd.ops.max(tx, dims=[1]))

    for variant in ("persistent", "multipass"):
        with Choices(**VARIANTS[variant]):
            check(fusion(build), [x], n_launches=1, tol=_sum_tol(x, [1], torch.float32), what=variant)


def test_max_min_propagate_nan():
    """max/min of a row holding NaN is NaN (torch.amax); inf and -inf stay themselves."""
    gen = gen_for("nan_rows")
    x = make_tensor((4, 37), torch.float32, gen)
    x[0, 5] = float("nan")
    x[1, 36] = float("inf")
    x[2, 0] = float("-inf")
    x[3, 20] = float("nan")
    x[3, 21] = float("inf")

    def build(fd):
        tx = define_input(fd, x)
        fd.add_output(fd.ops.max(tx, dims=[1]))
        fd.add_output(fd.ops.min(tx, dims=[1]))

    for variant in VARIANTS.values():
        with Choices(**variant):
            mx, mn = check(fusion(build), [x], n_launches=1)
            assert torch.isnan(mx[0]) and torch.isnan(mn[0]) and torch.isnan(mx[3]) and torch.isnan(mn[3])
            assert mx[1] == float("inf") and mn[2] == float("-inf")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool], ids=_id)
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_integer_reductions(op, dtype):
    gen = gen_for("int_red", op, str(dtype))
    x = make_tensor((5, 13), dtype, gen)
    if op == "prod" and dtype != torch.bool:
        x = torch.where(x.abs() > 2, torch.ones_like(x), x)  # stays within int32

    def build(fd):
        fd.add_output(getattr(fd.ops, op)(define_input(fd, x), dims=[1]))

    for variant in ("persistent", "multipass"):
        with Choices(**VARIANTS[variant]):
            check(fusion(build), [x], n_launches=1, what=f"{op} {dtype} {variant}")


# --- outer reductions --------------------------------------------------------------

OUTER = {"default": {}, "persistent": {"persistent": True, "block_j": 1024},
         "multipass": {"persistent": False, "block_j": 4, "block_k": 8},
         "few_columns": {"persistent": True, "block_j": 1024, "block_k": 2}}


@pytest.mark.parametrize("variant", list(OUTER))
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("op", ["sum", "max", "var_mean"])
@pytest.mark.parametrize("shape", [(7, 1), (1, 7), (129, 13), (33, 129), (3, 1001)], ids=_id)
def test_outer_reduction(shape, op, dtype, variant):
    """Sum over dim 0 of [N, H] (the bias gradient)."""
    gen = gen_for("outer", shape, op, str(dtype), variant)
    x = _input(op, shape, dtype, gen, dim=0)

    def build(fd):
        _reduce(fd, op, define_input(fd, x), [0], keepdim=False)

    if op == "sum" and shape[0] == 1:  # held as the squeeze it is (frontend ops.sum): no kernel
        check(fusion(build), [x], n_launches=0, what=f"{op} {shape}")
        return
    with Choices(**OUTER[variant]):
        check(fusion(build), [x], n_launches=1, tol=_tol(op, x, [0], dtype), what=f"{op} {shape}",
              scheduler="outer_reduction" if shape[0] > 1 and shape[1] > 1 else None, **_forced(OUTER[variant]))


@pytest.mark.parametrize("variant", ["persistent", "multipass"])
@pytest.mark.parametrize("shape,dims,keepdim", [((5, 7, 9), [0, 1], False), ((5, 7, 9), [0, 1], True),
                                                ((5, 7, 9), [1], False), ((4, 1, 33), [0], True)], ids=str)
def test_outer_reduction_dims(shape, dims, keepdim, variant):
    gen = gen_for("outer_dims", shape, dims, keepdim, variant)
    x = make_tensor(shape, torch.float32, gen)

    def build(fd):
        tx = define_input(fd, x)
        fd.add_output(fd.ops.sum(fd.ops.mul(tx, tx), dims=dims, keepdim=keepdim))
        fd.add_output(fd.ops.min(tx, dims=dims, keepdim=keepdim))

    with Choices(**OUTER[variant]):
        check(fusion(build), [x], n_launches=1, tol=_sum_tol(x * x, dims, torch.float32), what=f"{shape} {dims}",
              **_forced(OUTER[variant]))


def test_outer_bias_grad_fp16():
    """Cast fp16 [N, H] to fp32, sum over N, cast back: the usual bias gradient."""
    gen = gen_for("bias_grad")
    g = make_tensor((257, 24), torch.float16, gen)

    def build(fd):
        t = fd.ops.cast(define_input(fd, g), dtype=DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.sum(t, dims=[0]), dtype=DataType.Half))

    for variant in OUTER.values():
        with Choices(**variant):
            check(fusion(build), [g], n_launches=1, tol=_sum_tol(g, [0], torch.float16))


@pytest.mark.parametrize("flush", [1, 3])
@pytest.mark.parametrize("offset", [0, 1])  # 1: rows start misaligned, peeled (head, body, tail)
def test_flushed_sums_in_chunked_rows(flush, offset):
    """Chunked rows whose float sums fold into the row every ``flush`` chunks
    (``InnerChunked.flush``) beside a max, a var_mean and an output of the row: the
    same values as eager, whatever the chunk count (4 and 13 chunks here)."""
    from pyfuser import FusionDefinition

    base = torch.randn(6, 209, generator=torch.Generator().manual_seed(5))
    x = base[:, offset:offset + 200] if offset else base[:, :200].contiguous()
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        s = fd.ops.sum(t, dims=[1])
        var, mean = fd.ops.var_mean(t, dims=[1], correction=0)
        fd.add_output(s)
        fd.add_output(fd.ops.max(t, dims=[1]))
        fd.add_output(var)
        fd.add_output(fd.ops.sub(t, fd.ops.broadcast_in_dim(s, shape=t.shape(), broadcast_dims=[0])))
    for block_j in (16, 64):
        peel = dict(block_k=1, align=4) if offset else {}
        with Choices(persistent=False, block_j=block_j, flush=flush, **peel):
            outs = fd.execute([x])
        want = [x.sum(1), x.amax(1), x.var(1, correction=0), x - x.sum(1, keepdim=True)]
        for got, ref in zip(outs, want):
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
