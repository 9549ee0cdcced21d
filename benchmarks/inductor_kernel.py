"""torch.compile's kernels for bench cases, as Inductor generated them: each Triton
kernel's decorator (size hints, the configurations it autotunes among) and body, and
the launch it chose (how Inductor tiles a fusion pyfuser is compared against); with
``--config``, the configuration its autotuner settled on per kernel instead (block
sizes, warps, stages).

    PYTHONPATH=src python benchmarks/inductor_kernel.py CASE [CASE ...]
    PYTHONPATH=src python benchmarks/inductor_kernel.py --config CASE [CASE ...]
"""
from __future__ import annotations

import argparse
import re
import sys

import torch
from torch._inductor.graph import GraphLowering
from torch._inductor.runtime import triton_heuristics as TH

from pyfuser.bench import cases


def compiled(name: str, calls: int = 1):
    """Bench case ``name``'s eager code through a fresh ``torch.compile``, called
    ``calls`` times on the case's inputs; (case, sizes) back."""
    c = cases.BY_NAME[name]
    sizes = c.sizes(1.0)
    inputs = list(c.make_inputs(sizes, "cuda", None))
    torch._dynamo.reset()
    fn = torch.compile(lambda *t: c.eager(t, sizes))
    for _ in range(calls):
        fn(*inputs)
    torch.cuda.synchronize()
    return c, sizes


def print_kernels(names):
    codes = []
    GraphLowering.save_output_code = codes.append
    for name in names:
        codes.clear()
        c, sizes = compiled(name)
        print(f"===== {name} {c.describe(sizes)}")
        for code in codes:
            for m in re.finditer(r"(@triton_heuristics[\s\S]*?)'''", code):
                print(m.group(1).strip())
                print("-----")
            for line in code.splitlines():
                if ".run(" in line:
                    print("launch:", line.strip())


def print_configs(names):
    seen = {}
    real = TH.CachingAutotuner.run

    def run(self, *args, **kw):
        out = real(self, *args, **kw)
        if len(self.launchers) == 1:
            seen[self.fn.__name__] = self.launchers[0].config
        return out

    TH.CachingAutotuner.run = run
    for name in names:
        seen.clear()
        compiled(name, calls=3)  # the autotuner benchmarks its configs on the first calls
        for kname, cfg in seen.items():
            print(f"{name}: {kname}: {cfg}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="+", help="bench case names")
    p.add_argument("--config", action="store_true", help="the autotuner's chosen configuration per kernel")
    args = p.parse_args(argv)
    (print_configs if args.config else print_kernels)(args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
