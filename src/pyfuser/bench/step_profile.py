"""What one training step costs on the device: its GPU kernels by class from the
profiler, the bytes each pyfuser kernel addresses, and a cProfile of the host's time.

``bert_bench`` reports these per implementation; they take any step function.
"""
from __future__ import annotations

import re

import torch


MATMUL_KERNEL = re.compile(r"gemm|cutlass|xmma|nvjet|cublas|wgmma|sm\d\d_", re.IGNORECASE)


def kernel_class(name: str) -> str:
    """"matmul" (cuBLAS/CUTLASS GEMMs), "copy" (memcpy/memset) or "other": the
    non-matmul work that fusion is about."""
    if MATMUL_KERNEL.search(name):
        return "matmul"
    if name.startswith(("Memcpy", "Memset", "[memcpy", "[memset")):
        return "copy"
    return "other"


def profile_step(parts: dict, top=40) -> dict:
    """GPU kernels of one training step, from the profiler, run as its ``parts`` (name
    -> function, run in order, each profiled on its own): the count, the kernel time
    per class (``kernel_class``) in all and per part, and the ``top`` non-matmul
    kernels by time."""
    from torch.profiler import ProfilerActivity, profile

    per_class = {"matmul": 0.0, "copy": 0.0, "other": 0.0}
    per_part: dict = {}
    per_name: dict = {}
    count = 0
    for part, fn in parts.items():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        mine = per_part[part] = {"matmul": 0.0, "copy": 0.0, "other": 0.0}
        for e in prof.events():
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            count += 1
            us = e.time_range.elapsed_us()
            c = kernel_class(e.name)
            per_class[c] += us
            mine[c] += us
            if c != "copy":
                n, t = per_name.get((c, e.name), (0, 0.0))
                per_name[(c, e.name)] = (n + 1, t + us)

    def heaviest(cls, k):
        rows = sorted(((n, ct) for (c, n), ct in per_name.items() if c == cls), key=lambda kv: -kv[1][1])[:k]
        return [{"name": n[:120], "calls": c, "ms": t / 1e3} for n, (c, t) in rows]

    ms = lambda d: {c: us / 1e3 for c, us in d.items()}  # noqa: E731
    return {"gpu_kernels": count, "kernel_ms": ms(per_class), "kernel_ms_parts": {p: ms(d) for p, d in per_part.items()},
            "top_other": heaviest("other", top), "top_matmul": heaviest("matmul", 8)}


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a kernel argument addresses: a broadcast dim
    (stride 0) counts once."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size()


def kernel_traffic(step) -> dict:
    """pyfuser kernel name -> bytes its tensor arguments address in one ``step()``
    (inputs and outputs each once; with the profiler's times, each kernel's GB/s)."""
    from ..runtime import executor

    old, executor.RECORD_LAUNCHES = executor.RECORD_LAUNCHES, []
    try:
        step()
        rec = executor.RECORD_LAUNCHES
    finally:
        executor.RECORD_LAUNCHES = old
    out: dict = {}
    for fn, _, args, _ in rec:
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", str(fn))
        out[name] = out.get(name, 0) + sum(tensor_bytes(a) for a in args if isinstance(a, torch.Tensor))
    return out


def pyfuser_kernel_rows(prof_rows, traffic: dict) -> list:
    """The profiler's pyfuser kernels with the bytes they move and their GB/s."""
    rows = []
    for r in prof_rows or []:
        b = traffic.get(r["name"])
        if b is None:
            continue
        rows.append(dict(r, mb=b / 1e6, gbps=b / (r["ms"] * 1e6) if r["ms"] else None))
    return rows


def cprofiled(fn, sort="tottime", top=30) -> str:
    """Run ``fn()`` under cProfile (synchronizing the GPU before stopping); the top
    ``top`` functions by ``sort`` ("tottime": own time, "cumulative"), as text."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(sort).print_stats(top)
    return out.getvalue()
