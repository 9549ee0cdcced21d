"""Answers a process worked out that a later process may reuse: a small store on disk.

Compiling a model's kernels asks some questions whose answer depends on nothing but
their inputs and costs a subprocess or a compile to work out again: ptxas's register
and spill report of a kernel's PTX (``spills.ptxas_usage``), which a compile worker
asks for every spill-check candidate it compiles and the training process again for
every kernel whose driver-reported local memory is not 0.  A second process (or the
training process after its workers) finds the answer here instead.

What a process decides from its inputs alone (segmentation, schedulers and their
params) is not kept: planning, scheduling, preparing and generating a whole training
step's kernels take a fraction of a second (docs/TUNING.md#compile-ahead), and a
stale plan would be a wrong result where a stale report is only a worse kernel.

The store (``cache_dir()/decisions``, as private as the kernel files):

* **Keys.** An entry is ``(kind, key)``, ``key`` a JSON value holding everything the
  answer depends on, with the versions of pyfuser, Triton and torch added: a new
  version of any of them misses every old entry, which then ages out.  The file is
  named by the SHA-256 of that and holds it beside the answer, and a read checks it:
  a file that is truncated, corrupt or another key's is a miss, and is removed.
* **Writes** go to a private temp file moved into place (``cache.write_file``):
  concurrent writers each move a whole file, and they wrote the same answer.
* **Bounds.** At most ``PYFUSER_DECISIONS`` entries (default 4096, a few hundred
  bytes each); a write removes the least recently used beyond that (a read
  refreshes an entry's time).
* **Off.** ``PYFUSER_DECISIONS=0``: nothing is read or written.
"""
from __future__ import annotations

import hashlib
import json
import os

from ..settings import read
from .cache import cache_dir, private_dir, prune_files, write_file

SUFFIX = ".json"


def _versions() -> dict:
    import torch
    import triton

    from .._version import __version__

    return {"pyfuser": __version__, "triton": triton.__version__, "torch": torch.__version__}


def directory() -> str:
    """The store's directory, created private (``cache.private_dir``)."""
    return private_dir(os.path.join(cache_dir(), "decisions"), "pyfuser's decisions directory")


def _entry(kind: str, key) -> tuple:
    """(file name, the entry's identity as it reads back from JSON)."""
    text = json.dumps({"kind": kind, "key": key, "versions": _versions()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:40] + SUFFIX, json.loads(text)


def lookup(kind: str, key):
    """The answer kept for ``(kind, key)``, or None (none kept, the store off, or an
    entry that does not read back as this key's: removed)."""
    if read("decisions") == 0:
        return None
    name, ident = _entry(kind, key)
    try:
        path = os.path.join(directory(), name)
        with open(path, "rb") as f:
            data = f.read()
    except OSError:  # none kept, or a directory not to be trusted (CacheDirError): a miss
        return None
    try:
        stored = json.loads(data)
        if {k: stored[k] for k in ident} != ident:
            raise ValueError("another key")
        value = stored["value"]
    except (ValueError, KeyError, TypeError):  # truncated, corrupt or foreign: forget it
        _remove(path)
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    return value


def keep(kind: str, key, value) -> None:
    """Keep ``value`` (a JSON value) as the answer for ``(kind, key)``; the oldest entries
    beyond ``PYFUSER_DECISIONS`` go.  A store that cannot be written loses nothing but
    the next process's time, so an OS error here is not raised, nor a directory that
    fails ``private_dir``'s check (nothing is written there)."""
    limit = read("decisions")
    if limit == 0:
        return
    name, ident = _entry(kind, key)
    data = json.dumps(dict(ident, value=value), sort_keys=True).encode()
    try:
        where = directory()
        write_file(where, name, data, prune=False)
        prune_files(where, limit, prefix="", suffix=SUFFIX)
    except OSError:  # CacheDirError is one
        pass


def _remove(path: str):
    try:
        os.unlink(path)
    except OSError:
        pass
