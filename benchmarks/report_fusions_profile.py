"""The report's two fusions at full size with PYFUSER_DUMP=kernel_time and the profiler.

    PYTHONPATH=src python benchmarks/report_fusions_profile.py
"""
from __future__ import annotations

import os

os.environ.setdefault("PYFUSER_DUMP", "kernel_time")

import torch  # noqa: E402

from pyfuser import FusionDefinition  # noqa: E402
from pyfuser.bench.seeds import SEEDS  # noqa: E402

for name in ("bert_softmax_dropout", "log_softmax_full"):
    case = SEEDS[name]
    with FusionDefinition() as fd:
        case.build(fd, *case.full_sizes)
    inputs = case.make_inputs(case.full_sizes, "cuda")
    print(f"== {name}: first execute (compiles)")
    fd.execute(inputs)
    print(f"== {name}: cached execute")
    fd.execute(inputs, profile=True)
    torch.cuda.synchronize()
    print(fd.profile())
