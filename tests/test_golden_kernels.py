"""Golden kernels: every bench case's generated kernels and launch parameters, as a
GPU would get them, compared with the files under tests/golden/.

``benchmarks/kernel_identity.py`` plans each case at its full size with the CUDA
heuristics on meta tensors (no GPU needed) and writes, per kernel step, the
scheduler, its parameters and each spill-check candidate's source.  The files are
the plan for an H200 (132 SMs, 60 MiB of L2): the test hides any local GPU so that
the heuristics read those numbers everywhere.

A change to the code generator or the heuristics that changes a kernel fails here
with the diff; when the change is meant, regenerate the files and review them in the
commit's diff:

    make golden        # CUDA_VISIBLE_DEVICES= PYTHONPATH=src python benchmarks/kernel_identity.py --out tests/golden
"""
from __future__ import annotations

import difflib
import importlib.util
import os
from unittest import mock

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
REGENERATE = "make golden  (or: CUDA_VISIBLE_DEVICES= PYTHONPATH=src python benchmarks/kernel_identity.py --out tests/golden)"


def _kernel_identity():
    bench = os.path.join(ROOT, "benchmarks")
    spec = importlib.util.spec_from_file_location("kernel_identity", os.path.join(bench, "kernel_identity.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cases():
    from pyfuser.bench.cases import select

    return [c for c in select("") if c.group != "host"]


CASES = {c.name: c for c in _cases()}


def test_every_case_has_a_golden_file_and_no_file_is_stale():
    files = {f[:-len(".txt")] for f in os.listdir(GOLDEN) if f.endswith(".txt")}
    assert files == set(CASES), (f"missing: {sorted(set(CASES) - files)}, stale: {sorted(files - set(CASES))}; "
                                 f"regenerate: {REGENERATE}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_kernels(name):
    ki = _kernel_identity()
    with mock.patch.object(torch.cuda, "is_available", return_value=False):
        got = ki.case_text(CASES[name])
    path = os.path.join(GOLDEN, f"{name}.txt")
    want = open(path).read() if os.path.exists(path) else ""
    if got != want:
        diff = difflib.unified_diff(want.splitlines(), got.splitlines(), f"tests/golden/{name}.txt", "generated",
                                    lineterm="", n=2)
        lines = list(diff)
        shown = "\n".join(lines[:80]) + (f"\n... ({len(lines) - 80} more diff lines)" if len(lines) > 80 else "")
        pytest.fail(f"{name}: the generated kernels differ from tests/golden/{name}.txt.\n{shown}\n"
                    f"If the change is meant, regenerate and review the diff: {REGENERATE}", pytrace=False)
