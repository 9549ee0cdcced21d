"""Inner normalization scheduler: softmax, log-softmax, layer norm and RMS norm,
persistent and multi-pass, against the reference executor."""
from __future__ import annotations

import pytest
import torch

from pyfuser.schedulers import Choices

from .common import DataType, check, define_input, from_torch, fusion, gen_for, make_tensor

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(1, 1), (7, 1), (1, 7), (13, 129), (3, 1001), (2, 30522)]


def _id(x):
    return str(x).replace("torch.", "")


def variant_params(variant, J):
    if variant == "default":
        return {}
    if variant == "persistent":
        return {"persistent": True}
    # multi-pass: chunks of 16 (wide rows: 1024, 30 chunks with a partial last one)
    return {"persistent": False, "block_j": 1024 if J > 4096 else 16}


def _bcast(fd, t, shape):
    """[R] -> [R, V] through [R, 1], as the report's fusions spell it."""
    R, V = shape
    return fd.ops.broadcast_in_dim(fd.ops.broadcast_in_dim(t, shape=[R, 1], broadcast_dims=[0]),
                                   shape=[R, V], broadcast_dims=[0, 1])


def softmax(fd, x, shape, log=False):
    m = fd.ops.max(x, dims=[1])
    d = fd.ops.sub(x, _bcast(fd, m, shape))
    e = fd.ops.exp(d)
    s = fd.ops.sum(e, dims=[1])
    if log:
        return fd.ops.sub(d, _bcast(fd, fd.ops.log(s), shape))
    return fd.ops.div(e, _bcast(fd, s, shape))


def layer_norm(fd, x, w, b, shape, eps=1e-5):
    var, mean = fd.ops.var_mean(x, dims=[1], correction=0, keepdim=True)
    rstd = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(eps)))
    y = fd.ops.mul(fd.ops.sub(x, mean), rstd)
    y = fd.ops.mul(y, fd.ops.broadcast_in_dim(w, shape=list(shape), broadcast_dims=[1]))
    return fd.ops.add(y, fd.ops.broadcast_in_dim(b, shape=list(shape), broadcast_dims=[1])), mean, rstd


def rms_norm(fd, x, w, shape, eps=1e-6):
    ms = fd.ops.div(fd.ops.sum(fd.ops.mul(x, x), dims=[1], keepdim=True), fd.define_scalar(float(shape[1])))
    r = fd.ops.rsqrt(fd.ops.add(ms, fd.define_scalar(eps)))
    return fd.ops.mul(fd.ops.mul(x, r), fd.ops.broadcast_in_dim(w, shape=list(shape), broadcast_dims=[1])), r


def _run(build, inputs, variant, J, what):
    fd = fusion(build)
    forced = variant_params(variant, J)
    with Choices(**forced):
        return check(fd, inputs, n_launches=1, tol=(2e-5, 2e-5) if inputs[0].dtype == torch.float32 else None,
                     scheduler="inner_normalization" if J > 1 else None, what=what,
                     **({"persistent": forced["persistent"]} if forced else {}))


@pytest.mark.parametrize("variant", ["default", "persistent", "multipass"])
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_softmax(shape, log, dtype, variant):
    if shape[1] == 30522 and variant != "multipass" and dtype != torch.float16:
        pytest.skip("the wide row runs in fp16 (the report's case) and in every dtype multi-pass")
    gen = gen_for("softmax", shape, log, str(dtype), variant)
    x = make_tensor(shape, dtype, gen) * 3

    def build(fd):
        t = fd.ops.cast(define_input(fd, x), dtype=DataType.Float)
        y = softmax(fd, t, shape, log)
        fd.add_output(fd.ops.cast(y, dtype=from_torch(dtype)))
        if dtype != torch.float32:
            fd.add_output(y)  # the fp32 result too: two outputs of the row's shape

    _run(build, [x], variant, shape[1], f"{'log_' if log else ''}softmax {shape} {variant}")


@pytest.mark.parametrize("variant", ["default", "persistent", "multipass"])
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("shape", SHAPES[2:], ids=_id)
def test_layer_norm(shape, dtype, variant):
    if shape[1] == 30522 and variant == "persistent":
        pytest.skip("the default variant is persistent for this width")
    gen = gen_for("layer_norm", shape, str(dtype), variant)
    x = make_tensor(shape, dtype, gen) + 1.5  # a mean far from 0
    w = make_tensor(shape[1:], torch.float32, gen)
    b = make_tensor(shape[1:], torch.float32, gen)

    def build(fd):
        t = fd.ops.cast(define_input(fd, x), dtype=DataType.Float)
        y, mean, rstd = layer_norm(fd, t, define_input(fd, w), define_input(fd, b), shape)
        fd.add_output(fd.ops.cast(y, dtype=from_torch(dtype)))
        fd.add_output(mean)
        fd.add_output(rstd)

    _run(build, [x, w, b], variant, shape[1], f"layer_norm {shape} {variant}")


@pytest.mark.parametrize("variant", ["default", "persistent", "multipass"])
@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("shape", SHAPES[2:], ids=_id)
def test_rms_norm(shape, dtype, variant):
    if shape[1] == 30522 and variant == "persistent":
        pytest.skip("the default variant is persistent for this width")
    gen = gen_for("rms_norm", shape, str(dtype), variant)
    x = make_tensor(shape, dtype, gen)
    w = make_tensor(shape[1:], dtype, gen)

    def build(fd):
        t = fd.ops.cast(define_input(fd, x), dtype=DataType.Float)
        tw = fd.ops.cast(define_input(fd, w), dtype=DataType.Float)
        y, r = rms_norm(fd, t, tw, shape)
        fd.add_output(fd.ops.cast(y, dtype=from_torch(dtype)))
        fd.add_output(r)

    _run(build, [x, w], variant, shape[1], f"rms_norm {shape} {variant}")


@pytest.mark.parametrize("variant", ["persistent", "multipass"])
def test_softmax_after_reshape(variant):
    """The report's first problem: a view at the top of the fusion.  [B*H, S, S] is
    viewed as [B, H, S, S] and normalized over the last dim in one kernel."""
    B, H, S = 2, 3, 17
    gen = gen_for("softmax_view", variant)
    x = make_tensor((B * H, S, S), torch.float16, gen)

    def build(fd):
        t = fd.ops.reshape(define_input(fd, x), new_shape=[B, H, S, S])
        t = fd.ops.cast(t, dtype=DataType.Float)
        m = fd.ops.max(t, dims=[3], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(t, m))
        y = fd.ops.div(e, fd.ops.sum(e, dims=[3], keepdim=True))
        fd.add_output(fd.ops.cast(y, dtype=DataType.Half))

    _run(build, [x], variant, S, f"softmax after reshape {variant}")


@pytest.mark.parametrize("variant", ["persistent", "multipass"])
def test_normalization_of_strided_input(variant):
    gen = gen_for("norm_strided", variant)
    x = make_tensor((129, 9), torch.float32, gen).t()  # [9, 129] with transposed strides

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Float)
        fd.add_output(softmax(fd, t, (9, 129), log=True))

    _run(build, [x], variant, 129, f"strided log_softmax {variant}")


@pytest.mark.parametrize("variant", ["persistent", "multipass"])
def test_normalization_with_extra_outputs(variant):
    """Outputs of three shapes from one kernel: the row's shape, the reduced shape and
    an input-shaped [V] tensor reached on the way (a scaled bias)."""
    R, V = 5, 77
    gen = gen_for("norm_outputs", variant)
    x = make_tensor((R, V), torch.float32, gen)
    bias = make_tensor((V,), torch.float32, gen)

    def build(fd):
        tx, tb = define_input(fd, x), define_input(fd, bias)
        sb = fd.ops.mul(tb, fd.define_scalar(0.5))
        t = fd.ops.add(tx, fd.ops.broadcast_in_dim(sb, shape=[R, V], broadcast_dims=[1]))
        m = fd.ops.max(t, dims=[1])
        y = fd.ops.sub(t, _bcast(fd, m, (R, V)))
        fd.add_output(y)
        fd.add_output(m)
        fd.add_output(sb)

    _run(build, [x, bias], variant, V, f"extra outputs {variant}")
