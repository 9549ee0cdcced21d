"""Kernel cache behaviour seen from the code generator's side: sizes are kernel
arguments, so new sizes reuse kernels; new layouts get new (correct) kernels."""
from __future__ import annotations

import torch

import pyfuser
from pyfuser.ir.concretize import bind
from pyfuser.schedulers import Segment, INNER_NORMALIZATION, pointwise
from pyfuser.runtime.plan import is_contiguous

from .common import DataType, check, fusion, gen_for, make_tensor


def _pointwise_fd():
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
        t = fd.ops.cast(x, dtype=DataType.Float)
        bb = fd.ops.broadcast_in_dim(fd.ops.cast(b, dtype=DataType.Float), shape=[-1, -1], broadcast_dims=[1])
        t = fd.ops.add(t, bb)
        y = fd.ops.mul(fd.ops.mul(t, fd.define_scalar(0.5)),
                       fd.ops.add(fd.ops.erf(fd.ops.mul(t, fd.define_scalar(0.7071067811865476))),
                                  fd.define_scalar(1.0)))
        fd.add_output(fd.ops.cast(y, dtype=DataType.Half))

    return fusion(build)


# Five sizes, all rows a multiple of 8 fp16 elements (16 bytes): one alignment class.
SIZES = [(17, 1024), (9, 2048), (33, 1000), (40, 512), (25, 1200)]


def test_five_sizes_compile_at_most_two_kernels():
    fd = _pointwise_fd()
    pyfuser.runtime.cache.reset_counters()
    for i, (M, N) in enumerate(SIZES):
        gen = gen_for("sizes", M, N)
        x, b = make_tensor((M, N), torch.float16, gen), make_tensor((N,), torch.float16, gen)
        check(fd, [x, b], n_launches=1, what=f"size {M}x{N}")
    info = pyfuser.cache_info()
    assert info["kernels_compiled"] <= 2, info
    assert info["launches"] == len(SIZES)


def test_small_sizes_compile_at_most_two_kernels():
    """Below the interpreter's largest block too: sizes from 24 to 4480 elements."""
    fd = _pointwise_fd()
    for M, N in [(3, 1000), (7, 640), (11, 128), (2, 2048), (5, 800), (3, 8), (4, 16)]:
        gen = gen_for("small_sizes", M, N)
        x, b = make_tensor((M, N), torch.float16, gen), make_tensor((N,), torch.float16, gen)
        check(fd, [x, b], n_launches=1, what=f"size {M}x{N}")
    assert pyfuser.cache_info()["kernels_compiled"] <= 2, pyfuser.cache_info()


def _segment(fd, inputs, device_type):
    b = bind(fd.ir, inputs)
    info = {v: {"contiguous": is_contiguous(x)} for v, x in zip(fd.ir.inputs, inputs)}
    return Segment(list(fd.ir.outputs), b.shapes, info, device_type)


def test_gpu_heuristics_are_size_stable():
    """The CUDA heuristics (pure functions; no GPU needed) pick at most two parameter
    sets over sizes of one alignment class, so at most two kernels compile there."""
    fd = _pointwise_fd()
    params = set()
    for M, N in SIZES + [(2048, 1024), (4096, 4096)]:
        inputs = [torch.empty(M, N, dtype=torch.float16, device="meta"), torch.empty(N, dtype=torch.float16,
                                                                                     device="meta")]
        params.add(pointwise.heuristics(_segment(fd, inputs, "cuda")))
    assert len(params) <= 2, params

    def softmax(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        t = fd.ops.cast(x, dtype=DataType.Float)
        e = fd.ops.exp(fd.ops.sub(t, fd.ops.max(t, dims=[1], keepdim=True)))
        fd.add_output(fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)), dtype=DataType.Half))

    sm = fusion(softmax)
    params = set()
    for rows in (1024, 2000, 4096, 8192, 30000):
        inputs = [torch.empty(rows, 1024, dtype=torch.float16, device="meta")]
        params.add(INNER_NORMALIZATION.heuristics(_segment(sm, inputs, "cuda")))
    assert len(params) <= 2, params


def test_repeated_execute_hits_the_cache():
    fd = _pointwise_fd()
    gen = gen_for("hits")
    x, b = make_tensor((7, 129), torch.float16, gen), make_tensor((129,), torch.float16, gen)
    check(fd, [x, b], n_launches=1)
    compiled = pyfuser.cache_info()["kernels_compiled"]
    for _ in range(3):
        x2 = make_tensor((7, 129), torch.float16, gen)  # new data, same sizes
        check(fd, [x2, b], n_launches=1)
    assert pyfuser.cache_info()["kernels_compiled"] == compiled


def test_new_layouts_get_correct_kernels():
    """The same definition with a contiguous input, a transposed one (contiguity
    False) and a misaligned one (storage offset 1 element): each result is right."""
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[None, None], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.exp(x), fd.define_scalar(2.0)))
        fd.add_output(fd.ops.sum(x, dims=[1]))

    fd = fusion(build)
    gen = gen_for("layouts")
    base = make_tensor((4097,), torch.float32, gen)
    variants = [make_tensor((33, 124), torch.float32, gen), make_tensor((124, 33), torch.float32, gen).t(),
                base[1:].view(32, 128), make_tensor((33, 124), torch.float32, gen)]
    for x in variants:
        check(fd, [x], tol=(1e-5, 1e-4), what=f"strides {x.stride()} offset {x.storage_offset()}")


def test_two_definitions_of_the_same_structure():
    """Two definitions whose outputs share numbering and signature keep their own kernels
    (a process-wide kernel table once handed the first one's kernel to the second)."""
    def unary(op):
        def build(fd):
            x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
            fd.add_output(getattr(fd.ops, op)(x))
        return fusion(build)

    x = make_tensor((100,), torch.float32, gen_for("two_defs"))
    a, n = unary("abs"), unary("neg")
    assert torch.equal(a.execute([x])[0], x.abs())
    assert torch.equal(n.execute([x])[0], -x)
    assert torch.equal(a.execute([x])[0], x.abs())
