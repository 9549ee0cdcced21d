"""The ptxas that compiles pyfuser's kernels: Triton's own, even after torch.compile.

Importing torch's Inductor points ``TRITON_PTXAS_PATH`` at the ptxas torch ships
(torch 2.11 built for CUDA 13: ptxas 13.0, where Triton 3.6 ships 12.8) for its own
kernels, and Triton reads that variable for every kernel it compiles afterwards.
pyfuser's register rules, its spill check's candidates and its offline checks
(``benchmarks/regcheck.py``) were measured with Triton's ptxas, and the two allocate
registers differently: log-softmax [8192, 30522] fp16 -> fp16 + fp32's prefetching
tile fits 128 registers with 12.8 and spills 2 with 13.0 (then the spill check falls
back to a slower tile; docs/TUNING.md#prefetch-rows).  So a process that had run torch.compile
got other kernels than one that had not.  While pyfuser compiles (an execute that
plans or prepares), a ``TRITON_PTXAS_PATH`` naming torch's own ptxas is set aside;
one naming any other ptxas (a user's choice) is kept.  The variable is the process's:
a thread compiling at the same moment (Inductor's, say) sees it set aside as well,
which changes which ptxas compiles that kernel, not what it computes.  pyfuser's
own threads share one setting-aside: the variable comes back when the last of them
leaves the block.
"""
from __future__ import annotations

import contextlib
import os
import threading

_VAR = "TRITON_PTXAS_PATH"
_LOCK = threading.Lock()
_inside = 0  # threads inside ``triton_ptxas`` blocks
_set_aside = None  # the value to restore when the last one leaves


def _torch_ptxas() -> str:
    from ..compat import torch_ptxas_path

    return torch_ptxas_path()


@contextlib.contextmanager
def triton_ptxas():
    """Compile with Triton's bundled ptxas inside the block if the variable names
    torch's (module docstring); restores the variable after."""
    global _inside, _set_aside
    with _LOCK:
        if _inside == 0:
            set_to = os.environ.get(_VAR)
            if set_to and os.path.realpath(set_to) == _torch_ptxas():
                _set_aside = set_to
                del os.environ[_VAR]
        _inside += 1
    try:
        yield
    finally:
        with _LOCK:
            _inside -= 1
            if _inside == 0 and _set_aside is not None:
                os.environ[_VAR], _set_aside = _set_aside, None
