"""Settings for the torch.compile backend tests.

Each test starts from a fresh Dynamo (no compiled frames carried over) and fresh
backend counters, warnings and translation cache, so counts and warnings are the
test's own.  A ``FallbackWarning`` is an error unless the test expects one (with
``pytest.warns``): a region silently running in ATen would hide a bug.  Everything
runs on CPU: the fused kernels go through Triton's interpreter, so shapes are tiny.
"""
import warnings

import pytest
import torch

import pyfuser.dynamo as pd


@pytest.fixture(autouse=True)
def _fresh_backend():
    torch._dynamo.reset()
    pd.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.FallbackWarning)
        yield
    torch._dynamo.reset()
