"""Scheduler variants of a zoo model's own fusions, each kernel timed alone (GPU).

    PYTHONPATH=src python benchmarks/zoo_sweep.py vit --layers 1 \
        --variants "block_k=8,num_warps=2; block_k=16,num_warps=4"

The model is built at the zoo bench's full width (``zoo_bench.full_width``) and trains
one step through the backend with CUDA graphs off, every FusionDefinition's first
inputs kept (copies).  The fusions reading a [batch, heads, seq, seq] tensor
(attention's scores and their gradients) then run as
planned and under each variant (``schedulers.Choices``, fields as ``name=value``
pairs, variants separated by ``;``), each result checked against the planned run's,
and every kernel launch is timed alone (``do_bench``, median).  The table gives per
kernel and variant the ms, the GB/s of the bytes its tensor arguments address, and
its params (the kernel source's scheduler line): what a heuristic should pick for
the model's own shapes, strides and neighbours.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import os

import torch
import triton


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a zoo model: bert, gpt2, llama, t5, vit")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--variants", default="", help='"field=value,field=value; ..." (schedulers.Choices)')
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a GPU")
    os.environ["PYFUSER_CUDA_GRAPHS"] = "0"
    import pyfuser.dynamo  # noqa: F401 - registers the backend
    from pyfuser import FusionDefinition
    from pyfuser.bench import zoo_bench

    variants = [dict((k.strip(), ast.literal_eval(v)) for k, v in (f.split("=", 1) for f in part.split(",")))
                for part in args.variants.split(";") if part.strip()]
    seen: dict = {}
    execute = FusionDefinition.execute

    def keep(self, inputs, *a, **kw):
        if self.id not in seen:
            seen[self.id] = (self, [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        return execute(self, inputs, *a, **kw)

    model, batch, amp = zoo_bench.full_width(args.model, args.layers)
    FusionDefinition.execute = keep
    try:
        step = zoo_bench.training_step(model, torch.compile(model, backend="pyfuser"), batch, amp)
        step()
    finally:
        FusionDefinition.execute = execute
    torch.cuda.synchronize()
    picked = [(fd, inputs) for fd, inputs in seen.values() if _reads_scores(inputs)]
    print(f"{args.model}, {args.layers} layer(s): {len(seen)} fusions, {len(picked)} read attention scores")
    sweep(picked, variants)


def sweep(picked, variants):
    """Each fusion of ``picked`` ((fd, inputs) pairs) as planned and under each
    variant, its kernels timed alone, one line per kernel and variant."""
    from pyfuser.bench.kernel_stats import execute_recorded
    from pyfuser.bench.step_profile import tensor_bytes
    from pyfuser.schedulers import Choices

    print(f"{'fusion':>6} {'kernel':16} {'variant':34} {'ms':>7} {'GB/s':>6} {'max err':>9}  params")
    for fd, inputs in picked:
        want = fd.execute(inputs)
        for v in [{}] + variants:
            label = ",".join(f"{k}={x}" for k, x in v.items()) or "as planned"
            try:
                with Choices(**v):
                    outs, rec, _ = execute_recorded(fd, inputs)
            except Exception as err:  # a variant the scheduler refuses: say so, go on
                print(f"{fd.id:6d} {'-':16} {label:34} {type(err).__name__}: {str(err)[:80]}")
                continue
            err = max(((o.float() - w.float()).abs().max().item() for o, w in zip(outs, want)), default=0.0)
            for fn, grid, kargs, kw in rec:
                ms = triton.testing.do_bench(lambda: fn[grid](*kargs, **kw), warmup=25, rep=200,
                                             return_mode="median")
                mb = sum(tensor_bytes(a) for a in kargs if isinstance(a, torch.Tensor)) / 1e6
                print(f"{fd.id:6d} {_name(fn):16} {label:34} {ms:7.4f} {mb / ms:6.0f} {err:9.2e}  {_params(fn)}",
                      flush=True)


def _reads_scores(inputs) -> bool:
    return any(isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[-1] == x.shape[-2] > 1 for x in inputs)


def _name(fn) -> str:
    return getattr(getattr(fn, "fn", None), "__name__", str(fn))


def _params(fn) -> str:
    """The kernel source's ``# scheduler:`` line."""
    try:
        src = open(inspect.getsourcefile(fn.fn)).read()
    except (OSError, TypeError, AttributeError):
        return "?"
    return next((line[len("# scheduler: "):] for line in src.splitlines() if line.startswith("# scheduler: ")), "?")


if __name__ == "__main__":
    main()
