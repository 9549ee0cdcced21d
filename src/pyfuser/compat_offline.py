"""The Triton APIs of compiling a kernel for a GPU on a machine without one (``compat``'s
part for them: the same rule, every private API behind a named accessor).

- ``compile_offline``: ``triton.backends.compiler.GPUTarget``, ``triton.compiler``
  (``ASTSource``, ``compile``, ``make_backend``), ``triton.runtime.jit.create_function_from_signature``,
  ``JITFunction._pack_args``; runtime/spills.py, runtime/ahead.py; none (``benchmarks/regcheck.py``
  and compiling ahead need it).
- ``cached_offline``: the same, and ``triton.runtime.cache`` (``get_cache_key``,
  ``get_cache_manager``), ``triton._C.libtriton.get_cache_invalidating_env_vars``: the lookup
  ``triton.compile`` does before it compiles; runtime/ahead.py; none.
- ``build_launcher``: ``triton.backends.nvidia.driver.CudaLauncher`` (what
  ``CompiledKernel._init_handles`` builds first); runtime/ahead.py; none (the first load
  builds it).
- ``ptxas_command``: ``triton.knobs.compilation``/``knobs.nvidia``,
  ``triton.backends.nvidia.compiler`` (``get_ptxas``, ``sm_arch_from_capability``) and the
  compiled kernel's metadata; runtime/spills.py; none (the driver's local-memory count).
"""
from __future__ import annotations


def ptxas_command(ck, ptx: str, cubin: str) -> list:
    """The ptxas command line that Triton's ``make_cubin`` ran for compiled kernel
    ``ck``, on the files ``ptx`` and ``cubin``, with ``-v`` (the register report)."""
    from triton import knobs
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    md = ck.metadata
    arch = md.target.arch
    if knobs.compilation.disable_line_info:
        debug = ["-lineinfo", "-suppress-debug-info"]
    elif knobs.nvidia.disable_ptxas_opt:
        debug = ["-g"]
    else:
        debug = ["-lineinfo"]
    flags = debug + ([] if md.enable_fp_fusion else ["--fmad=false"]) + ["-v"]
    flags += (["--opt-level", "0"] if knobs.nvidia.disable_ptxas_opt else [])
    flags += md.ptx_options.split(" ") if md.ptx_options else []
    return [get_ptxas(arch).path, *flags, f"--gpu-name={sm_arch_from_capability(arch)}", ptx, "-o", cubin]


def _offline_source(fn, args, kw, arch: int):
    """(source, target, backend, options) of JIT function ``fn`` for CUDA sm_<arch>, its
    arguments specialised by Triton's launch binder as a launch on that GPU would."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    kw = dict(kw, debug=kw.get("debug", fn.debug) or knobs.runtime.debug,
              instrumentation_mode=knobs.compilation.instrumentation_mode)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kw)
    options, signature, constexprs, attrs = fn._pack_args(backend, kw, bound, specialization, options)
    return ASTSource(fn, signature, constexprs, attrs), target, backend, options.__dict__


def compile_offline(fn, args, kw, arch: int):
    """JIT function ``fn`` compiled for CUDA sm_<arch> without a GPU, its arguments
    specialised by Triton's launch binder as a launch on that GPU would."""
    from triton.compiler import compile

    src, target, _, options = _offline_source(fn, args, kw, arch)
    return compile(src, target=target, options=options)


def build_launcher(ck) -> None:
    """Build the C launcher of compiled kernel ``ck`` into Triton's cache: the first
    load of a kernel onto the GPU makes one for its argument signature, compiled by
    the C compiler (about a second) unless the cache holds it.  Needs the CUDA
    driver's library to link against, not a GPU; raises where that is missing."""
    from triton.backends.nvidia.driver import CudaLauncher

    CudaLauncher(ck.src, ck.metadata)


def cached_offline(fn, args, kw, arch: int) -> bool:
    """Whether Triton's cache directory holds what ``compile_offline`` would compile
    (the lookup ``triton.compile`` does before compiling: Triton 3.6's cache key of the
    source, backend, options and the environment variables that change a compile)."""
    import hashlib

    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.runtime.cache import get_cache_key, get_cache_manager

    src, _, backend, options = _offline_source(fn, args, kw, arch)
    options = backend.parse_options(dict(options, **src.parse_options()))
    key = get_cache_key(src, backend, options, env_vars=get_cache_invalidating_env_vars())
    manager = get_cache_manager(hashlib.sha256(key.encode("utf-8")).hexdigest())
    name = f"{src.name[:150]}.json"
    return (manager.get_group(name) or {}).get(name) is not None
