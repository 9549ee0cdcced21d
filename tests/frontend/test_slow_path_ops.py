"""nvFuser's ops beyond elementwise ones: welford (a generated kernel) and the slow
path's host ops (scans, sorts, scatter, complex numbers, attention, grouped matmuls),
each against torch eager and the reference executor on random inputs, with the
printer's round trip."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import DefinitionError, EagerFallbackWarning, InputError
from pyfuser.ir.dtypes import from_torch
from pyfuser.segment import planner

from ..helpers import assert_all_match, gen_for, make_tensor
from .test_printer import assert_round_trip


def _tensor(fd, x):
    return fd.define_tensor(shape=[-1] * x.dim(), contiguity=[True] * x.dim(), dtype=from_torch(x.dtype))


def _check(build, inputs, want, tol=None):
    """Execute against eager's ``want`` and the reference; then the printer's round trip."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EagerFallbackWarning)
        with FusionDefinition() as fd:
            build(fd, *[_tensor(fd, x) if isinstance(x, torch.Tensor) else x for x in inputs])
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        got = fd.execute(tensors)
        _match(got, want, tol)
        _match(got, fd.reference(tensors), tol)
        assert_round_trip(fd, tensors)
    return fd


def _match(got, want, tol):
    """``assert_all_match``, with complex values compared at fp32/fp64 precision."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if w.dtype.is_complex:
            assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype}, torch gives {w.dtype}"
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        else:
            assert_all_match([g], [w], tol=tol)


# -- welford -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("dims", [[1], [0], [0, 1]])
def test_welford_runs_in_a_kernel(dtype, dims):
    x = make_tensor((5, 33), dtype, gen_for("welford", dtype, dims))

    def build(fd, t):
        for o in fd.ops.welford(t, dims):
            fd.add_output(o)

    var, mean = torch.var_mean(x, dims, correction=0)
    n = x.shape[0] ** (0 in dims) * x.shape[1] ** (1 in dims)
    want = [mean, var * n, torch.full(mean.shape, n, dtype=torch.int64)]
    fd = _check(build, [x], want, tol=(4e-3, 4e-3) if dtype == torch.float16 else None)
    assert "host" not in str(fd.explain([x]))


def test_welford_of_long_rows():
    """Rows past one block: the multi-pass tile folds chunks with Chan's formula."""
    x = make_tensor((3, 5000), torch.float32, gen_for("welford-long"))
    var, mean = torch.var_mean(x, [1], correction=0)
    want = [mean, var * 5000, torch.full((3,), 5000, dtype=torch.int64)]
    _check(lambda fd, t: [fd.add_output(o) for o in fd.ops.welford(t, [1])], [x], want, tol=(1e-5, 1e-5))


def test_welford_feeds_a_normalization():
    x = make_tensor((4, 40), torch.float32, gen_for("welford-norm"))

    def build(fd, t):
        avg, var_sum, n = fd.ops.welford(t, [1])
        var = fd.ops.div(var_sum, fd.ops.cast(n, DataType.Float))
        rstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
        y = fd.ops.mul(fd.ops.sub(t, fd.ops.broadcast_in_dim(avg, [4, 40], [0])),
                       fd.ops.broadcast_in_dim(rstd, [4, 40], [0]))
        fd.add_output(y)

    _check(build, [x], [F.layer_norm(x, [40])], tol=(1e-5, 1e-5))


# -- scans and sorts -------------------------------------------------------------------------
SCANS = {"cumsum": torch.cumsum, "cumprod": torch.cumprod,
         "cummax": lambda x, d: torch.cummax(x, d).values, "cummin": lambda x, d: torch.cummin(x, d).values}


@pytest.mark.parametrize("op", sorted(SCANS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scans(op, dtype, dim):
    """nvFuser's scans keep the input's dtype (eager's cumsum of int32 gives int64)."""
    x = make_tensor((4, 7), dtype, gen_for(op, dtype, dim), low=0.5, high=1.5)

    def build(fd, t):
        fd.add_output(fd.ops.mul(getattr(fd.ops, op)(fd.ops.neg(t), dim), 2))

    want = SCANS[op](-x, dim).to(dtype) * 2
    _check(build, [x], [want], tol=(2e-2, 2e-2) if dtype == torch.bfloat16 else None)


def test_scan_rejects_a_dim_out_of_range():
    with pytest.raises(DefinitionError, match="cumsum: dim 2 is out of range"):
        with FusionDefinition() as fd:
            fd.ops.cumsum(fd.define_tensor(shape=[4, 4], dtype=DataType.Float), 2)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_argsort(descending, dim):
    x = torch.randperm(48, generator=gen_for("argsort")).reshape(6, 8).float()
    _check(lambda fd, t: fd.add_output(fd.ops.argsort(t, dim, descending, True)), [x],
           [torch.argsort(x, dim=dim, descending=descending, stable=True)])


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k,dim", [(3, 1), (1, 0), (8, 1)])
def test_topk(k, dim, largest):
    x = torch.randperm(40, generator=gen_for("topk", k)).reshape(5, 8).to(torch.float32)
    v, i = torch.topk(x, k, dim, largest, True)

    def build(fd, t):
        for o in fd.ops.topk(t, k, dim, largest, True):
            fd.add_output(o)

    _check(build, [x], [v, i])


def test_topk_with_a_runtime_k():
    x = torch.randperm(40, generator=gen_for("topk-runtime")).reshape(5, 8).to(torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EagerFallbackWarning)
        with FusionDefinition() as fd:
            t = _tensor(fd, x)
            k = fd.define_scalar(dtype=DataType.Int)
            for o in fd.ops.topk(t, k, dim=1, largest=True, sorted=True):
                fd.add_output(o)
        for kv in (2, 5):
            v, i = torch.topk(x, kv, 1, True, True)
            assert_all_match(fd.execute([x, kv]), [v, i])


def test_topk_rejects_k_past_the_extent():
    with pytest.raises(DefinitionError, match=r"topk: k must be in \[0, 4\]"):
        with FusionDefinition() as fd:
            fd.ops.topk(fd.define_tensor(shape=[3, 4], dtype=DataType.Float), 5, 1)


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(dim):
    x = make_tensor((6, 5), torch.float32, gen_for("scatter", dim))
    src = make_tensor((6, 5), torch.float32, gen_for("scatter-src", dim))
    index = torch.rand(6, 5, generator=gen_for("scatter-index", dim)).argsort(dim)
    _check(lambda fd, t, i, s: fd.add_output(fd.ops.scatter(t, i, s, dim)), [x, index, src],
           [torch.scatter(x, dim, index, src)])
    _check(lambda fd, t, i: fd.add_output(fd.ops.scatter(t, i, 2.5, dim)), [x, index],
           [torch.scatter(x, dim, index, 2.5)])


def test_slow_path_ops_warn_once_per_op():
    x = make_tensor((3, 4), torch.float32, gen_for("warn"))
    planner._WARNED.discard(("host", "cummax"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with FusionDefinition() as fd:
                fd.add_output(fd.ops.cummax(_tensor(fd, x), 1))
            fd.execute([x])
    msgs = [str(w.message) for w in caught if issubclass(w.category, EagerFallbackWarning)]
    assert len(msgs) == 1 and "cummax runs in torch between kernels" in msgs[0], msgs


# -- complex numbers ---------------------------------------------------------------------------
def test_complex_real_imag():
    re, im = (make_tensor((4, 6), torch.float32, gen_for("complex", p)) for p in "ri")

    def build(fd, a, b):
        c = fd.ops.complex(fd.ops.exp(a), b)
        d = fd.ops.mul(c, c)
        fd.add_output(fd.ops.real(fd.ops.sum(d, [1])))
        fd.add_output(fd.ops.imag(d))
        fd.add_output(fd.ops.abs(d))
        fd.add_output(d)

    c = torch.complex(re.exp(), im)
    d = c * c
    _check(build, [re, im], [d.sum(1).real, d.imag, d.abs(), d])


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_inputs(dtype):
    z = torch.randn(3, 5, dtype=dtype, generator=gen_for("complex-in", dtype))
    w = torch.randn(3, 5, dtype=dtype, generator=gen_for("complex-in-2", dtype))

    def build(fd, a, b):
        fd.add_output(fd.ops.add(fd.ops.mul(a, b), 1.0))
        fd.add_output(fd.ops.sum(a, [0]))
        fd.add_output(fd.ops.real(b))

    fd = _check(build, [z, w], [z * w + 1.0, z.sum(0), w.real.clone()])
    assert f"dtype=DataType.{from_torch(dtype).value}" in repr(fd)


def test_complex_rejects_mixed_parts():
    with pytest.raises(TypeError, match="complex: real and imag must both be Float or both Double"):
        with FusionDefinition() as fd:
            fd.ops.complex(fd.define_tensor(shape=[2], dtype=DataType.Float),
                           fd.define_tensor(shape=[2], dtype=DataType.Double))


# -- attention and matmuls ---------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_sdpfa_forward_and_backward(causal):
    g = gen_for("sdpa", causal)
    q, k, v = (torch.randn(shape, generator=g) for shape in ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)))
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=0.3)
    grad = torch.randn(out.shape, generator=g)
    out.backward(grad)
    s = (q @ k.transpose(-1, -2)) * 0.3
    if causal:
        s = s.masked_fill(~torch.ones(5, 7, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)

    def build(fd, Q, K, V, G):
        o, l, seed, offset = fd.ops.sdpfa_fwd(Q, K, V, dropout_p=0.0, is_causal=causal, scale=0.3)
        gq, gk, gv = fd.ops.sdpfa_bwd(G, Q, K, V, o, l, 0.0, causal, seed, offset, 0.3)
        for t in (o, l, gq, gk, gv):
            fd.add_output(t)

    _check(build, [q, k, v, grad], [out.detach(), lse, qs.grad, ks.grad, vs.grad], tol=(1e-4, 1e-5))


def test_sdpfa_bias_and_mask():
    g = gen_for("sdpa-bias")
    q, k, v = (torch.randn(1, 2, 4, 8, generator=g) for _ in range(3))
    bias = torch.randn(1, 2, 4, 4, generator=g)
    mask = torch.rand(1, 1, 4, 4, generator=g) > 0.3
    mask[..., 0] = True
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")))

    def build(fd, Q, K, V, B, M):
        fd.add_output(fd.ops.sdpfa_fwd(Q, K, V, bias=B, mask=M)[0])

    _check(build, [q, k, v, bias, mask], [want], tol=(1e-5, 1e-5))


def test_sdpfa_query_row_masked_out_entirely_is_zero():
    """A Bool mask that keeps no key for a query row: that row attends to nothing and is
    0, as eager's scaled_dot_product_attention and nvFuser (ATen's math attention) give,
    not NaN; its logsumexp is -inf."""
    g = gen_for("sdpa-masked-row")
    q, k, v = (torch.randn(1, 2, 4, 8, generator=g) for _ in range(3))
    mask = torch.rand(1, 1, 4, 4, generator=g) > 0.3
    mask[..., 0] = True
    mask[..., 2, :] = False
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(want[..., 2, :], torch.zeros(1, 2, 8))

    def build(fd, Q, K, V, M):
        out, lse, _, _ = fd.ops.sdpfa_fwd(Q, K, V, mask=M)
        fd.add_output(out)
        fd.add_output(lse)

    lse = torch.logsumexp((q @ k.transpose(-1, -2) / 8 ** 0.5).masked_fill(~mask, float("-inf")), -1)
    _check(build, [q, k, v, mask], [want, lse], tol=(1e-5, 1e-5))


def test_grouped_mm_on_the_cpu():
    g = gen_for("grouped")
    a, b = torch.randn(6, 4, generator=g), torch.randn(3, 4, 5, generator=g)
    offsets = torch.tensor([2, 3, 6], dtype=torch.int32)
    want = torch.cat([a[:2] @ b[0], a[2:3] @ b[1], a[3:] @ b[2]])
    _check(lambda fd, x, y, o: fd.add_output(fd.ops.grouped_mm(x, y, o)), [a, b, offsets], [want])


def test_sdpfa_dropout_needs_flash_attention():
    """Dropout runs where ATen's flash attention does (CUDA, fp16/bf16): only it returns
    the random state the backward replays.  On the CPU it is an error naming why."""
    with FusionDefinition() as fd:
        q = fd.define_tensor(shape=[1, 1, 2, 8], dtype=DataType.Float)
        out, lse, seed, offset = fd.ops.sdpfa_fwd(q, q, q, dropout_p=0.1)
        fd.add_output(out)
    assert seed.dtype is DataType.UInt64 and offset.dtype is DataType.UInt64
    with pytest.raises(InputError, match="sdpfa_fwd: dropout_p 0.1 needs flash attention"):
        fd.execute([torch.ones(1, 1, 2, 8)])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sdpfa_is_atens_flash_attention_on_cuda():
    """On CUDA (bf16, head dim 8) forward and backward are ATen's flash attention's, bit
    for bit, dropout included (torch's generator, seeded alike)."""
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v, grad = (torch.randn(2, 3, 16, 8, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    with FusionDefinition() as fd:
        Q, K, V, G = (fd.define_tensor(shape=[-1] * 4, dtype=DataType.BFloat16) for _ in range(4))
        o, lse, seed, offset = fd.ops.sdpfa_fwd(Q, K, V, dropout_p=0.2, is_causal=True)
        for t in (o, *fd.ops.sdpfa_bwd(G, Q, K, V, o, lse, 0.2, True, seed, offset, None)):
            fd.add_output(t)
    torch.manual_seed(0)
    got = fd.execute([q, k, v, grad])
    torch.manual_seed(0)
    out, lse, *_, s, off, _ = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.2, True)
    want = torch.ops.aten._scaled_dot_product_flash_attention_backward(grad, q, k, v, out, lse, None, None, 16, 16,
                                                                       0.2, True, s, off)
    for a, b in zip(got, (out, *want)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("op", ["scaled_mm", "nv_block_quantize"])
def test_unsupported_ops_raise_at_definition(op):
    with pytest.raises(DefinitionError, match=f"{op} is not supported: .*no float8"):
        with FusionDefinition() as fd:
            getattr(fd.ops, op)(fd.define_tensor(shape=[2, 2], dtype=DataType.Float))
