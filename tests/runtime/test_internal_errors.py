"""A failure inside pyfuser's planning is an ``InternalError`` that says what was being
planned, never a bare IndexError from deep in the analysis."""
import warnings

import pytest
import torch

from pyfuser import DataType, FusionDefinition, InternalError, PyfuserError


def _int_pow_of_a_summed_min():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int32)
        b = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Int32)
        fd.add_output(fd.ops.pow(a, fd.ops.sum(fd.ops.min(b, dims=[1], keepdim=True), dims=[0, 1])))
    return fd


def test_steps_that_nothing_reads_are_not_merged():
    """The int pow runs as torch ops from the fusion's inputs, so the min and the sum
    kernels before it store nothing anyone reads; merging them offered the
    schedulers an empty group (IndexError in the analysis)."""
    fd = _int_pow_of_a_summed_min()
    a = torch.tensor([1, 2, 3, -2, 5], dtype=torch.int32)
    b = torch.tensor([[1], [0], [2]], dtype=torch.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pow's eager fallback, warned once per process
        got = fd.execute([a, b])[0]
    assert torch.equal(got, torch.pow(a, b.min(1, keepdim=True)[0].sum()))


def test_a_failure_in_planning_is_an_internal_error_naming_the_step(monkeypatch):
    from pyfuser.schedulers import pointwise

    def broken(seg):
        return [][0]

    monkeypatch.setattr(pointwise, "can_schedule", broken)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(t))
    with pytest.raises(InternalError, match=r"scheduling the step of fusion \d+ that computes T1=exp.*IndexError") as err:
        fd.execute([torch.randn(4)])
    assert isinstance(err.value, PyfuserError) and isinstance(err.value.__cause__, IndexError)
