"""Suite-wide settings: hypothesis profiles and the gpu marker.

Every test runs ``fd.execute``; on a machine without CUDA that means CPU tensors,
which the runtime runs through Triton's interpreter, so shapes stay small and
hypothesis runs few examples with no deadline.
"""
import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=20, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
