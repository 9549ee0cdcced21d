"""benchmarks/prefetch_probe.py's hand-written kernels are right: run on CPU through
Triton's interpreter on random rows (one of them -inf but for one element), outputs
poisoned first.  Its timings are the GPU's; this keeps the kernels they time honest.

The kernels call Triton's standard library (``tl.max``, ``tl.sum``), which the
interpreter runs only when TRITON_INTERPRET is set before Triton is imported, so
the check runs in a fresh interpreter process.  ``RECONVERT`` widens through inline
PTX, which the interpreter cannot run: its register claim is checked by an offline
sm_90 compile instead."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import torch

from pyfuser.runtime.spills import offline_usage

from ..codegen.common import need_ptxas

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHECK = r'''
import sys
import torch
sys.path.insert(0, "benchmarks")
import prefetch_probe as P

g = torch.Generator().manual_seed(1)
R, J = 5, 45
x = (torch.randn(R, J, generator=g) * 4).half()
x[1] = float("-inf")
x[1, 3] = 2.0
ref = torch.log_softmax(x.float(), -1)


def check(name, launch, two):
    y16 = torch.full((R, J), float("nan"), dtype=torch.float16)
    y32 = torch.full((R, J), float("nan"))
    launch(y16, y32)
    torch.testing.assert_close(y32, ref, rtol=0, atol=1e-2 if two else 1e-5, msg=name)
    if two:
        torch.testing.assert_close(y16.float(), ref, rtol=0, atol=1e-2, msg=name)
        assert torch.equal(y32, y16.float()), name  # the fp32 output is the fp16 one widened
    print("ok", name)


for two in (True, False):
    for prefetch in (True, False):  # 2 programs over 5 rows: the last prefetch runs past the end
        for reload in (True, False):
            check(f"rows two={two} prefetch={prefetch} reload={reload}", lambda a, b: P.log_softmax_rows[(2,)](
                x, a, b, R, J, BLOCK_J=64, ALIGN=8, TWO=two, PREFETCH=prefetch, RELOAD=reload), two)
    check(f"online two={two}", lambda a, b: P.log_softmax_online_rows[(R,)](
        x, a, b, R, J, BLOCK_J=64, ALIGN=8, TWO=two, GROUP=8), two)
n = x.numel()
y16, y32 = torch.empty(n, dtype=torch.float16), torch.full((n,), float("nan"))
P.cast_copy[(-(-n // 16),)](x, y16, y32, n, BLOCK=16, TWO=True)
assert torch.equal(y16, x.flatten()) and torch.equal(y32, x.flatten().float())
print("ok cast_copy")
'''


def test_probe_kernels_match_torch_in_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("ok ") == 11, run.stdout


def test_reconverting_prefetch_fits_its_registers_on_sm90():
    """The docstring's claim: log_softmax_sub's prefetching kernel on 16 warps spills
    nothing once each pass converts the fp16 row for itself (it spilled 39 registers
    holding the row as fp32)."""
    need_ptxas()
    spec = importlib.util.spec_from_file_location("prefetch_probe", os.path.join(ROOT, "benchmarks", "prefetch_probe.py"))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    x = torch.empty(8192, 30522, dtype=torch.float16, device="meta")
    y16, y32 = torch.empty_like(x), torch.empty(8192, 30522, device="meta")
    usage = offline_usage(probe.log_softmax_rows, [x, y16, y32, 8192, 30522],
                          dict(BLOCK_J=32768, ALIGN=8, TWO=False, PREFETCH=True, RECONVERT=True, num_warps=16))
    assert usage.spills == 0 and usage.regs <= 128
