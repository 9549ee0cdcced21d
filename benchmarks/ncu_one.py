"""Run one bench case's pyfuser kernels a few times (for a profiler such as Nsight
Compute to attach to): python benchmarks/ncu_one.py CASE [REPEATS]."""
import sys

import torch

from pyfuser import FusionDefinition
from pyfuser.bench import cases

c = cases.BY_NAME[sys.argv[1]]
sizes = c.sizes(1.0)
with FusionDefinition() as fd:
    c.build(fd, sizes)
inputs = list(c.make_inputs(sizes, "cuda", None))
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    fd.execute(inputs)
torch.cuda.synchronize()
