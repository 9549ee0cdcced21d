"""Slice indices and pad widths given at execute time (runtime Int scalars, sizes,
Vectors), and floating scalars as reshape sizes.  A runtime index decides the output's
extent, so each fusion runs again with other values: an extent or a bound must never
come back stale from a cached kernel or launch.  Every result is checked against
torch's slicing, ``F.pad`` and ``reshape``."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pyfuser import DataType, FusionDefinition

from ..helpers import assert_all_match, gen_for, make_tensor
from .test_printer import assert_round_trip
from .test_validation import raises


def _input(fd, rank):
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=DataType.Float)


def _x(shape, *tag):
    return make_tensor(shape, torch.float32, gen_for("runtime_indices", shape, *tag))


# --- slice ----------------------------------------------------------------------------------

# (start, end) pairs of Python slicing: in range, negative, past either end, empty
WINDOWS = [(1, 5), (0, 7), (-3, 7), (2, -1), (-9, 3), (4, 40), (5, 2), (-2, -5), (7, 9), (-40, -30)]


def test_runtime_scalar_slice_indices_follow_python_slicing():
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        s0, e0, s1, e1 = (fd.define_scalar(DataType.Int) for _ in range(4))
        fd.add_output(fd.ops.add(fd.ops.slice(t, [s0, s1], [e0, e1]), 1.0))
    x = _x((7, 6))
    for (a, b), (c, d) in zip(WINDOWS, WINDOWS[::-1]):
        (got,) = fd.execute([x, a, b, c, d])
        assert_all_match([got], [x[a:b, c:d] + 1.0])
    assert_round_trip(fd, [x, 1, 5, -3, 6])


def test_slice_indices_as_vectors():
    """start_indices from define_vector, end_indices from the input's shape."""
    with FusionDefinition() as fd:
        t = _input(fd, 3)
        fd.add_output(fd.ops.slice(t, fd.define_vector(3), t.shape()))
    for shape, starts in [((2, 5, 4), (0, 1, 2)), ((3, 4, 6), (1, -2, 5)), ((2, 5, 4), (2, 0, -1))]:
        x = _x(shape, starts)
        (got,) = fd.execute([x, *starts])
        assert_all_match([got], [x[starts[0]:, starts[1]:, starts[2]:]])


def test_runtime_slice_strides():
    with FusionDefinition() as fd:
        t = _input(fd, 1)
        step = fd.define_scalar(DataType.Int)
        fd.add_output(fd.ops.slice(t, [1], [fd.ops.size(t, 0)], [step]))
    x = _x((11,))
    for step in (1, 3, 2, 20):
        (got,) = fd.execute([x, step])
        assert_all_match([got], [x[1::step]])
    with raises("slice", "strides must be positive", "got 0"):
        fd.execute([x, 0])


def test_slice_of_a_size_computed_window():
    """The last half of a dim: start = size // 2, computed from the input's size."""
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        half = fd.ops.div(fd.ops.size(t, 1), 2)
        fd.add_output(fd.ops.mul(fd.ops.slice(t, [0, half], [fd.ops.size(t, 0), fd.ops.size(t, 1)]), 2.0))
    for shape in [(3, 8), (2, 5), (4, 1), (3, 8)]:
        x = _x(shape)
        (got,) = fd.execute([x])
        assert_all_match([got], [x[:, shape[1] // 2:] * 2.0])


@pytest.mark.parametrize("runtime", [False, True], ids=["constant", "runtime"])
def test_manual_normalization_refuses_indices_that_are_not_normalized(runtime):
    """nvFuser trusts manually normalized indices (it would read out of bounds), so
    indices that are not normalized are an error, not a guess; in-range ones and an
    end past the extent of a slice from 0 (which nvFuser clamps) run."""
    def build(start, end):
        with FusionDefinition() as fd:
            t = _input(fd, 1)
            s = fd.define_scalar(DataType.Int) if runtime else start
            fd.add_output(fd.ops.slice(t, [s], [end], manual_normalization=True))
        return fd, ([start] if runtime else [])

    x = _x((6,))
    for start, end in [(1, 4), (0, 6), (0, 9), (6, 6)]:
        fd, scalars = build(start, end)
        (got,) = fd.execute([x, *scalars])
        assert_all_match([got], [x[start:end]])
    for start, end in [(-2, 6), (2, 9), (4, 3)]:
        fd, scalars = build(start, end)
        with raises("slice", "manual_normalization", f"start {start}, end {end}"):
            fd.execute([x, *scalars])


def test_slice_index_arguments_are_checked_at_definition():
    with FusionDefinition() as fd:
        t = _input(fd, 1)
        f = fd.define_scalar(DataType.Double)
        with raises("slice", "start_indices", "Int scalars", "DataType.Double", "index 0"):
            fd.ops.slice(t, [f], [3])
        with raises("slice", "end_indices", "2.5"):
            fd.ops.slice(t, [0], [2.5])
        with raises("slice", "strides", "tensor"):
            fd.ops.slice(t, [0], [3], [t])
        with raises("slice", "end_indices", "list of ints"):
            fd.ops.slice(t, [0], 3)


# --- pad ------------------------------------------------------------------------------------


def test_runtime_scalar_pad_widths():
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        lo, hi = fd.define_scalar(DataType.Int), fd.define_scalar(DataType.Int)
        fd.add_output(fd.ops.pad(t, [lo, hi, 1, lo], 0.5))
    x = _x((3, 5))
    for lo, hi in [(0, 0), (2, 1), (-1, 3), (1, -4), (3, 0)]:
        (got,) = fd.execute([x, lo, hi])
        assert_all_match([got], [F.pad(x, [lo, hi, 1, lo], value=0.5)])
    assert_round_trip(fd, [x, 1, 2])
    with raises("pad", "negative"):
        fd.execute([x, -3, -3])


def test_pad_widths_from_scalar_arithmetic():
    """int(2.5 * 7) on every side, as a constant expression of scalars."""
    with FusionDefinition() as fd:
        t = _input(fd, 3)
        w = fd.ops.cast(fd.ops.mul(fd.define_scalar(2.5, DataType.Float), fd.define_scalar(7)), DataType.Int)
        fd.add_output(fd.ops.pad(t, [w, w, w, w]))
    x = _x((1, 2, 3))
    (got,) = fd.execute([x])
    assert_all_match([got], [F.pad(x, [17, 17, 17, 17])])


def test_pad_width_arguments_are_checked_at_definition():
    with FusionDefinition() as fd:
        t = _input(fd, 1)
        with raises("pad", "pad_widths", "DataType.Bool", "index 0"):
            fd.ops.pad(t, [fd.define_scalar(DataType.Bool), 0])
        with raises("pad", "pad_widths", "got True"):
            fd.ops.pad(t, [fd.define_scalar(True), 0])


# --- reshape sizes from floating scalar arithmetic ----------------------------------------


def _reshape_by_quotient(fd):
    """[n, total / n]: the quotient is a Double scalar (reciprocal is a float op)."""
    n = fd.define_scalar(DataType.Int)
    t = _input(fd, 3)
    m = fd.ops.mul(fd.define_scalar(24), fd.ops.reciprocal(n))
    fd.add_output(fd.ops.sum(fd.ops.reshape(t, [n, m]), [1]))


def test_reshape_takes_a_whole_floating_scalar():
    with FusionDefinition() as fd:
        _reshape_by_quotient(fd)
    x = _x((2, 3, 4))
    for n in (4, 8, 2, 4):
        (got,) = fd.execute([n, x])
        assert_all_match([got], [x.reshape(n, -1).sum(1)])
    with raises("reshape", "new_shape", "2.4", "whole number"):
        fd.execute([10, x])


def test_floating_shape_entries_at_definition():
    """A floating scalar of whole value is a size (a constant one at once); a
    fractional one, or any floating entry of a Vector (which holds Int scalars), is
    refused."""
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        assert fd.ops.reshape(t, [fd.define_scalar(3.0), -1]).shape == (3, None)
        six = fd.ops.mul(fd.define_scalar(1.5), fd.define_scalar(4.0))
        fd.add_output(fd.ops.reshape(t, [six, -1]))
    x = _x((4, 3))
    (got,) = fd.execute([x])
    assert_all_match([got], [x.reshape(6, 2)])
    with FusionDefinition() as fd:
        t = _input(fd, 2)
        with raises("reshape", "new_shape", "2.5"):
            fd.ops.reshape(t, [fd.define_scalar(2.5), -1])
        with raises("define_vector", "values", "Int scalars", "Double"):
            fd.define_vector([fd.define_scalar(DataType.Double)])
        with raises("define_vector", "values", "2.0"):
            fd.define_vector([fd.define_scalar(2.0)])
