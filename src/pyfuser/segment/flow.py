"""The data flow between a plan's steps (``Flow``): what each reads, what must be
stored, which pairs of kernels are worth a merge, and a topological order."""
from __future__ import annotations

import heapq

from ..ir.ops import OPS, REDUCTION_KINDS
from ..ir.values import TensorVal
from .cuts import narrow_source
from .steps import step_reads
from .subfusion import needed_exprs


class Flow:
    """The data flow between a plan's steps: what each reads, and what must be stored."""

    def __init__(self, steps, keep):
        self.steps, self.keep = steps, keep  # keep: the fusion's outputs
        self.reads = [step_reads(s) for s in steps]

    def needed(self, v, skip) -> bool:
        """Whether ``v`` must be stored: a fusion output, or read by a step not in ``skip``."""
        return v in self.keep or any(v in r for k, r in enumerate(self.reads) if k not in skip)

    def union(self, i, j):
        """The outputs of steps i and j merged (what others still need) and what it reads."""
        outputs = []
        for o in self.steps[i].outputs + self.steps[j].outputs:
            if o not in outputs and self.needed(o, (i, j)):
                outputs.append(o)
        made = set(self.steps[i].outputs) | set(self.steps[j].outputs)
        return outputs, (self.reads[i] | self.reads[j]) - made

    def candidates(self, b) -> list:
        """Pairs (i, j), i before j, of kernel steps worth a merge, best first: a
        producer and its consumer when merging drops stored values (most first), then
        steps with reductions over the same axes of the same shape, then steps that
        read a common tensor or where one feeds the other; nearer pairs first.  Pairs
        sharing nothing are not tried: merging them would only save a launch."""
        axes = [_reduction_axes(s, b) for s in self.steps]
        kernels = [k for k, s in enumerate(self.steps) if s.scheduler is not None]
        ranked = []
        for n, i in enumerate(kernels):
            for j in kernels[n + 1:]:
                fed = set(self.steps[i].outputs) & self.reads[j]
                dropped = sum(1 for v in fed if not self.needed(v, (i, j)))
                if dropped:
                    rank = 0
                elif axes[i] & axes[j]:
                    rank = 1
                elif fed or tensors(self.reads[i] & self.reads[j]):
                    rank = 2
                else:
                    continue
                ranked.append(((rank, -dropped, j - i, i), i, j))
        return [(i, j) for _, i, j in sorted(ranked)]

    def order(self, i, j, merged, reads):
        """The steps with i and j replaced by ``merged`` (reading ``reads``), in a
        topological order that keeps the others' order where it can; None when the
        merged step would both feed and depend on a third step."""
        keys = [k for k in range(len(self.steps)) if k not in (i, j)]
        steps = [self.steps[k] for k in keys] + [merged]
        return _topological(steps, [self.reads[k] for k in keys] + [reads], keys + [i])

    def upcasts(self, base):
        """(producer, value, narrower value) for each value a kernel stores only for
        other kernels that is an upcast of a 16-bit value the producer computes."""
        for p, step in enumerate(self.steps):
            if step.scheduler is None:
                continue
            for x in step.outputs:
                readers = [self.steps[k] for k, r in enumerate(self.reads) if x in r]
                if x in self.keep or not readers or any(s.scheduler is None for s in readers):
                    continue
                u, casts = narrow_source(x, self.reads[p] | base)
                if casts:
                    yield p, x, u


def _topological(steps, reads, keys):
    """Kahn's algorithm taking the ready step with the smallest key; None on a cycle."""
    made: dict = {}
    for n, s in enumerate(steps):
        for o in s.outputs:
            made.setdefault(o, n)
    users = [[] for _ in steps]
    waiting = []
    for n, r in enumerate(reads):
        deps = {made[v] for v in r if v in made and made[v] != n}
        for d in deps:
            users[d].append(n)
        waiting.append(len(deps))
    ready = [(keys[n], n) for n in range(len(steps)) if not waiting[n]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, n = heapq.heappop(ready)
        out.append(steps[n])
        for m in users[n]:
            waiting[m] -= 1
            if not waiting[m]:
                heapq.heappush(ready, (keys[m], m))
    return out if len(out) == len(steps) else None


def _reduction_axes(step, b) -> frozenset:
    """(input shape, reduced dims) of each reduction a kernel step computes."""
    if step.scheduler is None:
        return frozenset()
    exprs = step.sub.exprs.values() if step.sub is not None else needed_exprs(step.outputs, ())
    found = set()
    for e in exprs:
        if OPS[e.op].kind in REDUCTION_KINDS:
            shape = tuple(b.shapes[e.inputs[0]])
            found.add((shape, tuple(sorted(d % max(len(shape), 1) for d in e.attrs["dims"]))))
    return frozenset(found)


def tensors(vals) -> frozenset:
    """The tensors among ``vals``."""
    return frozenset(v for v in vals if isinstance(v, TensorVal))
