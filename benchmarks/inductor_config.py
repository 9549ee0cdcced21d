"""The configuration torch.compile's autotuner settles on for each Triton kernel of
bench cases (block sizes, warps, stages), to compare with pyfuser's plan.

    PYTHONPATH=src python benchmarks/inductor_config.py CASE [CASE ...]
"""
from __future__ import annotations

import sys

from torch._inductor.runtime import triton_heuristics as TH

from inductor_kernel import compiled


def main():
    seen = {}
    real = TH.CachingAutotuner.run

    def run(self, *args, **kw):
        out = real(self, *args, **kw)
        if len(self.launchers) == 1:
            seen[self.fn.__name__] = self.launchers[0].config
        return out

    TH.CachingAutotuner.run = run
    for name in sys.argv[1:]:
        seen.clear()
        compiled(name, calls=3)  # the autotuner benchmarks its configs on the first calls
        for kname, cfg in seen.items():
            print(f"{name}: {kname}: {cfg}")


if __name__ == "__main__":
    main()
