"""``PYFUSER_DUMP=name,name``: debug output on stdout, nvFuser style.

The variable is read once per ``execute`` (tests and users flip it at run time) and
parsed once per distinct value; an unknown name is an error listing the valid ones,
so a typo never silently dumps nothing.  What each name prints, and when:

* ``python_definition``  ``repr(fd)``, the runnable definition, on a fusion's first dumped execute;
* ``fusion_args``        dtype, sizes, strides, pointer and device of every input and output;
* ``segmented_fusion``   the segments (ops, inputs, outputs) when a new plan is made;
* ``scheduler_params``   per segment the chosen scheduler, its params, why the others declined,
                         whenever heuristics run (a new plan or new input sizes);
* ``launch_params``      grid, num_warps, num_stages and block sizes before every launch;
* ``kernel_code``        the generated Triton source when a kernel is built;
* ``ptx``                the PTX of each compiled kernel (CUDA; a one-line note on CPU);
* ``kernel_time``        ``kernel<N> run in <ms> ms, achieved: <GB/s> GB/s`` after every launch
                         (CUDA, synchronizing; a note with the interpreter's wall time on CPU);
* ``cache``              per execute: hit or miss, and for each miss why (new signature, new params).

This module only formats; ``runtime.probe`` decides when.
"""
from __future__ import annotations

import sys

import torch

from ..ir.analysis import live_exprs_for
from ..ir.values import ScalarVal
from ..settings import DUMP_NAMES, ENV_DATA, OVERRIDES, from_env, getenv, read

VALID = DUMP_NAMES
_ENV_DATA = ENV_DATA  # executor's fast check reads it


def enabled_dumps() -> frozenset:
    """The dump names in force (``PYFUSER_DUMP``, or an override: ``pyfuser.config``)."""
    if OVERRIDES:
        return read("dump")
    raw = getenv("PYFUSER_DUMP")
    names = _parsed.get(raw)
    if names is None:
        names = _parsed[raw] = from_env("dump")
    return names


_parsed: dict = {}


def dumping(name: str) -> bool:
    assert name in VALID, name
    return name in enabled_dumps()


def emit(text: str):
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


# -- fusion_args ------------------------------------------------------------------------

CPP_DTYPES = {torch.float16: "__half", torch.bfloat16: "__bfloat", torch.float32: "float", torch.float64: "double",
              torch.int64: "int64_t", torch.int32: "int", torch.int16: "int16_t", torch.int8: "int8_t",
              torch.uint8: "uint8_t", torch.bool: "bool", torch.complex64: "std::complex<float>",
              torch.complex128: "std::complex<double>"}


def cpp_dtype(dtype: torch.dtype) -> str:
    return CPP_DTYPES.get(dtype, str(dtype).replace("torch.", ""))


def tensor_line(x: torch.Tensor) -> str:
    """The report's line, with the device added at the end."""
    sizes = "".join(f"{s}, " for s in x.shape)
    strides = "".join(f"{s}, " for s in x.stride())
    return (f"tensor dtype: {cpp_dtype(x.dtype)} sizes: ({sizes}) stride: ({strides}) "
            f"pointer: {x.data_ptr():#x} device: {x.device}")


def fusion_args(fusion_id: int, ir_inputs, inputs, outputs) -> str:
    lines = [f"Arguments for fusion{fusion_id}:", "Inputs:"]
    for v, x in zip(ir_inputs, inputs):
        if isinstance(x, torch.Tensor):
            lines.append(tensor_line(x))
        else:
            lines.append(f"scalar dtype: {cpp_dtype(v.dtype.torch)} value: {x!r}")
    lines.append("Outputs:")
    lines += [tensor_line(o) for o in outputs]
    return "\n".join(lines)


# -- segmented_fusion and scheduler_params ------------------------------------------------

def _typed(v, shapes) -> str:
    if isinstance(v, ScalarVal):
        return f"{v.name}={v.value!r}" if v.is_constant else f"{v.name} (scalar input)"
    return f"{v.name} {cpp_dtype(v.dtype.torch)}{list(shapes.get(v, v.shape))}"


def _operand(v) -> str:
    if isinstance(v, ScalarVal) and v.is_constant:
        return repr(v.value)
    return v.name


def segment_lines(step, shapes, ir_inputs) -> list[str]:
    sub = getattr(step, "sub", None)
    host = getattr(step, "host", None)
    if host is not None:
        exprs = list(host)
    elif sub is not None:
        exprs = live_exprs_for(sub.ir.outputs)
        shapes = {**shapes, **{c: shapes[o] for c, o in sub.orig.items() if o in shapes}}
        ir_inputs = sub.ir.inputs
    else:
        exprs = live_exprs_for(step.outputs)
    made = {id(o) for e in exprs for o in e.outputs}
    inputs = []
    for e in exprs:
        for v in e.inputs:
            if id(v) not in made and (host is not None or v in ir_inputs) and v not in inputs \
                    and (host is None or not _is_scalar(v)):
                inputs.append(v)
    lines = [f"    inputs: {', '.join(_typed(v, shapes) for v in inputs) or 'none'}",
             f"    outputs: {', '.join(_typed(o, shapes) for o in step.outputs)}",
             f"    ops ({len(exprs)}):"]
    for e in exprs:
        outs = ", ".join(o.name for o in e.outputs)
        call = getattr(e, "spelling", None) or ", ".join(_operand(v) for v in e.inputs)
        lines.append(f"      {outs} = {e.op}({call})  # {', '.join(_typed(o, shapes) for o in e.outputs)}")
    return lines


def _is_scalar(v) -> bool:
    return not hasattr(v, "shape")


def segmented_fusion(fusion_id: int, plan, ir, shapes) -> str:
    lines = [f"Segmented fusion{fusion_id}: {len(plan.steps)} segment(s)"]
    for pos, kind in sorted(plan.aliases.items()):
        what = {"input": "an input", "view": "a view of an input",
                "expand": "an expand (stride 0) of a smaller value"}[kind]
        lines.append(f"  output {pos} ({ir.outputs[pos].name}): {what}, no kernel")
    for i, s in enumerate(plan.steps):
        name = s.scheduler.NAME if s.scheduler else (
            "host (torch ops)" if getattr(s, "host", None) is not None else "host (reference torch ops)")
        lines.append(f"  segment {i}: {name}")
        lines += segment_lines(s, shapes, ir.inputs)
    return "\n".join(lines)


def scheduler_params(fusion_id: int, explanation) -> str:
    """A ``plan.Explanation`` (``fd.explain``) of fusion ``fusion_id``: per segment the chosen scheduler, its
    params, and each other scheduler's verdict in priority order."""
    lines = [f"Scheduler params for fusion{fusion_id}:"]
    for seg in explanation.segments:
        outs = ", ".join(o.name for o in seg.outputs)
        if seg.scheduler is not None:
            chosen = seg.scheduler
        elif seg.host.startswith("host op"):
            chosen = "host (torch ops)"
        else:
            chosen = "host (reference torch ops): no scheduler accepted"
        lines.append(f"  segment {seg.index} (outputs {outs}): {chosen}")
        if seg.params is not None:
            lines.append(f"    params: {seg.params!r}")
        if seg.host.startswith("host op"):
            continue
        for name, rej in seg.verdicts:
            if rej is not None:
                lines.append(f"    {name}: declined: {rej}")
            else:
                lines.append(f"    {name}: accepts too, but {seg.scheduler} comes first in the priority order")
        for params, rej in seg.spills:
            lines.append(f"    {rej.scheduler}: {params!r} rejected by the spill check: {rej}")
    return "\n".join(lines)


# -- launch_params, kernel_time, ptx -----------------------------------------------------

# A launch's keywords that are Triton compile options, not the kernel's constexprs.
COMPILE_OPTIONS = ("num_warps", "num_stages", "enable_reflect_ftz")


def launch_params(number: int, name: str, scheduler: str, grid, kw: dict, device_type: str) -> str:
    g = tuple(grid) + (1,) * (3 - len(grid))
    parts = [f"grid = {g}"]
    if device_type == "cuda":
        parts += [f"num_warps = {kw.get('num_warps', 4)}", f"num_stages = {kw.get('num_stages', 3)}"]
    parts += [f"{k} = {v}" for k, v in kw.items() if k not in COMPILE_OPTIONS]
    line = f"Launch Parameters: kernel{number} ({name}, {scheduler}): {', '.join(parts)}"
    if device_type != "cuda":
        line += " (CPU: Triton interpreter, one program at a time; num_warps/num_stages do not apply)"
    return line


def kernel_time(number: int, ms: float, gbps: float, regs, spills, name: str) -> str:
    return (f"kernel{number} run in {ms:.6f} ms, achieved: {gbps:.3f} GB/s"
            f"  [{name}: registers {regs}, spills {spills}]")


def kernel_time_cpu(number: int, name: str, wall_ms: float) -> str:
    return (f"kernel{number} ({name}): kernel_time needs a CUDA device; on CPU the kernel ran in Triton's "
            f"interpreter (wall time {wall_ms:.3f} ms, not a GPU time)")


def ptx_cpu(name: str) -> str:
    return f"ptx: {name} runs on CPU under Triton's interpreter; PTX needs a CUDA device"
