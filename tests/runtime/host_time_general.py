"""Host time per execute of general plans on CPU, kernel launches stubbed:

    .venv/bin/python -m tests.runtime.host_time_general [name ...]

For each fusion of ``general_fusions.GENERAL``: the uncached general path
(``_execute_general`` on every execute) and the cached program (``Prepared.run``).
Kernels are replaced by no-ops after two real executes, as ``pyfuser.bench.host_bench``
does, so the numbers are Python and torch host time (host steps' torch calls
included), not kernel time.
"""
import gc
import sys
import time

from pyfuser.runtime import executor

from .general_fusions import GENERAL, define


def _noop(*args, **kwargs):
    pass


class _StubKernel:
    def __getitem__(self, grid):
        return _noop


def stub(fd):
    rt = fd._runtime
    for key, (src, _) in list(rt.kernels.items()):
        rt.kernels[key] = (src, _StubKernel())
    for prep in rt.prepared.values():
        prep.launches = [(la[0], _StubKernel()) + tuple(la[2:]) for la in prep.launches]
        prep.direct = {}


def per_execute(name, n=200, repeat=7) -> float:
    build, make = GENERAL[name]
    fd = define(build)
    inputs = list(make(seed=0))
    fd.execute(inputs)
    fd.execute(inputs)
    stub(fd)
    fd.execute(inputs)
    gc.collect()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fd.execute(inputs)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def main(names):
    cacheable = executor.cacheable
    for name in names or list(GENERAL):
        executor.cacheable = lambda plan: False
        try:
            uncached = per_execute(name)
        finally:
            executor.cacheable = cacheable
        cached = per_execute(name)
        print(f"{name:22s} uncached {uncached * 1e6:7.1f} us   cached {cached * 1e6:6.1f} us per execute")


if __name__ == "__main__":
    main(sys.argv[1:])
