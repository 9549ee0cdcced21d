"""The peephole passes (``ir.peephole``) find their sites from the IR alone, before
lowering: the sites they must take, and the look-alikes they must leave."""
from __future__ import annotations

from pyfuser import DataType, FusionDefinition
from pyfuser.ir import peephole


def _outputs(build):
    with FusionDefinition() as fd:
        for o in build(fd):
            fd.add_output(o)
    return fd.ir.outputs


def _x(fd, dtype=DataType.Float):
    return fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)


def _sites(build, which):
    return getattr(peephole.find(_outputs(build)), which)


def test_one_plus_tanh_is_found_in_either_order_and_one_minus_tanh_too():
    for op, order, sign in (("add", 0, 1), ("add", 1, 1), ("sub", 0, -1)):
        def build(fd, op=op, order=order):
            u = fd.ops.mul(_x(fd), 0.5)
            t = fd.ops.tanh(u)
            args = (1.0, t) if order == 0 else (t, 1.0)
            return [getattr(fd.ops, op)(*args)]
        (site,) = _sites(build, "shifted_tanh").values()
        assert site.sign == sign and site.tanh.definition.op == "tanh" and site.u.definition.op == "mul"


def test_tanh_minus_one_a_tanh_read_twice_and_fp16_are_left_alone():
    def minus_one(fd):
        return [fd.ops.sub(fd.ops.tanh(_x(fd)), 1.0)]

    def read_twice(fd):
        t = fd.ops.tanh(_x(fd))
        return [fd.ops.add(t, 1.0), t]

    def half(fd):
        return [fd.ops.add(fd.ops.tanh(_x(fd, DataType.Half)), 1.0)]

    def two(fd):
        return [fd.ops.add(fd.ops.tanh(_x(fd)), 2.0)]

    for build in (minus_one, read_twice, half, two):
        assert _sites(build, "shifted_tanh") == {}, build.__name__


def test_a_unit_draw_compared_with_a_constant_is_found_through_layout_ops():
    def dropout(fd):
        x = _x(fd)
        keep = fd.ops.lt(fd.ops.rand_like(x), 0.9)
        return [fd.ops.where(keep, x, 0.0)]

    def flipped(fd):
        u = fd.ops.permute(fd.ops.uniform(0.0, 1.0, [4, 8]), [1, 0])
        return [fd.ops.ge(0.25, u)]

    (site,) = _sites(dropout, "draw_comparisons").values()
    assert site == peephole.DrawComparison(0, 0.9)
    (site,) = _sites(flipped, "draw_comparisons").values()
    assert site == peephole.DrawComparison(1, 0.25)


def test_other_draws_and_constants_are_left_to_the_float_comparison():
    def scaled(fd):
        return [fd.ops.lt(fd.ops.uniform(0.0, 2.0, [4, 8]), 0.5)]

    def normal(fd):
        return [fd.ops.lt(fd.ops.randn_like(_x(fd)), 0.5)]

    def half(fd):
        return [fd.ops.lt(fd.ops.rand_like(_x(fd, DataType.Half)), 0.5)]

    def infinite(fd):
        return [fd.ops.lt(fd.ops.rand_like(_x(fd)), float("inf"))]

    def through_math(fd):
        return [fd.ops.lt(fd.ops.mul(fd.ops.rand_like(_x(fd)), 1.0), 0.5)]

    for build in (scaled, normal, half, infinite, through_math):
        assert _sites(build, "draw_comparisons") == {}, build.__name__


def test_a_walk_without_outputs_rewrites_nothing():
    assert peephole.find(()) == peephole.Rewrites()


def _softmax(fd, x, out_dtype):
    t = fd.ops.cast(x, DataType.Float)
    e = fd.ops.exp(t)
    s = fd.ops.broadcast_in_dim(fd.ops.sum(e, [1]), output_shape=[4, 8], broadcast_dims=[0])
    return fd.ops.cast(fd.ops.div(e, s), out_dtype)


def _fast_ops(build):
    return sorted(e.op for e in _sites(build, "fast_exp"))


def test_fast_exp_where_every_path_reaches_a_16_bit_value():
    def half_out(fd):  # exp -> sum -> div -> fp16 store
        return [_softmax(fd, _x(fd, DataType.Half), DataType.Half)]

    def half_then_fp32(fd):  # rounded to bf16 on the way to the fp32 store
        return [fd.ops.cast(_softmax(fd, _x(fd, DataType.BFloat16), DataType.BFloat16), DataType.Float)]

    def sigmoid_silu(fd):
        x = _x(fd)
        return [fd.ops.cast(fd.ops.sigmoid(x), DataType.Half), fd.ops.cast(fd.ops.silu(x), DataType.BFloat16)]

    assert _fast_ops(half_out) == ["exp"]
    assert _fast_ops(half_then_fp32) == ["exp"]
    assert _fast_ops(sigmoid_silu) == ["sigmoid", "silu"]


def test_expf_where_a_path_reaches_fp32_a_comparison_or_an_integer():
    def fp32_out(fd):
        return [_softmax(fd, _x(fd, DataType.Half), DataType.Float)]

    def also_fp32(fd):  # one 16-bit store, one fp32 store of the same exp
        e = fd.ops.exp(_x(fd))
        return [fd.ops.cast(e, DataType.Half), e]

    def compared(fd):
        return [fd.ops.gt(fd.ops.exp(_x(fd)), 0.5)]

    def to_int(fd):
        return [fd.ops.cast(fd.ops.exp(_x(fd)), DataType.Int32)]

    for build in (fp32_out, also_fp32, compared, to_int):
        assert _fast_ops(build) == [], build.__name__


def test_fast_exp_walks_a_long_chain_without_recursion():
    def chain(fd):
        v = _x(fd)
        for _ in range(3000):
            v = fd.ops.exp(fd.ops.neg(v))
        return [fd.ops.cast(v, DataType.Half)]

    assert len(_sites(chain, "fast_exp")) == 3000


def _labels(fd):
    return fd.define_tensor(shape=[4], contiguity=[True], dtype=DataType.Int)


def _one_hot(fd, labels, n, start=0, step=1, op="eq", iota_first=True):
    i = fd.ops.broadcast_in_dim(fd.ops.iota(n, start, step, DataType.Int), shape=[1, n], broadcast_dims=[1])
    x = fd.ops.broadcast_in_dim(labels, shape=[4, 1], broadcast_dims=[0])
    return getattr(fd.ops, op)(*((i, x) if iota_first else (x, i)))


def test_an_iota_below_2_31_compared_with_int64_is_found_either_way_round():
    for op, first in (("eq", True), ("eq", False), ("ne", True)):
        (site,) = _sites(lambda fd, op=op, first=first: [_one_hot(fd, _labels(fd), 50257, op=op, iota_first=first)],
                         "narrow_comparisons").values()
        assert site.iota == (0 if first else 1)


def test_iotas_reaching_2_31_negative_or_compared_otherwise_are_left_alone():
    def cases(fd):
        lab = _labels(fd)
        x32 = fd.define_tensor(shape=[4], contiguity=[True], dtype=DataType.Int32)
        return [_one_hot(fd, lab, 8, start=2**31 - 4),  # its last values reach 2**31
                _one_hot(fd, lab, 8, start=-1),  # a negative value
                _one_hot(fd, lab, 8, start=7, step=-1),  # counting down to 0 is fine ...
                _one_hot(fd, lab, 8, start=6, step=-1),  # ... past it is not
                _one_hot(fd, lab, 8, op="lt"),  # an order comparison
                _one_hot(fd, x32, 8)]  # an int32 tensor: not the rule's case

    sites = _sites(cases, "narrow_comparisons")
    assert [e.outputs[0].name for e in sites] == [_outputs(cases)[2].name]
