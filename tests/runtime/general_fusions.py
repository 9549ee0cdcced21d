"""Fusions whose plans are general (host steps, kernels reading other kernels' stored
values), with their inputs: shared by ``test_general_cached.py`` and the host-time
measurement."""
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.bench.training import build_cross_entropy

from ..segment.test_reduction_cuts import layer_norm_bwd

FL, HALF = DataType.Float, DataType.Half


def tensor(fd, rank, dtype=FL):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def linear_between_pointwise(fd):
    """fp16 x -> x * x upcast (stored at 16 bits, the cast replayed before the linear)
    -> linear -> tanh times a runtime scalar and the upcast's row sums: a kernel, a
    host step, a kernel on its result."""
    x, w, bias = tensor(fd, 2, HALF), tensor(fd, 2), tensor(fd, 1)
    s = fd.define_scalar(dtype=FL)
    h = fd.ops.cast(fd.ops.mul(x, x), dtype=FL)
    y = fd.ops.linear(h, w, bias)
    fd.add_output(fd.ops.mul(fd.ops.tanh(y), s))
    fd.add_output(fd.ops.sum(h, dims=[1]))


def linear_inputs(m=5, k=12, n=7, seed=0):
    g = gen(seed)
    return [torch.randn(m, k, generator=g).half(), torch.randn(n, k, generator=g), torch.randn(n, generator=g),
            0.5 + seed]


def layer_norm_backward(fd, n=6, h=20):
    """Statistics inside: a row kernel and column sums reading the stored statistics."""
    layer_norm_bwd(fd, n, h, FL, stats_inside=True)


def layer_norm_backward_inputs(n=6, h=20, seed=0):
    g = gen(seed)
    return [torch.randn(n, h, generator=g), torch.randn(n, h, generator=g), torch.randn(h, generator=g)]


def cross_entropy(fd, r=6, v=40):
    build_cross_entropy(fd, (r, v, FL))


def cross_entropy_inputs(r=6, v=40, seed=0):
    g = gen(seed)
    return [torch.randn(r, v, generator=g), torch.randint(0, v, (r,), generator=g)]


def embedding(fd):
    """A kernel scales the table, embedding_fwd gathers its rows, a kernel takes tanh;
    the ids come back as an output (an alias of an input) and the table transposed
    (a view of an input)."""
    ids, table = tensor(fd, 2, DataType.Int), tensor(fd, 2)
    e = fd.ops.embedding_fwd(ids, fd.ops.mul(table, 2.0))
    fd.add_output(fd.ops.tanh(e))
    fd.add_output(ids)
    fd.add_output(fd.ops.permute(table, dims=[1, 0]))


def embedding_inputs(b=2, s=5, v=11, d=8, seed=0):
    g = gen(seed)
    return [torch.randint(0, v, (b, s), generator=g), torch.randn(v, d, generator=g)]


def dropout_linear_dropout(fd):
    """Random numbers in the kernels on both sides of a host step."""
    x, w = tensor(fd, 2), tensor(fd, 2)
    keep = fd.ops.lt(fd.ops.rand_like(x), 0.7)
    h = fd.ops.where(keep, fd.ops.mul(x, 1 / 0.7), 0.0)
    y = fd.ops.matmul(h, w)
    fd.add_output(fd.ops.add(y, fd.ops.randn_like(y)))
    fd.add_output(keep)


def dropout_inputs(m=6, k=9, n=5, seed=0):
    g = gen(seed)
    return [torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)]


def random_row_kernels(fd, n=6, h=20):
    """Random numbers in two kernels connected by a stored reduction (no host step)."""
    x = tensor(fd, 2)
    u = fd.ops.mul(x, fd.ops.rand_like(x))
    var, mean = fd.ops.var_mean(u, dims=[1], correction=0, keepdim=False)
    bc = lambda t: fd.ops.broadcast_in_dim(t, shape=[n, h], broadcast_dims=[0])  # noqa: E731
    y = fd.ops.mul(fd.ops.sub(u, bc(mean)), fd.ops.rsqrt(fd.ops.add(bc(var), 1e-5)))
    fd.add_output(fd.ops.add(y, fd.ops.randn_like(y)))
    fd.add_output(fd.ops.sum(y, dims=[0]))


def random_row_inputs(n=6, h=20, seed=0):
    return [torch.randn(n, h, generator=gen(seed))]


def define(build, *args) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


# name -> (build, inputs(seed)); every plan is general
GENERAL = {
    "linear": (linear_between_pointwise, linear_inputs),
    "layer_norm_backward": (layer_norm_backward, layer_norm_backward_inputs),
    "cross_entropy": (cross_entropy, cross_entropy_inputs),
    "embedding": (embedding, embedding_inputs),
    "dropout_linear": (dropout_linear_dropout, dropout_inputs),
    "random_rows": (random_row_kernels, random_row_inputs),
}
