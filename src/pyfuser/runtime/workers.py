"""A pool of worker processes that compile kernels in parallel (``ahead.py``).

Why processes: Triton's compile holds the GIL through its MLIR passes, so threads
compile one at a time; only ptxas runs beside them.

Why not ``multiprocessing``: its spawn and forkserver starts import the user's main
module again in every worker (a training script without an ``if __name__ ==
"__main__"`` guard would start training again), and its fork start copies a process
that holds a CUDA context and torch's threads.  A worker here is a fresh
``python -m pyfuser.runtime.workers``: it imports torch and Triton and never touches
CUDA.

Protocol: pickled ``(function's qualified name, arguments)`` in on the worker's
stdin, ``("ok", result)`` or ``("error", text)`` out on a private copy of its
stdout.  The worker points its own fd 1 at its stderr first, so nothing a compile
prints can corrupt the stream; its stderr is the parent's only at ``PYFUSER_LOG=debug``.
A job whose worker dies fails (``WorkerError``) and the worker is started again for the
next job.  A worker idle for ``PYFUSER_COMPILE_WORKERS_IDLE`` seconds exits: a training
run compiles in its first steps, and a dozen idle workers would hold a few GB of the
machine's memory for the rest of it; a later graph's jobs start them again.  Every end
is the pool's: its threads are daemons, and at exit its workers are killed (a compile
in hand is of no use to a process that ends).  ``start`` starts every worker before any
job: a worker's imports (about 2 s) then overlap what the caller does meanwhile (the
backend traces the graph whose kernels they will compile).
"""
from __future__ import annotations

import atexit
import importlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future

from ..errors import PyfuserError
from ..settings import read


class WorkerError(PyfuserError, RuntimeError):
    """A job that failed in a worker, or whose worker died; the message says which."""


def worker_env(extra: dict) -> dict:
    """The environment of a worker: this process's, the directory holding this
    ``pyfuser`` first on ``PYTHONPATH`` (it may have come from ``sys.path``, not the
    environment), and ``extra``."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra)
    return env


class Pool:
    """Up to ``size`` worker processes, each served by a thread of this process that
    hands it one job at a time from the shared queue.  ``submit`` returns a
    ``Future``; each of the first ``size`` submissions starts a thread, whose worker
    process starts with its first job."""

    def __init__(self, size: int, env: dict, idle: float | None = None):
        self.size, self.env = size, env
        self.idle = read("compile_workers_idle") if idle is None else idle  # seconds; 0: never
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.threads: list = []
        self.procs: set = set()
        self.lock = threading.Lock()
        self.closed = False

    def submit(self, function: str, *args) -> Future:
        """Run ``function`` (``module.name``) with ``args`` in a worker."""
        future: Future = Future()
        with self.lock:
            if self.closed:
                raise WorkerError("workers: the pool is closed")
            self.jobs.put((future, function, args))
            if len(self.threads) < self.size:
                self._add_thread()
        return future

    def start(self):
        """Start all ``size`` workers now, without a job (each exits when idle, as any)."""
        with self.lock:
            if self.closed:
                raise WorkerError("workers: the pool is closed")
            while len(self.threads) < self.size:
                self._add_thread(start=True)

    def _add_thread(self, start=False):
        thread = threading.Thread(target=self._serve, args=(start,), name=f"pyfuser-worker-{len(self.threads)}",
                                  daemon=True)
        self.threads.append(thread)
        thread.start()

    def _start(self):
        quiet = read("log") != "debug"
        proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL if quiet else None, env=self.env)
        with self.lock:
            self.procs.add(proc)
        return proc

    def _stop(self, proc):
        for close in (proc.stdin.close, proc.stdout.close):
            try:
                close()
            except OSError:
                pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with self.lock:
            self.procs.discard(proc)  # (once it has exited: ``procs`` are the live workers)

    def _serve(self, start=False):
        proc = None
        if start:
            try:
                proc = self._start()
            except OSError:  # the first job tries again, and fails saying why
                proc = None
        while True:
            try:
                item = self.jobs.get(timeout=self.idle if proc is not None and self.idle > 0 else None)
            except queue.Empty:  # idle: the worker goes, the next job starts another
                self._stop(proc)
                proc = None
                continue
            if item is None:
                break
            future, function, args = item
            if future.set_running_or_notify_cancel():
                try:
                    if proc is None:
                        proc = self._start()
                    pickle.dump((function, args), proc.stdin)
                    proc.stdin.flush()
                    status, value = pickle.load(proc.stdout)
                except Exception as err:  # the worker died or the pipe broke: this job fails, a new worker follows
                    if proc is not None:
                        proc.kill()
                        self._stop(proc)
                        proc = None
                    future.set_exception(WorkerError(f"workers: the worker running {function} failed: "
                                                     f"{type(err).__name__}: {err}"))
                else:
                    if status == "ok":
                        future.set_result(value)
                    else:
                        future.set_exception(WorkerError(f"workers: {function}: {value}"))
        if proc is not None:
            self._stop(proc)

    def close(self, kill: bool = False):
        """Stop the workers: they finish the job in hand (``kill``: they are killed,
        and that job fails too); jobs not started fail."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            threads = list(self.threads)
            running = list(self.procs)
        if kill:
            for proc in running:
                proc.kill()
        pending = []
        while True:
            try:
                pending.append(self.jobs.get_nowait())
            except queue.Empty:
                break
        for future, function, _ in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(WorkerError(f"workers: the pool closed before {function} ran"))
        for _ in threads:
            self.jobs.put(None)
        for thread in threads:
            thread.join(timeout=5 if kill else None)


_POOL: list = []  # the process's pool, once started
_POOL_LOCK = threading.Lock()


def pool(size: int, env: dict) -> Pool:
    """The process's pool (``size`` and ``env`` apply when it starts), closed at exit."""
    with _POOL_LOCK:
        if not _POOL or _POOL[0].closed:
            if not _POOL:
                atexit.register(close)
            _POOL[:] = [Pool(size, env)]
        return _POOL[0]


def running() -> bool:
    """Whether the process's pool has live workers (started, not yet idle)."""
    with _POOL_LOCK:
        p = _POOL[0] if _POOL else None
    if p is None or p.closed:
        return False
    with p.lock:
        return bool(p.procs)


def close():
    """Close the process's pool, if one started, killing its workers: at exit nobody
    waits for their results."""
    with _POOL_LOCK:
        p = _POOL[0] if _POOL else None
    if p is not None:
        p.close(kill=True)


def main():
    """A worker's loop: jobs from stdin until its end, results to the private stream."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    while True:
        try:
            function, args = pickle.load(inp)
        except (EOFError, OSError):
            return
        try:
            module, _, name = function.rpartition(".")
            result = ("ok", getattr(importlib.import_module(module), name)(*args))
        except BaseException as err:  # reported to the parent, which decides
            result = ("error", f"{type(err).__name__}: {err}")
        try:
            pickle.dump(result, out)
            out.flush()
        except (BrokenPipeError, OSError):
            return


if __name__ == "__main__":
    main()
