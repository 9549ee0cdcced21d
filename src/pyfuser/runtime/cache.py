"""Compiled-kernel cache: generated source -> importable module -> launchable kernel.

Triton's ``jit`` reads a kernel's source with ``inspect``, so each generated kernel
is written to a file under the cache directory (``PYFUSER_CACHE_DIR``, default a
per-user temp dir) and imported from there.  CUDA tensors launch the JIT function;
CPU tensors launch the very same function under Triton's interpreter.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from collections import Counter

COUNTERS: Counter = Counter()
_modules: dict[str, object] = {}


def cache_info() -> dict:
    return {"kernels_compiled": COUNTERS["kernels_compiled"], "hits": COUNTERS["hits"],
            "misses": COUNTERS["misses"], "launches": COUNTERS["launches"]}


def reset_counters():
    COUNTERS.clear()


def cache_dir() -> str:
    d = os.environ.get("PYFUSER_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"pyfuser-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    return d


def load_kernel(name: str, source: str, device_type: str):
    """Import ``source`` (once per distinct text) and return the launchable kernel."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    modname = f"pyfuser_kernel_{digest}"
    mod = _modules.get(modname)
    if mod is None:
        path = os.path.join(cache_dir(), modname + ".py")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
        _modules[modname] = mod
    fn = getattr(mod, name)
    if device_type == "cuda":
        return fn
    from .interpreter import InterpretedKernel

    return InterpretedKernel(fn)
