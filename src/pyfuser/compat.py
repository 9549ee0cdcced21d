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
  ``register_artifact``, ``getArtifactLogger``, ``log_registry``); dynamo/report/logs.py; plain
  ``logging`` loggers (``TORCH_LOGS`` does not name pyfuser's; ``logging`` still does).
- ``compile_id``: ``torch._guards.CompileContext.current_compile_id``; dynamo/report/logs.py; None.
- ``aot_forward_metadata``: ``torch._guards.TracingContext.fw_metadata`` (AOTAutograd's
  ``ViewAndMutationMeta``: ``num_forward``, ``tokens``); dynamo/backend.py; None (the
  forward graph is not replayed as a CUDA graph).

- ``load_handles``: ``CompiledKernel._init_handles``; runtime/spills.py, bench/kernel_stats.py;
  None (registers unknown until the first launch).
- ``compiled_kernels``: ``JITFunction.device_caches``; bench/kernel_stats.py; an empty list.
- ``ptxas_command``, ``compile_offline``, ``cached_offline``, ``build_launcher``: compiling for a GPU without
  one, in ``compat_offline.py`` (listed there), imported here for their users.
- ``interpreter_module``, ``tensor_handle``, ``argument_conversion``/``set_argument_conversion``,
  ``interpreted_function_base``: ``triton.runtime.interpreter`` (``TensorHandle``,
  ``InterpretedFunction``, ``InterpreterBuilder``, ``ReduceOps``, ``_implicit_cvt``);
  runtime/interpreter.py; none (CPU tensors need the interpreter).
- ``dynamo_backend_taken``, ``register_dynamo_backend``: ``torch._dynamo.backends.registry``
  (``_COMPILER_FNS``, ``_BACKENDS``, ``register_backend``); dynamo/__init__.py; none.
- ``aot_autograd``, ``min_cut_partition``, ``functorch_config``, ``fx_graph_cse``:
  ``torch._dynamo.backends.common``, ``torch._functorch`` (``partitioners``, ``config``,
  ``compile_utils``); dynamo/backend.py; none.
- ``unset_fake_temporarily``, ``detect_fake_mode``: ``torch._subclasses.fake_tensor``,
  ``torch._guards``; dynamo/backend.py, dynamo/rewrites/pad_matmuls.py; a null context, none.
- ``get_decompositions``: ``torch._decomp``; dynamo/decompositions.py; none.
- ``share_codegen``: ``torch.fx.Graph._codegen``; dynamo/backend.py, dynamo/report/accuracy.py; none.
- ``lazy_graph_module``: ``torch.fx._lazy_graph_module._LazyGraphModule``; dynamo/rewrites/registry.py;
  none.
- ``mark_boxed``: AOTAutograd's ``_boxed_call`` convention; dynamo/regions/graphs.py, dynamo/report/accuracy.py.
- ``qualified_name``: ``torch.fx.node._get_qualified_name``; dynamo/partition/partitioner.py; none.
- ``OpOverload``, ``OpOverloadPacket``: ``torch._ops``; dynamo/rewrites/sink_views.py,
  dynamo/rules/collectives.py; none.
- ``has_internal_overlap``: ``torch._debug_has_internal_overlap``; reference.py; False
  (an alias output into an expanded input is then not refused up front).
- ``grouped_mm``: ``torch._grouped_mm``; ir/attention.py (CUDA only); ``ToolchainError``.
- ``sym_floor_div``: ``torch.utils._sympy.functions.FloorDiv`` (the floor division in
  Dynamo's size expressions); dynamo/partition/partitioner.py, dynamo/regions/translate.py; none.
- ``module_call_hooked``: ``nn.Module._forward_hooks`` and the other hook dicts,
  ``torch.nn.modules.module._global_*_hooks``, ``torch._C._get_tracing_state``;
  dynamo/regions/region.py; none.
- ``op_schema``: ``OpOverload._schema``; dynamo/report/accuracy.py, dynamo/regions/graphs.py; none (dynamo/rules/rulebook.py still reads
  ``target._schema``: its module is at its line ceiling).
- ``reinterpret_tensor``: ``torch._C._dynamo.guards._reinterpret_tensor``; dynamo/regions/views.py,
  dynamo/regions/graphs.py; ``Tensor.as_strided``.
- ``storage_use_count``, ``storage_id``: ``torch._C._storage_Use_Count``,
  ``UntypedStorage._cdata``; dynamo/regions/graphs.py; none.
- ``foreach_copy_``: ``torch._foreach_copy_``; dynamo/regions/graphs.py; ``Tensor.copy_`` per pair.
- ``graph_pool_enders``: ``torch._C._cuda_endAllocateToPool``, ``_cuda_releasePool``; dynamo/regions/recording.py;
  none (a failed recording's pool stays reserved).

Left where they are: ATen op names with a leading underscore (``aten._to_copy``,
``aten._unsafe_view``) are ops of ATen's public op set, not private APIs; pyfuser's
own private attributes (``fd._runtime``, ``ExecutorCache._current_sig``) are not
torch's or Triton's.
"""
from __future__ import annotations

import os

import torch
from torch.nn.modules import module as _nn_module

from .compat_offline import build_launcher, cached_offline, compile_offline, ptxas_command  # noqa: F401 - reached from here
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


def aot_forward_metadata():
    """AOTAutograd's metadata of the forward graph being compiled (which of its outputs
    are the caller's, ``num_forward``), or None outside such a compile."""
    try:
        from torch._guards import TracingContext

        ctx = TracingContext.try_get()
    except (ImportError, AttributeError):
        return None
    return getattr(ctx, "fw_metadata", None)


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


def compiled_kernels(fn, device: int) -> list:
    """Every CompiledKernel JIT function ``fn`` holds for CUDA device ``device``, oldest
    first (Triton 3.6: ``device_caches[device]`` is (kernels, keys, target, backend,
    binder)); an empty list for none."""
    caches = getattr(fn, "device_caches", {})
    return list(caches[device][0].values()) if device in caches else []


def load_handles(ck) -> None:
    """Load compiled kernel ``ck``'s module now, so that its ``n_regs`` and ``n_spills``
    are known before the first launch (Triton loads it lazily)."""
    init = getattr(ck, "_init_handles", None)
    if init is not None:
        init()


# -- Triton's interpreter (CPU tensors) ------------------------------------------------------
_INTERPRETER: list = []  # the checked module, once imported
_INTERPRETER_NAMES = ("TensorHandle", "InterpretedFunction", "InterpreterBuilder", "ReduceOps", "_implicit_cvt")


def interpreter_module():
    """``triton.runtime.interpreter``, whose classes ``runtime.interpreter`` extends
    (``InterpreterBuilder``'s casts and binary ops, ``ReduceOps.apply_impl``); a
    ToolchainError where one of them is gone.  Checked once per process."""
    if not _INTERPRETER:
        from triton.runtime import interpreter

        for name in _INTERPRETER_NAMES:
            if not hasattr(interpreter, name):
                raise missing(f"triton.runtime.interpreter.{name}", "running kernels on CPU tensors")
        _INTERPRETER.append(interpreter)
    return _INTERPRETER[0]


def tensor_handle(data, dtype):
    """The interpreter's value of a numpy array ``data`` of Triton dtype ``dtype``."""
    return interpreter_module().TensorHandle(data, dtype)


def interpreted_function_base():
    """The class of an interpreted ``@triton.jit`` function."""
    return interpreter_module().InterpretedFunction


def argument_conversion():
    """The interpreter's conversion of a launch argument to its value."""
    return interpreter_module()._implicit_cvt


def set_argument_conversion(fn) -> None:
    interpreter_module()._implicit_cvt = fn


# -- torch.compile: Dynamo, AOTAutograd, FX ---------------------------------------------------
def dynamo_backend_taken(name: str) -> bool:
    """Whether Dynamo has a backend ``name`` already: registered, or named by an entry
    point it has discovered (a second registration would be an error)."""
    from importlib.metadata import EntryPoint

    from torch._dynamo.backends import registry

    return name in getattr(registry, "_COMPILER_FNS", {}) \
        or isinstance(getattr(registry, "_BACKENDS", {}).get(name), EntryPoint)


def register_dynamo_backend(name: str, fn) -> None:
    from torch._dynamo.backends import registry

    registry.register_backend(compiler_fn=fn, name=name)


def aot_autograd(**kwargs):
    """Dynamo's AOTAutograd backend factory (``fw_compiler=``, ``partition_fn=``, ...)."""
    from torch._dynamo.backends.common import aot_autograd as make

    return make(**kwargs)


def min_cut_partition(joint_module, joint_inputs, **kwargs):
    """AOTAutograd's min-cut rematerialization partitioner."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)


def functorch_config():
    """AOTAutograd's config module (``cse``, ``patch``)."""
    from torch._functorch import config

    return config


def fx_graph_cse(graph):
    """AOTAutograd's common-subexpression pass over an FX graph."""
    from torch._functorch.compile_utils import fx_graph_cse as cse

    return cse(graph)


def unset_fake_temporarily():
    """A context without the active fake-tensor mode (a null context where this torch
    has no such helper)."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily as unset
    except ImportError:  # pragma: no cover - older torch
        import contextlib

        return contextlib.nullcontext()
    return unset()


def detect_fake_mode(values):
    """The fake-tensor mode of ``values`` (or the active one), None for none."""
    from torch._guards import detect_fake_mode as detect

    return detect(values)


def get_decompositions(ops):
    """torch's decomposition table for the OpOverloads or packets ``ops``."""
    from torch._decomp import get_decompositions as table

    return table(ops)


def share_codegen(graph, source) -> None:
    """Give FX ``graph`` the code generator of ``source`` (its inputs' and outputs'
    pytree specs), as a copy of ``source`` needs."""
    graph.set_codegen(source._codegen)


def lazy_graph_module(root, graph):
    """A GraphModule of ``graph`` over ``root``'s attributes whose Python code is
    generated when first needed (called, printed, pickled), not on construction: a
    copy made to be rewritten is regenerated after the rewrite anyway, and the code of
    a large model's graph takes a noticeable part of a compile to generate."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    return _LazyGraphModule(root, graph)


def mark_boxed(fn) -> None:
    """Mark callable ``fn`` as taking its arguments as one list (AOTAutograd's boxed
    calling convention), so that AOTAutograd's wrappers call it so."""
    fn._boxed_call = True


def qualified_name(op) -> str:
    """The dotted name FX prints for a callable (``torch.ops.aten.view.default``)."""
    from torch.fx.node import _get_qualified_name

    return _get_qualified_name(op)


OpOverload = torch._ops.OpOverload  # the type of ``torch.ops.aten.<op>.<overload>``
OpOverloadPacket = torch._ops.OpOverloadPacket  # the type of ``torch.ops.aten.<op>``


def has_internal_overlap(t) -> bool:
    """Whether some elements of tensor ``t`` share memory (an expanded dim)."""
    fn = getattr(torch, "_debug_has_internal_overlap", None)
    return fn is not None and fn(t) == 1


def sym_floor_div():
    """The sympy class of ``//`` in symbolic sizes (``s0 // 2``)."""
    from torch.utils._sympy.functions import FloorDiv

    return FloorDiv


def grouped_mm(mat1, mat2, offsets):
    """torch's grouped matmul kernel (CUDA)."""
    fn = getattr(torch, "_grouped_mm", None)
    if fn is None:
        raise ToolchainError(f"grouped_mm: this torch ({torch.__version__}) has no torch._grouped_mm; "
                             f"checked on {CHECKED}")
    return fn(mat1, mat2, offsets)


def module_call_hooked(m) -> bool:
    """Whether a call of ``nn.Module`` ``m`` must go through ``nn.Module.__call__``: a
    hook of its own or a global one is installed, or a JIT trace runs."""
    g = _nn_module
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
                or g._global_forward_hooks or g._global_forward_pre_hooks
                or g._global_backward_hooks or g._global_backward_pre_hooks
                or torch._C._get_tracing_state())


def op_schema(op):
    """The ``torch.FunctionSchema`` of an OpOverload (its arguments, names, defaults);
    None for a callable without one."""
    return getattr(op, "_schema", None)


def _as_strided_from(x, size, stride, delta):
    return x.as_strided(size, stride, x.storage_offset() + delta)


# ``reinterpret_tensor(x, size, stride, delta)``: a view of ``x``'s storage whose offset
# is ``delta`` past ``x``'s own (torch's C++ helper, without ``as_strided``'s Python
# argument parsing; the helper takes the offset relative to its input).
reinterpret_tensor = getattr(_GUARDS, "_reinterpret_tensor", None) or _as_strided_from

# (stop allocating to a CUDA graph's pool, release the pool): for a capture that never ended.
graph_pool_enders = getattr(torch._C, "_cuda_endAllocateToPool", None), getattr(torch._C, "_cuda_releasePool", None)

# The number of references to a storage (a tensor's storage is free to reuse at 1).
storage_use_count = torch._C._storage_Use_Count


def storage_id(t: torch.Tensor) -> int:
    """An id of ``t``'s storage, the same for every view of it while it lives."""
    return t.untyped_storage()._cdata


def foreach_copy_(dst, src) -> None:
    """``d.copy_(s)`` for each pair, in one call where torch has the foreach kernel."""
    fn = getattr(torch, "_foreach_copy_", None)
    if fn is not None:
        fn(dst, src)
        return
    for d, s in zip(dst, src):  # pragma: no cover - a torch without it
        d.copy_(s)


def registers(ck) -> tuple:
    """(registers per thread, spills) of a CompiledKernel, each None where unknown."""
    if ck is None:
        return None, None
    return getattr(ck, "n_regs", None), getattr(ck, "n_spills", None)
