"""Params: ``validate()`` rejects combinations no kernel takes with an error naming
the fields; the run-time check turns that into an ``invalid_params`` rejection; and
random valid params of a few small fusions emit and match the reference."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import ChoicesError
from pyfuser.schedulers import Choices
from pyfuser.schedulers.inner_outer import InnerOuterParams
from pyfuser.schedulers.pointwise import BroadcastParams, FlatParams
from pyfuser.schedulers.reduction_params import (InnerChunked, InnerPersistent, OuterChunked, OuterPersistent,
                                                  PrefetchRows)

FL = DataType.Float


@pytest.mark.parametrize("params,fields", [
    (FlatParams(1000, 4, False), ["block=1000"]),
    (FlatParams(1024, 3, False), ["num_warps=3"]),
    (BroadcastParams(1024, 4, False, (), 8), ["outer=() is a flat tile"]),
    (BroadcastParams(16, 4, False, (0,), 32), ["block_outer=32 exceeds block=16"]),
    (BroadcastParams(1024, 4, False, (0, 0), 8), ["outer=(0, 0)"]),
    (BroadcastParams(1024, 4, False, (1,), 8, grid_dims=(0, 1)), ["grid_dims=(0, 1)"]),
    (InnerPersistent(1, 100, 4, False), ["block_j=100"]),
    (InnerChunked(3, 128, 64, False, align=6), ["block_k=3", "num_warps=64 exceeds 32", "align=6"]),
    (OuterChunked(8, 64, 4, False, split=0, stages=0), ["split=0", "stages=0"]),
    (OuterPersistent(8, 64, 4, False, contig_multiple=3), ["contig_multiple=3"]),
    (PrefetchRows(128, 4, False, align=1), ["align=1 must be a power of 2 > 1"]),
    (InnerOuterParams(2, 96, 4, 0, 0, 0, False), ["block_j=96", "nprog=0"]),
    (InnerOuterParams(2, 128, 64, 8, 3, 4, False), ["num_warps=64 exceeds 32"]),
    (FlatParams(4096, 64, False), ["num_warps=64 exceeds 32"]),
])
def test_validate_names_every_bad_field(params, fields):
    with pytest.raises(ChoicesError) as err:
        params.validate()
    for f in fields:
        assert f in str(err.value)
    assert type(params).__name__ in str(err.value)


def test_valid_params_validate_to_themselves():
    for p in (FlatParams(1024, 4, False), BroadcastParams(1024, 4, False, (0,), 8), PrefetchRows(128, 4, False, align=8),
              InnerOuterParams(2, 128, 4, 8, 3, 4, False)):
        assert p.validate() is p


def row_sums_fd():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=FL)
        fd.add_output(fd.ops.sum(fd.ops.mul(t, 2.0), [1]))
    return fd


def test_invalid_choices_are_a_rejection_with_a_code():
    import warnings

    fd, x = row_sums_fd(), torch.randn(4, 64)
    with Choices(block_j=48), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = fd.explain([x])
    assert ex.segments[0].scheduler is None
    assert ex.segments[0].codes["inner_reduction"] == "invalid_params"


def _softmax_fd(dtype):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        t = fd.ops.cast(x, dtype=FL)
        e = fd.ops.exp(fd.ops.sub(t, fd.ops.max(t, dims=[1], keepdim=True)))
        fd.add_output(fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)), dtype=dtype))
    return fd


def _col_sums_fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=FL)
        fd.add_output(fd.ops.sum(fd.ops.exp(x), [0]))
        fd.add_output(fd.ops.mul(x, 3.0))
    return fd


def _gelu_fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=FL)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=FL)
        y = fd.ops.add(x, fd.ops.broadcast_in_dim(b, shape=[-1, -1], broadcast_dims=[1]))
        fd.add_output(fd.ops.mul(y, fd.ops.sigmoid(fd.ops.mul(y, 1.702))))
    return fd


pow2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64])


@st.composite
def case(draw):
    kind = draw(st.sampled_from(["softmax", "col_sums", "gelu"]))
    R, V = draw(st.sampled_from([1, 3, 8])), draw(st.sampled_from([4, 33, 64, 100]))
    if kind == "softmax":
        persistent = draw(st.booleans())
        bj = 128 if persistent else draw(st.sampled_from([8, 16, 32]))
        ch = dict(persistent=persistent, block_k=draw(st.sampled_from([1, 2, 4])), block_j=bj,
                  num_warps=draw(st.sampled_from([1, 2, 4])), online=not persistent and draw(st.booleans()))
    elif kind == "col_sums":
        ch = dict(persistent=False, block_k=draw(pow2), block_j=draw(st.sampled_from([2, 4, 8])),
                  split=draw(st.sampled_from([1, 2, 4])), stages=draw(st.sampled_from([1, 2])))
    else:
        ch = dict(block=draw(st.sampled_from([16, 64, 256])), num_warps=draw(st.sampled_from([1, 4])))
    return kind, R, V, ch


@settings(max_examples=12)
@given(case())
def test_random_valid_params_emit_and_match_the_reference(c):
    kind, R, V, ch = c
    fd = {"softmax": lambda: _softmax_fd(FL), "col_sums": _col_sums_fd, "gelu": _gelu_fd}[kind]()
    g = torch.Generator().manual_seed(R * 1000 + V)
    xs = [torch.randn(R, V, generator=g)] + ([torch.randn(V, generator=g)] if kind == "gelu" else [])
    with Choices(**ch):
        ex = fd.explain(xs)
        assert all(s.scheduler is not None for s in ex.segments), str(ex)
        for s in ex.segments:
            s.params.validate()
        got = fd.execute(xs)
    for a, b in zip(got, fd.reference(xs)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
