"""An int64 division's zero-divisor select must reach the GPU code.  Division by zero is
undefined to LLVM, so a select on ``y == 0`` made *after* ``x // y`` is folded away
(LLVM concludes y != 0); ``op_emit.int_divide`` replaces the divisor first.  Compiled
offline for sm_90: the select of CUDA's 0xFFFFFFFF survives in the PTX."""
from __future__ import annotations

import importlib.util
import re

import pytest
import torch

from pyfuser.ir import op_emit

from .common import need_ptxas


class _Builder:
    """The statement builder's part ``int_divide`` uses."""

    cdtype = "tl.int64"

    def __init__(self):
        self.lines = []

    def tmp(self, expr):
        name = f"v{len(self.lines)}"
        self.lines.append(f"    {name} = {expr}")
        return name


def _kernel(path, sym):
    b = _Builder()
    out = op_emit.int_divide(b, "x", "y", sym)
    body = "\n".join(b.lines)
    path.write_text(f"""import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, o_ptr):
    i = tl.arange(0, 128)
    x = tl.load(x_ptr + i)
    y = tl.load(y_ptr + i)
{body}
    tl.store(o_ptr + i, {out})
""")
    spec = importlib.util.spec_from_file_location(f"int64_div_{sym == '%'}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


@pytest.mark.parametrize("sym", ["//", "%"])
def test_zero_divisor_select_survives_llvm(tmp_path, sym):
    from pyfuser.compat import compile_offline

    need_ptxas()
    fn = _kernel(tmp_path / "k.py", sym)
    x = torch.empty(128, dtype=torch.int64, device="meta")
    ptx = compile_offline(fn, (x, x, x), {"num_warps": 4}, 90).asm["ptx"]
    assert re.search(r"selp\.b64\s+%rd\d+, 4294967295,", ptx), ptx
