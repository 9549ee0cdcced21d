"""A persistent row narrower than its block takes its length as a compile-time
constant, one binary per length; a kernel that meets a second length is rebuilt with
the length at run time, so a fusion run at ever new sequence lengths compiles a
bounded number of binaries (``schedulers.reduction_schedulers.CONSTANT_ROW_LENGTHS``, the
reduction schedulers' ``settle``)."""
from __future__ import annotations

import re

import torch

import pyfuser
from pyfuser import DataType, FusionDefinition
from pyfuser.schedulers.reduction_schedulers import CONSTANT_ROW_LENGTHS

from .conftest import device


def softmax_fd() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        e = fd.ops.exp(fd.ops.sub(x, fd.ops.max(x, dims=[1], keepdim=True)))
        fd.add_output(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)))
    return fd


def kernels(fd) -> list:
    """(runtime_row, source) of each kernel the fusion built, in build order."""
    return [(key.params.runtime_row, src.source) for key, (src, _) in fd._runtime.kernels.items()]


def constant_length(source: str) -> bool:
    return re.search(r"^\s*J: tl\.constexpr", source, re.M) is not None


def run(fd, length: int) -> int:
    """Execute at rows of ``length`` and check against eager; the kernels compiled."""
    before = pyfuser.cache_info()["kernels_compiled"]
    x = torch.randn(6, length, device=device()) * 3
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    return pyfuser.cache_info()["kernels_compiled"] - before


def test_a_kernel_met_at_a_second_row_length_takes_the_length_at_run_time():
    assert CONSTANT_ROW_LENGTHS == 1
    fd = softmax_fd()
    # rows of 40, 48, 56 ... share one 64-wide block: 40 is a constant, 48 the second length
    assert run(fd, 40) == 1
    ((flag, source),) = kernels(fd)
    assert flag is False and constant_length(source)
    assert run(fd, 48) == 1
    flag, source = kernels(fd)[-1]
    assert flag is True and not constant_length(source) and "runtime_row=True" in source
    (seen,) = fd._runtime.constants_met.values()
    assert seen == {40}
    # a length seen before keeps its constant kernel; a new one in the block runs the
    # runtime-row kernel whatever its multiples (rows of whole 16-byte words: a
    # misaligned row is peeled, a kernel of its own): neither compiles anything
    assert all(run(fd, n) == 0 for n in (40, 56, 60, 36, 44))
    assert len(kernels(fd)) == 2


def test_a_row_as_wide_as_its_block_is_a_runtime_length_from_the_start():
    fd = softmax_fd()
    for length in (64, 64, 64):
        run(fd, length)
    (only,) = kernels(fd)
    assert only[0] is False and not constant_length(only[1])
    assert not any(fd._runtime.constants_met.values())
