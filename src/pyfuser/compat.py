"""Every private torch and Triton API pyfuser relies on, behind small named accessors.

Private APIs change between releases without notice, so each one is reached from
here only: a new torch or Triton is checked against this list, not against the
whole package.  Each accessor either has a public fallback (slower, same results)
or raises ``ToolchainError`` naming the API and the versions it was checked on;
callers that treat the API as an optimization catch that and take the public path.

Checked on: triton 3.6, torch 2.11-2.13 (``CHECKED``).

Accessor: the API behind it; its users; what runs where it is missing.

- ``fast_empty_strided``: ``torch._C._dynamo.guards._empty_strided_{cpu,cuda}``;
  runtime/launch.py, runtime/straight.py; ``torch.empty_strided``.
- ``current_cuda_device``: ``torch._C._cuda_getDevice``; runtime/launch.py;
  ``torch.cuda.current_device``.
- ``compile_for``: ``JITFunction.run(..., warmup=True)``; runtime/launch.py; ``fn[grid]``.
- ``needs_scratch``, ``raw_launcher``: ``CompiledKernel.run`` (the C launcher: ``launch``,
  ``launch_cooperative_grid``, ``launch_pdl``, ``global_scratch_size``,
  ``profile_scratch_size``), ``CompiledKernel.function`` and ``.packed_metadata``,
  ``torch._C._cuda_getCurrentRawStream``; runtime/launch.py; Triton's runner.
- ``hook_set``: ``triton.knobs.runtime.launch_enter_hook``/``launch_exit_hook``
  (``HookChain.calls``); runtime/launch.py through ``raw_launcher``; none needed.
- ``newest_compiled``: ``JITFunction.device_caches``, ``triton.runtime.driver.active``;
  runtime/probe.py; None (the dumps say no kernel was found).
- ``registers``: ``CompiledKernel.n_regs``, ``.n_spills``; runtime/probe.py; None.
- ``torch_ptxas_path``: torch's bundled ``torch/bin/ptxas``; runtime/toolchain.py; a path only.
- ``register_torch_logs``, ``artifact_logger``: ``torch._logging._internal`` (``register_log``,
  ``register_artifact``, ``getArtifactLogger``, ``log_registry``); dynamo/logs.py; plain
  ``logging`` loggers (``TORCH_LOGS`` does not name pyfuser's; ``logging`` still does).
- ``compile_id``: ``torch._guards.CompileContext.current_compile_id``; dynamo/logs.py; None.

Still reached directly, to move here (their modules are kept as they are for now):

- runtime/spills.py: ``CompiledKernel._init_handles``, ``.n_regs``, ``.n_spills``;
  ``triton.knobs.compilation``/``knobs.nvidia``; ``triton.backends.nvidia.compiler``
  (``get_ptxas``, ``sm_arch_from_capability``); ``triton.backends.compiler.GPUTarget``;
  ``triton.compiler`` (``ASTSource``, ``compile``, ``make_backend``);
  ``triton.runtime.jit.create_function_from_signature``.
- runtime/interpreter.py: ``triton.runtime.interpreter`` (``TensorHandle``,
  ``InterpretedFunction``, ``InterpreterBuilder``, ``ReduceOps.apply_impl``).
- dynamo/: ``torch._dynamo.backends`` (``registry``, ``common.aot_autograd``),
  ``torch._functorch`` (``partitioners``, ``config``, ``compile_utils.fx_graph_cse``),
  ``torch._subclasses.fake_tensor.unset_fake_temporarily``, ``torch._guards.detect_fake_mode``,
  ``torch._decomp.get_decompositions``, ``torch._ops.OpOverload``,
  ``torch._C._dynamo.guards._reinterpret_tensor``, ``torch._C._storage_Use_Count``,
  ``torch._C._get_tracing_state``.
- bench/harness.py: ``CompiledKernel._init_handles``, ``.n_regs``, ``.n_spills``.
"""
from __future__ import annotations

import os

import torch

from .errors import ToolchainError

CHECKED = {"triton": "3.6", "torch": "2.11-2.13"}


def missing(api: str, use: str) -> ToolchainError:
    """The error for a private API that the installed torch or Triton lacks."""
    import triton

    return ToolchainError(f"pyfuser: {api} is missing (torch {torch.__version__}, triton {triton.__version__}; "
                          f"pyfuser uses it for {use} and was checked on triton {CHECKED['triton']}, "
                          f"torch {CHECKED['torch']})")


# -- torch -----------------------------------------------------------------------------------
_GUARDS = getattr(torch._C, "_dynamo", None) and getattr(torch._C._dynamo, "guards", None)
_FAST_EMPTY = {kind: getattr(_GUARDS, f"_empty_strided_{kind}", None) for kind in ("cpu", "cuda")}


def fast_empty_strided(kind: str):
    """``empty(shape, strides, dtype)`` on the CPU or the current CUDA device: the C++
    entry point Inductor's generated code allocates with (no Python argument
    parsing), or None where this torch lacks it."""
    return _FAST_EMPTY.get(kind)


# The current CUDA device without ``torch.cuda.current_device``'s lazy-init check.
current_cuda_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def torch_ptxas_path() -> str:
    """Where torch keeps the ptxas it ships (``torch/bin/ptxas``)."""
    return os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas"))


def register_torch_logs(alias: str, qnames: list, artifacts: dict) -> bool:
    """Make ``TORCH_LOGS=alias`` (and ``torch._logging.set_logs``) set the level of loggers
    ``qnames``, and each of ``artifacts`` (name -> description) a name of its own;
    False where this torch lacks the registry."""
    try:
        from torch._logging import _internal
    except ImportError:
        return False
    if not all(hasattr(_internal, n) for n in ("register_log", "register_artifact", "getArtifactLogger")):
        return False
    _internal.register_log(alias, qnames)
    for name, description in artifacts.items():
        if not _internal.log_registry.is_artifact(name):
            _internal.register_artifact(name, description)
    return True


def artifact_logger(module_qname: str, artifact: str):
    """torch's logger for ``artifact`` under ``module_qname``: it logs at DEBUG, and is on
    when the artifact is named or its ancestor logger is at DEBUG (``+alias``)."""
    import logging

    try:
        from torch._logging import getArtifactLogger

        return getArtifactLogger(module_qname, artifact)
    except (ImportError, ValueError):
        return logging.getLogger(f"{module_qname}.__{artifact}")


def compile_id() -> str | None:
    """Dynamo's id of the frame being compiled ("0/0": frame 0, first compile), or None."""
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
    except (ImportError, AttributeError, RuntimeError):
        return None
    return None if cid is None else str(cid)


# -- Triton ----------------------------------------------------------------------------------
def compile_for(fn, grid, args, kw):
    """The CompiledKernel Triton's JIT function ``fn`` has for these arguments (compiling
    it if needed), without launching it."""
    return fn.run(*args, grid=grid, warmup=True, **kw)


def needs_scratch(k) -> bool:
    """Whether compiled kernel ``k`` needs global or profiling scratch, which only
    Triton's own runner allocates."""
    launcher = k.run  # the CUDA launcher (loads the module on first use)
    return bool(launcher.global_scratch_size or launcher.profile_scratch_size)


def raw_launcher(k, grid, device_index):
    """A launch of compiled kernel ``k`` on ``grid`` through Triton's C launcher with
    everything but the stream and the arguments fixed: Triton's runner looks up the
    device and the stream and builds launch metadata on every call, a large part of a
    small launch's host time (docs/TUNING.md#host-time).  While a launch hook is
    installed (a profiler's), Triton's runner runs instead, so the hook sees every
    launch; a kernel needing global or profiling scratch keeps that runner
    (``launch.direct_launcher``)."""
    from triton import knobs

    hooks = knobs.runtime
    slow = k[grid]
    launcher = k.run
    launch, function, packed = launcher.launch, k.function, k.packed_metadata
    coop, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
    gx, gy, gz = grid
    stream_of = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if stream_of is None:
        raise missing("torch._C._cuda_getCurrentRawStream", "launching kernels without Triton's runner")
    dev = torch.cuda.current_device() if device_index is None else device_index

    def run(*args):
        if not (hook_set(hooks.launch_enter_hook) or hook_set(hooks.launch_exit_hook)):
            launch(gx, gy, gz, stream_of(dev), function, coop, pdl, None, None, packed, None, None, None, *args)
        else:
            slow(*args)

    return run


def hook_set(hook) -> bool:
    """Whether a Triton launch hook is installed: Triton 3.6 keeps each hook as a
    ``HookChain`` that is never None, empty until someone adds a hook (a check for
    None alone sent every launch through the slow runner)."""
    return hook is not None and bool(getattr(hook, "calls", True))


def newest_compiled(fn):
    """The newest entry of JIT function ``fn``'s compiled-kernel cache on the current
    device, or None."""
    from triton.runtime import driver

    kernels = fn.device_caches[driver.active.get_current_device()][0]
    return next(reversed(kernels.values()), None)


def registers(ck) -> tuple:
    """(registers per thread, spills) of a CompiledKernel, each None where unknown."""
    if ck is None:
        return None, None
    return getattr(ck, "n_regs", None), getattr(ck, "n_spills", None)
