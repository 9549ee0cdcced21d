"""The backend's stages time themselves (``runtime/phases.py``): a tiny model's first
training step records them, its second step none of them."""
import pytest
import torch
from torch import nn

import pyfuser.dynamo as pd

from pyfuser.runtime.phases import recording

BACKEND = ("tracing", "rewrites", "partitioning", "translation")
RUNTIME = ("planning", "scheduling", "prepare", "codegen", "module_load", "first_launch")


def _mlp(device="cpu"):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)).to(device)


def test_first_step_records_the_backend_and_runtime_phases_and_the_next_none():
    compiled = torch.compile(_mlp(), backend="pyfuser")
    x = torch.randn(3, 8)

    def step():
        compiled(x).square().sum().backward()

    with recording() as first:
        step()
    for name in BACKEND + RUNTIME:
        assert first.counts[name] >= 1, name
    # forward and backward each rewritten at the "aten" and "partitioned" stages, the joint graph once
    assert first.counts["rewrites"] == 5
    assert first.counts["partitioning"] == 2
    assert first.counts["translation"] == first.counts["planning"] >= 2
    assert first.attributed <= first.wall
    with recording() as second:
        step()
    assert not any(second.counts.values()), {k: v for k, v in second.counts.items() if v}


@pytest.mark.gpu
def test_cuda_graph_captures_are_recorded_on_the_gpu():
    compiled = torch.compile(_mlp("cuda"), backend="pyfuser")
    x = torch.randn(3, 8, device="cuda")
    with recording() as steps:
        for _ in range(3):  # two ordinary calls (graphs.WARMUP_CALLS), then the recording
            compiled(x).square().sum().backward()
        torch.cuda.synchronize()
    captures = pd.stats().get("graph_captures", 0) + pd.stats().get("graph_capture_failures", 0)
    assert steps.counts["graph_capture"] == captures >= 1
    assert steps.counts["spill_check"] >= 1 and steps.counts["triton_compile"] >= 1
