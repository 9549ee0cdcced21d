"""torch.compile's kernels for bench cases, as Inductor generated them: each Triton
kernel's decorator (size hints, the configurations it autotunes among) and body, and
the launch it chose (how Inductor tiles a fusion pyfuser is compared against).

    PYTHONPATH=src python benchmarks/inductor_kernel.py CASE [CASE ...]
"""
from __future__ import annotations

import re
import sys

import torch
from torch._inductor.graph import GraphLowering

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


def main():
    codes = []
    GraphLowering.save_output_code = codes.append
    for name in sys.argv[1:]:
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


if __name__ == "__main__":
    main()
