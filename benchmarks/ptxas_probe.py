"""Which ptxas compiles pyfuser's kernels, before and after torch.compile has run in
the process, and what the spill check chose for log_softmax_full each time.

    PYTHONPATH=src python benchmarks/ptxas_probe.py
"""
from __future__ import annotations

import os

import torch


def ptxas_now():
    from triton.backends.nvidia.compiler import get_ptxas
    p = get_ptxas(90)
    return f"TRITON_PTXAS_PATH={os.environ.get('TRITON_PTXAS_PATH')!r} -> {p.path} ({p.version})"


def full_choice(tag):
    from pyfuser.bench import cases
    c = cases.BY_NAME["log_softmax_full"]
    sizes = c.sizes(1.0)
    fd = c.define(sizes)
    inputs = c.make_inputs(sizes, "cuda", torch.Generator(device="cuda").manual_seed(0))
    fd.execute(inputs)
    rt = fd._runtime
    print(tag, "events:", *rt.events[-6:], sep="\n  ")
    print(tag, "kernels:", [key[3] for key in rt.kernels])


def main():
    print("before torch.compile:", ptxas_now())
    full_choice("before")
    f = torch.compile(lambda x: torch.softmax(x.float(), -1).half())
    f(torch.randn(64, 1000, device="cuda", dtype=torch.float16))
    print("after torch.compile:", ptxas_now())
    full_choice("after")


if __name__ == "__main__":
    main()
