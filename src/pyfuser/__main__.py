"""``python -m pyfuser``: what a bug report needs first.

The versions of pyfuser, Python, torch, Triton and numpy; the device kernels run on
(the GPU, or Triton's interpreter for CPU tensors, with any known-bad version pair);
every setting with its value and where that comes from; ``PYFUSER_*`` variables no
setting reads (a typo); the kernel cache directory and its counters; where the docs are
(an installed wheel puts them under ``<prefix>/share/pyfuser/docs``; a source tree has
them beside ``src/``).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys


def _version(module: str) -> str:
    try:
        mod = __import__(module)
    except Exception as err:  # a missing or broken package is part of the report
        return f"not importable ({type(err).__name__}: {err})"
    return getattr(mod, "__version__", "unknown")


def _device_lines() -> list:
    import torch

    if torch.cuda.is_available():
        lines = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(f"cuda:{i}: {p.name}, compute capability {p.major}.{p.minor}, "
                         f"{p.total_memory / 2**30:.0f} GiB")
        lines.append(f"CUDA {torch.version.cuda}: CUDA tensors run compiled Triton kernels; CPU tensors run "
                     f"the same kernels under Triton's interpreter")
        return lines
    built = f"torch built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only torch"
    return [f"no CUDA device ({built}): every kernel runs under Triton's interpreter, for correctness, not speed"]


def _interpreter_lines() -> list:
    lines = []
    try:
        from .runtime.interpreter import numpy_hint

        hint = numpy_hint()
    except Exception as err:
        hint = f"cannot check ({type(err).__name__}: {err})"
    lines.append(f"interpreter (CPU tensors): {'known problem: ' + hint if hint else 'no known version problem'}")
    forced = os.environ.get("TRITON_INTERPRET")
    if forced:
        lines.append(f"TRITON_INTERPRET={forced}: Triton interprets every kernel, CUDA tensors' too")
    return lines


def _settings_lines() -> list:
    from .settings import SETTINGS, config, unknown_variables

    lines = []
    for s in SETTINGS:
        if s.scope != "user":
            continue
        try:
            value = config.__getattr__(s.name)
            shown = ",".join(sorted(value)) if isinstance(value, frozenset) else value
            shown = repr(shown) if shown == "" else str(shown)
            where = config.source(s.name)
        except Exception as err:  # a bad value is what the report is for
            shown, where = f"error: {err}", "environment"
        lines.append(f"  {s.env:24s} {s.name:15s} = {shown}  ({where})")
    for name in unknown_variables():
        lines.append(f"  {name}: set, but no setting reads it (a typo?)")
    return lines


def _cache_lines() -> list:
    from . import cache_info
    from .runtime.cache import cache_dir

    try:
        where = cache_dir()
    except Exception as err:
        where = f"unusable: {type(err).__name__}: {err}"
    counts = ", ".join(f"{k} {v}" for k, v in cache_info().items())
    return [f"kernel cache: {where}", f"this process: {counts}"]


def docs_dir() -> str | None:
    """The folder holding docs/*.md: the installed copy, else the source tree's."""
    import pyfuser

    here = os.path.dirname(os.path.abspath(pyfuser.__file__))
    for d in (os.path.join(sys.prefix, "share", "pyfuser", "docs"),
              os.path.join(os.path.dirname(os.path.dirname(here)), "docs")):
        if os.path.isfile(os.path.join(d, "SETTINGS.md")):
            return d
    return None


def report() -> str:
    import pyfuser

    lines = [f"pyfuser {pyfuser.__version__} ({os.path.dirname(pyfuser.__file__)})",
             f"python {platform.python_version()} ({sys.executable}), {platform.platform()}",
             f"torch {_version('torch')}, triton {_version('triton')}, numpy {_version('numpy')}",
             "", "device:"]
    lines += ["  " + line for line in _device_lines() + _interpreter_lines()]
    lines += ["", "settings (PYFUSER_* variable, pyfuser.config name = value (source); docs/SETTINGS.md):"]
    lines += _settings_lines()
    lines += [""] + _cache_lines()
    lines += [f"docs: {docs_dir() or 'not found (they are in the repository, docs/)'}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyfuser", description=__doc__.splitlines()[0])
    p.parse_args(argv)
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
