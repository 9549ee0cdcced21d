"""Repro scripts: a standalone Python file that rebuilds a fusion and its inputs.

``fd.repro_script(inputs)`` returns the text; when building or launching a kernel
fails, ``execute`` writes one under ``PYFUSER_REPRO_DIR`` (default: ``repro/`` in the
kernel cache directory) and the ``CompileError`` it raises names the file.  The
script holds the definition (``repr(fd)``), each input's dtype, sizes, strides and
alignment (the values are fresh random numbers: the bug is in the shapes, not the
data, for a code generator), the execute call, and ``fd.validate`` against the
reference executor.  Parameter overrides in force are replayed.
"""
from __future__ import annotations

import hashlib
import os

import torch

from ..errors import CompileError
from ..ir.shapes import contiguous_strides
from ..schedulers.base import current_choices
from ..settings import read
from .cache import cache_dir, private_dir, write_file

HEADER = '''"""pyfuser repro: fusion {fid}.

Run: python {{this file}} [device]   (default device: {device})
Rebuilds the fusion and inputs of the same dtypes, sizes, strides and alignment,
executes it, and checks the outputs against the reference executor.
"""
'''

HELPERS = '''

def make_input(dtype, sizes, strides=None, storage_offset=0):
    """Random values of the recorded layout: randn for floats, randint for ints, rand > 0.5 for bools."""
    if strides is None:
        strides, acc = [], 1
        for s in reversed(sizes):
            strides.insert(0, acc)
            acc *= max(s, 1)
    n = storage_offset + (1 + sum((s - 1) * st for s, st in zip(sizes, strides)) if all(sizes) else 0)
    if dtype == torch.bool:
        flat = torch.rand(n, device=DEVICE) > 0.5
    elif dtype.is_floating_point:
        flat = torch.randn(n, device=DEVICE).to(dtype)
    else:
        flat = torch.randint(-100, 100, (n,), device=DEVICE).to(dtype)
    return flat.as_strided(sizes, strides, storage_offset)
'''


def repro_dir() -> str:
    named = read("repro_dir")
    return private_dir(named, "PYFUSER_REPRO_DIR") if named else private_dir(os.path.join(cache_dir(), "repro"),
                                                                             "the repro directory")


def input_expr(v, x) -> str:
    if not isinstance(x, torch.Tensor):
        return f"{x!r},  # {v.name}, scalar input"
    sizes, strides = list(x.shape), list(x.stride())
    args = [str(x.dtype), repr(sizes)]
    misaligned = (x.data_ptr() % 16) // x.element_size() if x.numel() else 0
    if tuple(strides) != contiguous_strides(sizes) or misaligned:
        args.append(repr(strides))
    if misaligned:
        args.append(f"storage_offset={misaligned}")
    return f"make_input({', '.join(args)}),  # {v.name}"


def _device_of(fd, inputs, device) -> str:
    if device is not None:
        return str(torch.device(device))
    for x in inputs:
        if isinstance(x, torch.Tensor):
            return str(x.device)
    return "cpu"


def repro_script(fd, inputs, device=None, error: BaseException | None = None) -> str:
    inputs = list(inputs)
    dev = _device_of(fd, inputs, device)
    lines = [HEADER.format(fid=fd.id, device=dev).rstrip("\n")]
    if error is not None:
        lines.append("# It failed with:")
        lines += [f"#   {line}" for line in f"{type(error).__name__}: {error}".splitlines()]
    lines += ["import sys", "", "import torch", "", "from pyfuser import DataType, FusionDefinition", "", "",
              repr(fd).rstrip("\n"), "", "", "with FusionDefinition() as fd:", "    nvfuser_fusion(fd)", "",
              f"DEVICE = sys.argv[1] if len(sys.argv) > 1 else {dev!r}"]
    lines.append(HELPERS.rstrip("\n"))
    lines += ["", "", "torch.manual_seed(0)", "inputs = ["]
    lines += [f"    {input_expr(v, x)}" for v, x in zip(fd.ir.inputs, inputs)]
    lines.append("]")
    run = ["outputs = fd.execute(inputs)", "fd.validate(inputs)"]
    if current_choices():
        lines += ["", "from pyfuser.schedulers import Choices", "",
                  f"with {current_choices()!r}:"] + [f"    {r}" for r in run]
    else:
        lines += run
    lines.append('print("repro: fusion ran and matches the reference executor")')
    return "\n".join(lines) + "\n"


def write_repro(fd, script: str) -> str:
    digest = hashlib.sha1(script.encode()).hexdigest()[:10]
    return write_file(repro_dir(), f"repro_fusion{fd.id}_{digest}.py", script.encode(), prune=False)


def with_repro(fd, inputs, device, err: CompileError) -> CompileError:
    """``err`` with a repro script written and its path in the message (``.repro_path``)."""
    if getattr(err, "repro_path", None):
        return err
    try:
        path = write_repro(fd, repro_script(fd, inputs, device, error=err))
        where = f"repro script written to {path}"
    except Exception as werr:  # noqa: BLE001 - the original error matters more
        path, where = None, f"(writing a repro script failed: {type(werr).__name__}: {werr})"
    new = CompileError(f"{err}\n{where}")
    new.repro_path = path
    return new


__all__ = ["repro_script", "write_repro", "with_repro", "repro_dir"]


# -- nvFuser's repro_script_for ---------------------------------------------------------
NVFUSER_PREAMBLE = '''# nvFuser's repro script: it imports nvfuser_direct; where that is not installed, pyfuser runs it.
import importlib.util
import sys
if importlib.util.find_spec("nvfuser_direct") is None:
    import pyfuser
    sys.modules["nvfuser_direct"] = pyfuser
'''


class SavedInput:
    """What ``execute(inputs, save_repro_inputs=True)`` keeps of a tensor input: its
    layout, dtype and device, not its values (nvFuser keeps fake tensors)."""

    def __init__(self, x: torch.Tensor):
        self.shape, self.strides, self.dtype = tuple(x.shape), tuple(x.stride()), x.dtype
        self.device, self.contiguous = x.device, x.is_contiguous()


def saved_inputs(inputs) -> list:
    return [SavedInput(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def _nvfuser_input(x) -> str:
    if isinstance(x, torch.Tensor):
        x = SavedInput(x)
    if not isinstance(x, SavedInput):
        text = str(x)
        return text.replace("inf", 'float("inf")').replace("nan", 'float("nan")')
    if x.contiguous:
        return f"torch.testing.make_tensor({x.shape}, dtype={x.dtype}, device='{x.device}')"
    n = 0 if 0 in x.shape else 1 + sum((s - 1) * st for s, st in zip(x.shape, x.strides))
    if x.dtype.is_floating_point:
        values = f"torch.randn({n}, dtype={x.dtype}, device='{x.device}')"
    else:
        values = f"torch.randint(0, {2 if x.dtype == torch.bool else 10}, ({n},), dtype={x.dtype}, device='{x.device}')"
    return f"{values}.as_strided({x.shape}, {x.strides})"


def nvfuser_repro_script(fd, inputs=None) -> str:
    """nvFuser's ``fd.repro_script_for(inputs)``: the devices and versions as comments,
    the definition, and with ``inputs`` tensors of their layouts and the execute call."""
    lines = ["# CUDA devices:"]
    if torch.cuda.is_available():
        lines += [f"#  {i}: {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    lines += [f"# torch version: {torch.__version__}", f"# cuda version: {torch.version.cuda}"]
    text = "\n".join(lines) + "\n" + NVFUSER_PREAMBLE + "import torch\nfrom nvfuser_direct import FusionDefinition, DataType\n"
    text += repr(fd) + "with FusionDefinition() as fd:\n    nvfuser_fusion(fd)\n"
    if inputs is not None:
        text += "\ninputs = [\n" + "".join(f"    {_nvfuser_input(x)},\n" for x in inputs) + "]\nfd.execute(inputs)\n"
    return text
