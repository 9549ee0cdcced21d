"""``codegen.variation``: along which reference dims each value of a pointwise segment
varies, the walk the pointwise scheduler chooses its 2-D tiles from."""
from __future__ import annotations

import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.codegen.variation import variation
from pyfuser.ir.concretize import bind


def _walk(build, inputs):
    with FusionDefinition() as fd:
        build(fd)
    b = bind(fd.ir, inputs)
    info = {v: {"contiguous": True} for v in fd.ir.inputs}
    outs = list(fd.ir.outputs)
    return fd.ir, variation(outs, b.shapes, info, {}, outs[0])  # the first output is the largest


def _by_op(var):
    return {e.op: axes for e, axes in var.expr_axes.items()}


def test_rope_angles_vary_along_tokens_and_the_last_dim_not_the_heads():
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        c = fd.ops.cos(fd.ops.broadcast_in_dim(a, shape=[6, 4, 16], broadcast_dims=[0, 2]))
        fd.add_output(fd.ops.mul(x, c))
    ir, var = _walk(build, [torch.randn(6, 4, 16), torch.randn(6, 16)])
    assert _by_op(var) == {"cos": frozenset({0, 2}), "mul": frozenset({0, 1, 2})}
    x, a = ir.inputs
    assert var.load_axes[x] == (frozenset({0}), frozenset({1}), frozenset({2}))
    assert var.load_axes[a] == (frozenset({0}), frozenset({2}))


def test_a_permuted_read_and_a_value_used_at_two_coordinates():
    """A permute maps the reference's dims onto the input's; a value used at the
    coordinates of two outputs varies along the dims of both uses."""
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        e = fd.ops.exp(x)
        fd.add_output(fd.ops.add(e, fd.ops.permute(e, [1, 0])))
    ir, var = _walk(build, [torch.randn(8, 8)])
    [x] = ir.inputs
    assert var.load_axes[x] == (frozenset({0, 1}), frozenset({0, 1}))
    assert _by_op(var)["exp"] == frozenset({0, 1})


def test_an_output_the_walk_does_not_meet_gives_none():
    """The second output is not computed from the first's values: nothing tells where
    the walk over the reference would store it."""
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(x))
        fd.add_output(fd.ops.neg(y))
    _, var = _walk(build, [torch.randn(4, 8), torch.randn(8)])
    assert var is None
