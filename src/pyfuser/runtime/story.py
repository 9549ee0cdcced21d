"""The cache's story of one execute (``PYFUSER_DUMP=cache``): why it missed, which
kernels it found or compiled, which spill-check candidates it turned down.

Planning, building and the spill check tell it with ``note``; the story belongs to the
execute that opened it (``telling``, a context variable), not to the fusion's cache:
threads executing one fusion each tell their own, and a plan made outside an execute
(``fd.explain``) tells nobody.  The cache dump's hook (``probe.Probe``) prints it.
"""
from __future__ import annotations

import contextlib
import contextvars

_STORY: contextvars.ContextVar = contextvars.ContextVar("pyfuser_cache_story", default=None)


def note(line: str) -> None:
    """Add ``line`` to the story of the execute under way, if one is being told."""
    lines = _STORY.get()
    if lines is not None:
        lines.append(line)


@contextlib.contextmanager
def telling():
    """Open a story for the calls inside the block; yields its list of lines (the
    first one is the verdict: why this execute missed)."""
    lines: list = []
    token = _STORY.set(lines)
    try:
        yield lines
    finally:
        _STORY.reset(token)
