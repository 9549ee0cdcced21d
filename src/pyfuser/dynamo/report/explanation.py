"""``pyfuser.dynamo.explain(model, *inputs)``: what the backend fuses, as data.

    import pyfuser.dynamo as pd
    e = pd.explain(model, x)                       # compiles and runs model(x) (and its backward)
    e.fused_ops                                    # share of non-matmul, non-view ATen ops in regions
    for r in e.regions: print(r.name, r.fusion_ids, [n.name for n in r.nodes], r.sources)
    for o in e.outside: print(o.node.name, o.node.target, o.code, o.reason.detail, o.node.source)
    e.rejections                                   # (region, segment, scheduler, code) run as torch ops
    print(e)                                       # the TORCH_LOGS="pyfuser" text
    print(e.program())                             # each region's FusionDefinitions and kernels' source
    e.definitions(), e.kernels()                   # the same as data, by region name

The model is compiled with ``backend="pyfuser"`` and ``dynamic=False`` afresh (a
backend of its own, so Dynamo compiles it again even if it was compiled before; static
shapes, which the backend fuses) and called once with the
inputs; when the result has a loss that requires grad (a tensor, or a ``.loss``
attribute as ``transformers`` outputs have), its backward runs too and the backward
graph is explained beside the forward.  Gradients the call accumulates are put back
as they were.  The reports are ``report.GraphReport`` objects, one per ATen graph
(forward, backward or inference), built after the run, so each region's segments
(``fd.explain``) are those of the plans its first run made.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import logs, reports as report
from ..backend import pyfuser_backend


@dataclass(frozen=True)
class Explanation:
    graphs: tuple  # report.GraphReport of each graph compiled, in compile order

    @property
    def regions(self) -> tuple:
        return tuple(r for g in self.graphs for r in g.regions)

    @property
    def outside(self) -> tuple:
        return tuple(o for g in self.graphs for o in g.outside)

    @property
    def rejections(self) -> tuple:
        """(region name, segment index, scheduler, code) of every segment that runs as torch ops."""
        return tuple((r.name, s.index, sched, code) for r in self.regions for s, sched, code in r.rejections)

    @property
    def fused_ops(self) -> float:
        """The share of non-matmul, non-view ATen ops, over all graphs, inside fused regions."""
        inside = sum(g.counts.get("inside", 0) for g in self.graphs)
        total = inside + sum(g.counts.get("outside", 0) for g in self.graphs)
        return inside / total if total else 1.0

    def reasons(self) -> dict:
        """Reason code -> number of non-matmul, non-view ops left outside for it."""
        out: dict = {}
        for g in self.graphs:
            for code, n in g.reasons().items():
                out[code] = out.get(code, 0) + n
        return out

    def definitions(self, region: str | None = None) -> dict:
        """Region name -> ``print(fd)``'s text of each of its FusionDefinitions (of
        region ``region`` alone when given)."""
        return {r.name: [text for _, text in r.definitions] for r in self._regions(region)}

    def kernels(self, region: str | None = None) -> dict:
        """Region name -> the ``report.Kernel`` (name, scheduler, Triton source) of each
        kernel its fusions ran (of region ``region`` alone when given)."""
        return {r.name: list(r.kernels) for r in self._regions(region)}

    def program(self, region: str | None = None) -> str:
        """The program that ran, as text: per region its FX nodes, each FusionDefinition
        and each kernel's source (what ``TORCH_LOGS="+pyfuser"`` logs)."""
        lines = []
        for r in self._regions(region):
            lines.append(f"# region {r.name}: {', '.join(f'{n.name} = {n.target}' for n in r.nodes)}")
            if not r.fused:
                lines.append(f"# runs in ATen: {r.fallback}")
            for fid, text in r.definitions:
                lines += [f"# fusion{fid}", text.rstrip("\n")]
            for k in r.kernels:
                lines += [f"# fusion{k.fusion_id}: kernel {k.name} ({k.scheduler})", k.source.rstrip("\n")]
            lines.append("")
        return "\n".join(lines)

    def _regions(self, name):
        found = [r for r in self.regions if name is None or r.name == name]
        if name is not None and not found:
            raise KeyError(f"explain: no region {name!r}; regions: {', '.join(r.name for r in self.regions)}")
        return found

    def __str__(self):
        return "\n".join(line for g in self.graphs for line in logs.summary_lines(g))


def _loss(out):
    """The scalar to differentiate: a tensor's sum, a ``.loss``, or the sum of the float
    tensors of a tuple / list / dict; None where nothing requires grad."""
    if isinstance(out, torch.Tensor):
        return out.sum() if out.requires_grad else None
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss.sum()
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    parts = [x.float().sum() for x in items if isinstance(x, torch.Tensor) and x.requires_grad]
    return sum(parts[1:], parts[0]) if parts else None


def explain(model, *inputs, run_backward: bool | None = None, **kwargs) -> Explanation:
    """Compile ``model`` with the pyfuser backend, call ``model(*inputs, **kwargs)`` once
    (and the backward of its loss unless ``run_backward=False``; None: when it has one)
    and return what each compiled graph fused and why the rest is not."""

    def backend(gm, example_inputs, **kw):  # a new backend: Dynamo compiles the model again
        return pyfuser_backend(gm, example_inputs, **kw)

    compiled = torch.compile(model, backend=backend, dynamic=False)  # the backend fuses static shapes
    leaves = [p for p in (model.parameters() if isinstance(model, torch.nn.Module) else ())]
    leaves += [x for x in list(inputs) + list(kwargs.values()) if isinstance(x, torch.Tensor) and x.requires_grad]
    grads = [p.grad for p in leaves]
    with logs.collecting() as found:
        out = compiled(*inputs, **kwargs)
        loss = _loss(out) if run_backward is not False and torch.is_grad_enabled() else None
        if loss is not None:
            loss.backward()
    for p, g in zip(leaves, grads):
        p.grad = g
    return Explanation(tuple(report.build(gm, rep.name, rep.kind, explain=True) for rep, gm in found))


def fused_share(model, *inputs, **kwargs) -> dict:
    """Graph kind ("forward", "backward", "inference") and "all" -> the share of its
    non-matmul, non-view ATen ops inside fused regions, for one call of ``model`` (and its
    backward when the loss requires grad)."""
    e = explain(model, *inputs, **kwargs)
    out = {}
    for kind in dict.fromkeys(g.kind for g in e.graphs):
        out[kind] = Explanation(tuple(g for g in e.graphs if g.kind == kind)).fused_ops
    out["all"] = e.fused_ops
    return out
