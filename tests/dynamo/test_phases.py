"""The backend's stages time themselves (``runtime/phases.py``): a tiny model's first
training step records them, its second step none of them."""
import torch
from torch import nn

from pyfuser.runtime.phases import recording

BACKEND = ("tracing", "rewrites", "partitioning", "translation")
RUNTIME = ("planning", "scheduling", "prepare", "codegen", "module_load", "first_launch")


def test_first_step_records_the_backend_and_runtime_phases_and_the_next_none():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    compiled = torch.compile(model, backend="pyfuser")
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
