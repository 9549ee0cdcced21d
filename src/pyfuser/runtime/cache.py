"""Compiled-kernel cache: generated source -> importable module -> launchable kernel.

Triton's ``jit`` reads a kernel's source with ``inspect``, so each generated kernel
is written to a file under the cache directory and its module is given that file
name.  CUDA tensors launch the JIT function; CPU tensors launch the very same
function under Triton's interpreter, from a second copy of the module whose
globals the interpreter may rebind (``interpreter.interpreted_module``).

Trust: a module is only ever executed from the source text this process generated,
never from what is on disk.  The file is written for ``inspect``, for the user to
read and for other processes (content-addressed: the name is a digest of the
text); a file found under that name is compared byte for byte and rewritten
(private temp file, then ``os.replace``, atomic for concurrent writers) when it
differs, and ``linecache`` is primed with the generated text so no later reader of
the source (``inspect``, tracebacks) sees anything else.  The directory itself must
be private to the user (``private_dir``).

Bounds, both least recently used first:

- imported modules: at most ``PYFUSER_KERNEL_MODULES`` (default 512) per process; an
  evicted module leaves ``sys.modules`` and ``linecache``.  Fusions that still hold
  one of its kernels keep it alive and keep launching it; a new fusion with the same
  source imports it again.
- files: at most ``PYFUSER_CACHE_FILES`` (default 2048, about 40 MB) kernel files in
  the directory; each write removes the oldest beyond the cap (by modification time:
  a load refreshes it).  Modules never need their file after the import, so another
  process removing one is harmless.

Thread safety: loading takes one process-wide lock; the counters are updated under
their own (``count``).
"""
from __future__ import annotations

import hashlib
import linecache
import os
import stat
import sys
import tempfile
import threading
import warnings
from collections import Counter, OrderedDict

from ..errors import CacheDirError, DependencyError
from ..settings import BY_NAME, read
from .phases import timed

COUNTERS: Counter = Counter()
_COUNT_LOCK = threading.Lock()
_LOAD_LOCK = threading.RLock()
_modules: OrderedDict = OrderedDict()  # (module name, "cuda" | "cpu") -> module, least recently used first
_fallback_dirs: dict = {}  # default path refused -> this process's fresh private directory

KERNEL_MODULES_DEFAULT = BY_NAME["kernel_modules"].default
CACHE_FILES_DEFAULT = BY_NAME["cache_files"].default


def count(hits: int = 0, launches: int = 0, misses: int = 0, kernels_compiled: int = 0):
    """Add to the process's counters, safe from any thread (a cached execute calls it
    once, positionally: no keyword dict on that path)."""
    with _COUNT_LOCK:
        if hits:
            COUNTERS["hits"] += hits
        if launches:
            COUNTERS["launches"] += launches
        if misses:
            COUNTERS["misses"] += misses
        if kernels_compiled:
            COUNTERS["kernels_compiled"] += kernels_compiled


def cache_info() -> dict:
    with _COUNT_LOCK:
        return {"kernels_compiled": COUNTERS["kernels_compiled"], "hits": COUNTERS["hits"],
                "misses": COUNTERS["misses"], "launches": COUNTERS["launches"],
                "modules_loaded": len(_modules)}


def reset_counters():
    with _COUNT_LOCK:
        COUNTERS.clear()


# -- the directory ---------------------------------------------------------------------------
def _default_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"pyfuser-{os.getuid()}")


def cache_dir() -> str:
    """``PYFUSER_CACHE_DIR``, else ``<tmp>/pyfuser-<uid>``, checked private (``private_dir``).

    A directory the user named that fails the check is an error.  The default one
    failing means someone else made it first (its name is predictable), which must
    not stop this user: the process then uses a fresh private directory of its own
    (``tempfile.mkdtemp``) and warns once."""
    named = read("cache_dir")
    if named:
        return private_dir(named, "PYFUSER_CACHE_DIR")
    default = _default_dir()
    own = _fallback_dirs.get(default)
    if own is not None and os.path.isdir(own):
        return private_dir(own, "pyfuser's fallback cache directory")
    try:
        return private_dir(default, "the default cache directory")
    except CacheDirError as err:
        with _LOAD_LOCK:
            own = _fallback_dirs[default] = tempfile.mkdtemp(prefix=f"pyfuser-{os.getuid()}-")
        warnings.warn(f"{err}; using a fresh private directory {own} for this process instead (set "
                      f"PYFUSER_CACHE_DIR to a directory of your own to share kernels between processes)",
                      stacklevel=2)
        return own


def private_dir(path: str, what: str) -> str:
    """``path``, created with mode 0700 if missing; refused (``CacheDirError``) unless it
    is a real directory (not a symlink) owned by this user that no one else may write:
    modules are imported from there, and whoever can write it could plant code."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass  # a file or a dangling link: refused below
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise CacheDirError(f"{what} {path} is a symbolic link; pyfuser imports kernels from there and needs a "
                            f"real directory of your own")
    if not stat.S_ISDIR(st.st_mode):
        raise CacheDirError(f"{what} {path} exists and is not a directory")
    if st.st_uid != os.getuid():
        raise CacheDirError(f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
                            f"pyfuser imports kernels from there and will not trust it")
    if st.st_mode & 0o022:
        raise CacheDirError(f"{what} {path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}); expected "
                            f"no group/other write permission (e.g. chmod 700)")
    return path


# -- files -----------------------------------------------------------------------------------
def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        return os.read(fd, os.fstat(fd).st_size + 1)
    finally:
        os.close(fd)


def write_file(directory: str, name: str, data: bytes, prune: bool = True) -> str:
    """``directory/name`` holding exactly ``data``: kept (and its time refreshed) when it
    already does, else written to a fresh private temp file and moved into place;
    ``prune``: then keep the directory's kernel files within their cap."""
    path = os.path.join(directory, name)
    if _read(path) == data:
        try:
            os.utime(path)
        except OSError:
            pass
        return path
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if prune:
        prune_files(directory, read("cache_files"))
    return path


def prune_files(directory: str, keep: int, prefix: str = "pyfuser_kernel_", suffix: str = ".py"):
    """Remove the oldest (by modification time) of ``directory``'s files named
    ``prefix...suffix`` beyond ``keep``; files that vanish meanwhile are skipped."""
    entries = []
    with os.scandir(directory) as it:
        for e in it:
            if e.name.startswith(prefix) and e.name.endswith(suffix):
                try:
                    entries.append((e.stat(follow_symlinks=False).st_mtime_ns, e.path))
                except OSError:
                    pass
    if len(entries) <= keep:
        return
    entries.sort()
    for _, path in entries[:len(entries) - keep]:
        try:
            os.unlink(path)
        except OSError:
            pass


# -- modules ---------------------------------------------------------------------------------
@timed("module_load")
def load_kernel(name: str, source: str, device_type: str):
    """The launchable kernel ``name`` of ``source`` (imported once per distinct text and
    device kind, while it stays among the most recently used)."""
    kind = "cuda" if device_type == "cuda" else "cpu"
    data = source.encode()
    modname = f"pyfuser_kernel_{hashlib.sha256(data).hexdigest()[:24]}"
    key = (modname, kind)
    with _LOAD_LOCK:
        mod = _modules.get(key)
        if mod is None:
            path = write_file(cache_dir(), modname + ".py", data)
            try:
                mod = _import(modname if kind == "cuda" else modname + "_cpu", path, source, kind)
            except ImportError as err:
                dep = missing_dependency(err)
                if dep is None:
                    raise
                raise dep from err
            _modules[key] = mod
            _evict(read("kernel_modules"))
        else:
            _modules.move_to_end(key)
    fn = getattr(mod, name)
    if kind == "cuda":
        return fn
    from .interpreter import InterpretedKernel

    return InterpretedKernel(fn)


# package -> what needs it, how to install it
DEPENDENCIES = {"triton": ("pyfuser's kernels are Triton kernels", "pip install triton"),
                "numpy": ("CPU tensors run under Triton's interpreter, which computes with numpy",
                          "pip install numpy")}


def missing_dependency(err: ImportError) -> DependencyError | None:
    """The error for a kernel module whose import failed for want of a package, or None."""
    package = (getattr(err, "name", None) or "").split(".")[0]
    if package not in DEPENDENCIES:
        return None
    why, install = DEPENDENCIES[package]
    return DependencyError(f"pyfuser: the package {package!r} is not installed ({why}); install it with "
                           f"`{install}`")


def _import(modname: str, path: str, source: str, kind: str):
    import importlib.util

    lines = source.splitlines(keepends=True)
    linecache.cache[path] = (len(source), None, lines, path)  # mtime None: never reloaded from disk
    spec = importlib.util.spec_from_loader(modname, loader=None, origin=path)
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = path
    sys.modules[modname] = mod
    try:
        exec(compile(source, path, "exec"), mod.__dict__)  # noqa: S102 - the text this process generated
        if kind == "cpu":
            from .interpreter import interpreted_module

            interpreted_module(mod)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return mod


def _evict(keep: int):
    while len(_modules) > keep:
        (modname, _), mod = _modules.popitem(last=False)
        sys.modules.pop(mod.__name__, None)
        if (modname, "cuda") not in _modules and (modname, "cpu") not in _modules:
            linecache.cache.pop(mod.__file__, None)


def binaries() -> int:
    """Triton binaries the loaded CUDA kernels hold: one per kernel and specialization
    (its constexpr values, which integer arguments are 1 or multiples of 16), each a
    compile of its own; 0 where none is loaded (the interpreter compiles nothing).
    An evicted module's binaries no longer count."""
    with _LOAD_LOCK:
        mods = [m for (_, kind), m in _modules.items() if kind == "cuda"]
    n = 0
    for mod in mods:
        for fn in vars(mod).values():
            caches = getattr(fn, "device_caches", None)
            if isinstance(caches, dict):
                n += sum(len(c[0]) for c in caches.values() if isinstance(c, tuple) and c)
    return n


def loaded_modules() -> list:
    """Names of the kernel modules imported now, least recently used first."""
    with _LOAD_LOCK:
        return [mod.__name__ for mod in _modules.values()]
