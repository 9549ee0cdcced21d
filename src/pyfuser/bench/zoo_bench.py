"""The model zoo's training steps: eager vs torch.compile vs torch.compile(backend="pyfuser").

    python -m pyfuser.bench --model zoo                      # every model, full sizes, GPU
    python -m pyfuser.bench --model zoo --models gpt2,vit --steps 10
    python -m pyfuser.bench --model zoo --varlen gpt2                        # + a variable-length run
    python -m pyfuser.bench --model zoo --tiny --device cpu --steps 2        # a smoke test, not a benchmark

The models are ``pyfuser.bench.zoo``'s (random weights, eager attention, dropout off) at
the sizes of ``FULL``: BERT-base masked LM, GPT-2 small, a LLaMA-style decoder of about
1B parameters (TinyLlama's shape: grouped-query attention, RMSNorm, SiLU-gated MLP),
T5-base and ViT-B/16.  Each trains with AdamW under the autocast dtype it is usually
trained in (``FULL``'s ``amp``), every implementation from the same weights on the
same batches; the timed steps take turns (step i of each implementation before step
i + 1 of any), so that a host whose speed drifts slows every implementation alike.

Per model and implementation ``run_model`` returns the median step time (CUDA events
around each step), the kernel time of one forward + backward split into matmul and
non-matmul work (the profiler; ``bert_bench.profile_step``), the losses of the timed
steps, and the compilation counters: Dynamo graphs compiled (during warm-up and during
the timed steps: the latter are recompiles), pyfuser's FusionDefinitions, fused
regions, fallbacks to ATen and kernels compiled.

``--varlen MODEL`` adds one run whose sequence length is drawn from a range at every
step (``VARLEN_LENGTHS`` distinct lengths), then the same lengths three times more,
under torch.compile's default dynamic-shape behaviour; it reports the pyfuser kernels
compiled per kernel of the first length and the median step at lengths met for the
first time, for the second or third time (caches settle: pyfuser builds a program's
straight line at its second run and records a CUDA graph per length at the third)
and after that (a long training run's steady state), next to a fixed-length run at
the same mean length.
"""
from __future__ import annotations

import argparse
import copy
import gc
import inspect
import json
import statistics
import sys
import time

import torch

from ..runtime.cache import binaries
from . import zoo
from .bert_bench import paired_speedup, profile_step

IMPLEMENTATIONS = ("eager", "inductor", "pyfuser")
# Full sizes: zoo builder arguments, batch size and autocast dtype per model.
FULL = {
    "bert": dict(sizes=dict(hidden=768, layers=12, heads=12, intermediate=3072, vocab=30522, seq=128),
                 batch=64, amp=torch.float16),
    "gpt2": dict(sizes=dict(hidden=768, layers=12, heads=12, vocab=50257, seq=1024), batch=8, amp=torch.bfloat16),
    "llama": dict(sizes=dict(hidden=2048, layers=22, heads=32, kv_heads=4, intermediate=5632, vocab=32000, seq=1024),
                  batch=4, amp=torch.bfloat16),
    "t5": dict(sizes=dict(hidden=768, layers=12, heads=12, ff=3072, vocab=32128, seq=512, target_seq=128),
               batch=16, amp=torch.bfloat16),
    "vit": dict(sizes=dict(hidden=768, layers=12, heads=12, intermediate=3072, image=224, patch=16, labels=1000),
                batch=64, amp=torch.bfloat16),
}
TINY = {name: dict(sizes={}, batch=4, amp=torch.bfloat16) for name in FULL}
MODELS = tuple(FULL)
VARLEN_LENGTHS = 20


def full_width(name: str, layers: int, device="cuda"):
    """(model, batch, autocast dtype): a zoo model at the bench's full width with
    ``layers`` layers and its first full-size batch, on ``device``; what the
    per-kernel tools (benchmarks/zoo_kernels.py, zoo_copies.py) profile."""
    full = FULL[name]
    built = getattr(zoo, name)(**dict(full["sizes"], layers=layers))
    batch = {k: v.to(device) for k, v in built.batch(full["batch"], torch.Generator().manual_seed(0)).items()}
    return built.model.to(device), batch, full["amp"]


def training_step(model, compiled, batch, amp, device="cuda"):
    """A function running one forward and backward of ``compiled`` (``model``, maybe
    compiled) on ``batch`` under autocast to ``amp``, dropping the gradients after."""
    def step():
        with torch.autocast(device, dtype=amp):
            loss = zoo.loss(compiled(**batch))
        loss.backward()
        model.zero_grad(set_to_none=True)
    return step


SLOW_STEP_S = 5.0  # a step longer than this compiled something; the bench prints a line for it


def _counters() -> dict:
    import pyfuser
    import pyfuser.dynamo as pd

    s = pd.stats()
    return {"graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
            "fusions": s.get("fusions_created", 0), "regions": s.get("regions", 0),
            "fallbacks": s.get("fallbacks", 0), "kernels_compiled": pyfuser.cache_info()["kernels_compiled"],
            "binaries": binaries(),
            **{f"{k}_{role}": s.get(f"{k}_{role}", 0)
               for k in ("graph_captures", "graph_replays", "graph_misses", "graph_sizes_uncaptured")
               for role in ("forward", "backward")}}


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def _compiled(impl: str, model, dynamic):
    if impl == "pyfuser":
        return torch.compile(model, backend="pyfuser", dynamic=dynamic)
    if impl == "inductor":
        return torch.compile(model, dynamic=dynamic)
    if impl == "eager":
        return model
    raise ValueError(f"zoo_bench: unknown implementation {impl!r}; expected one of {IMPLEMENTATIONS}")


class _Run:
    """One implementation of one model: its own copy of the weights, optimizer and
    random state; steps are run and timed one at a time so that implementations can
    take turns."""

    def __init__(self, impl, built: zoo.ZooModel, state, device, amp, dynamic, lr=1e-4, seed=0, label=""):
        model = copy.deepcopy(built.model)
        model.load_state_dict(state)
        model.to(device).train()
        self.impl, self.device, self.amp = impl, torch.device(device), amp
        self.cuda = self.device.type == "cuda"
        self.fn = _compiled(impl, model, dynamic)
        self.opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        gen = torch.cuda if self.cuda else torch
        saved = gen.get_rng_state()
        gen.manual_seed(seed)
        self.rng = gen.get_rng_state()
        gen.set_rng_state(saved)
        self.times, self.losses, self.counts = [], [], {}
        self.first_step_s, self.label, self.steps = None, label, 0

    def _on_device(self, batch):
        return {k: v.to(self.device) for k, v in batch.items()}

    def model_step(self, batch):
        with torch.autocast(self.device.type, dtype=self.amp):
            loss = zoo.loss(self.fn(**batch))
        loss.backward()
        return loss.detach()

    def optimizer_step(self):
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def step(self, batch, timed: bool, phase: str):
        """One training step; its compilation counters go to ``phase``."""
        gen = torch.cuda if self.cuda else torch
        saved = gen.get_rng_state()
        gen.set_rng_state(self.rng)
        before, t0 = _counters(), time.perf_counter()
        try:
            if timed and self.cuda:
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            loss = self.model_step(batch)
            self.optimizer_step()
            if timed and self.cuda:
                stop.record()
                stop.synchronize()
                self.times.append(start.elapsed_time(stop))
            elif timed:
                self.times.append((time.perf_counter() - t0) * 1e3)
            if timed:
                self.losses.append(float(loss))
            elif self.first_step_s is None:
                if self.cuda:
                    torch.cuda.synchronize()
                self.first_step_s = time.perf_counter() - t0
        finally:
            self.rng = gen.get_rng_state()
            gen.set_rng_state(saved)
        delta = _delta(_counters(), before)
        for k, v in delta.items():
            self.counts[f"{phase}_{k}"] = self.counts.get(f"{phase}_{k}", 0) + v
        self.steps += 1
        elapsed = time.perf_counter() - t0
        if elapsed > SLOW_STEP_S:  # a compiling step: say so, so that a long run is never silent
            print(f"[zoo] {self.label} {self.impl}, {phase} step {self.steps}: {elapsed:.1f} s, "
                  f"{delta['graphs']} new Dynamo graph(s), {delta['kernels_compiled']} pyfuser kernel(s) compiled, "
                  f"{delta['binaries']} Triton binaries compiled, "
                  f"{delta['fallbacks']} fallback(s)", flush=True)

    def breakdown(self, batch) -> dict:
        """Where one step's wall time goes: the host's time in the forward call, the
        backward call and the optimizer (``perf_counter`` around each, no
        synchronization), then the wait for the GPU to finish; with the backend's
        counters of that step (region calls, CUDA-graph replays and misses).  A wait
        near zero means the step is host-bound."""
        import pyfuser.dynamo as pd

        torch.cuda.synchronize()
        before = pd.stats()
        t0 = time.perf_counter()
        with torch.autocast(self.device.type, dtype=self.amp):
            loss = zoo.loss(self.fn(**batch))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.optimizer_step()
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        t4 = time.perf_counter()
        after = pd.stats()
        counts = {k: after.get(k, 0) - before.get(k, 0) for k in ("region_calls", "graph_replays", "graph_misses")}
        return {"forward_ms": (t1 - t0) * 1e3, "backward_ms": (t2 - t1) * 1e3, "optimizer_ms": (t3 - t2) * 1e3,
                "gpu_wait_ms": (t4 - t3) * 1e3, "wall_ms": (t4 - t0) * 1e3, **counts}

    def results(self, last_batch) -> dict:
        prof = None
        if self.cuda:
            prof = profile_step({"model": lambda: self.model_step(last_batch), "optimizer": self.optimizer_step})
        return {"median_ms": statistics.median(self.times) if self.times else None, "times_ms": self.times,
                "losses": self.losses, "first_step_s": self.first_step_s, "counts": self.counts,
                "kernel_ms": prof["kernel_ms_parts"]["model"] if prof else None,
                "top_other_kernels": prof["top_other"][:12] if prof else None,
                # the process's, all implementations of the run together
                "memory_reserved_gb": torch.cuda.memory_reserved() / 1e9 if self.cuda else None}


def _batches(built: zoo.ZooModel, batch: int, n: int, seed: int, lengths=None) -> list:
    """``n`` batches; with ``lengths``, the i-th cut to ``lengths[i]`` tokens (every
    sequence-shaped input: ids, masks, labels), contiguous as a data loader gives them."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        b = built.batch(batch, g)
        if lengths is not None:
            b = {k: v[:, :lengths[i]].contiguous() if v.dim() == 2 else v for k, v in b.items()}
        out.append(b)
    return out


def run_model(name, *, steps=10, warmup=3, device="cuda", tiny=False, implementations=IMPLEMENTATIONS,
              lengths=None, dynamic=False, seed=0, breakdown=0, host_profile=False) -> dict:
    """Train zoo model ``name`` with each implementation; ``{implementation: results}``.
    ``lengths`` (one per step, warm-up included) cuts each batch's sequences.
    ``breakdown`` more steps per implementation (on the GPU) are split into host and
    GPU time (``_Run.breakdown``: medians per part); ``host_profile`` adds a cProfile
    of one step (``step_profile.cprofiled``), its text under ``"host_profile"``."""
    spec = (TINY if tiny else FULL)[name]
    built = zoo.build(name, seed, **spec["sizes"])
    state = copy.deepcopy(built.model.state_dict())
    batches = _batches(built, spec["batch"], warmup + steps, seed + 1, lengths)
    torch._dynamo.reset()
    # Every implementation compiles the same model code (transformers' decorated
    # forwards share one code object), each backend's entries fail the others' match,
    # and a variable-length run adds a dynamic entry per backend: past Dynamo's limit
    # of 8 entries per code object the rest of the run would silently run eagerly.
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))
    import pyfuser.dynamo.regions.region as region

    region.forget_translations()
    label = name if lengths is None else f"{name} at lengths {min(lengths)}..{max(lengths)}"
    runs = {impl: _Run(impl, built, copy.deepcopy(state), device, spec["amp"], dynamic, seed=seed + 2, label=label)
            for impl in implementations}
    for b in batches[:warmup]:
        for run in runs.values():
            run.step(run._on_device(b), timed=False, phase="warmup")
    gc.collect()  # compilation's garbage, collected before a timed step could trigger it
    for b in batches[warmup:]:
        for run in runs.values():
            run.step(run._on_device(b), timed=True, phase="timed")
    results = {}
    for impl, run in runs.items():
        results[impl] = run.results(run._on_device(batches[-1]))
        if breakdown and run.cuda:
            parts = [run.breakdown(run._on_device(batches[-1 - i % len(batches)])) for i in range(breakdown)]
            results[impl]["breakdown"] = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
        if host_profile:
            from .step_profile import cprofiled

            last = run._on_device(batches[-1])
            results[impl]["host_profile"] = cprofiled(lambda: (run.model_step(last), run.optimizer_step()), top=25)
        del run
    runs.clear()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return results


def loss_gap(results: dict, impl: str) -> float | None:
    """The largest relative difference of ``impl``'s losses from eager's, step by step."""
    ref, mine = results.get("eager", {}).get("losses"), results.get(impl, {}).get("losses")
    if not ref or not mine:
        return None
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(mine, ref))


def _non_matmul(r) -> float | None:
    k = r.get("kernel_ms")
    return None if not k else k["other"] + k["copy"]


def markdown_rows(name: str, results: dict) -> list:
    ind = results.get("inductor", {})
    rows = []
    for impl, r in results.items():
        c = r["counts"]
        t, nm, ind_nm = r["median_ms"], _non_matmul(r), _non_matmul(ind)
        vs_ind = f"{ind['median_ms'] / t:.2f}x" if ind.get("median_ms") and t else "-"
        paired = "-"
        if impl != "inductor" and ind.get("times_ms") and r["times_ms"]:
            paired = f"{paired_speedup(r['times_ms'], ind['times_ms'])[0]:.2f}x"
        nm_vs = f"{ind_nm / nm:.2f}x" if nm and ind_nm else "-"
        gap = loss_gap(results, impl)
        rows.append(
            f"| {name} | {impl} | {t:.2f} | {vs_ind} | {paired} | {'-' if nm is None else f'{nm:.2f}'} | {nm_vs} "
            f"| {c.get('warmup_graphs', 0)} + {c.get('timed_graphs', 0)} | {c.get('warmup_fusions', 0)} "
            f"| {c.get('warmup_fallbacks', 0) + c.get('timed_fallbacks', 0)} "
            f"| {c.get('warmup_kernels_compiled', 0)} + {c.get('timed_kernels_compiled', 0)} "
            f"| {'-' if gap is None else f'{gap:.1e}'} | {r['first_step_s']:.1f} |")
    return rows


HEADER = ["| model | implementation | median step (ms) | vs torch.compile | paired vs torch.compile "
          "| non-matmul kernel ms (fwd+bwd) | non-matmul vs torch.compile | Dynamo graphs (warm-up + timed) "
          "| fusions | fallbacks | pyfuser kernels compiled (warm-up + timed) | max loss gap vs eager "
          "| first step (s) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def varlen_lengths(seq: int, n: int, distinct: int, seed: int) -> list:
    """``n`` sequence lengths drawn from ``distinct`` values between seq / 2 and seq
    (multiples of 8 where the range allows), every value at least once."""
    lo = max(seq // 2, 1)
    step = 8 if (seq - lo) >= 8 * (distinct - 1) else 1
    values = sorted({min(seq, lo + step * i) for i in range(distinct)})
    g = torch.Generator().manual_seed(seed)
    draws = values + [values[int(i)] for i in torch.randint(0, len(values), (max(n - len(values), 0),), generator=g)]
    order = torch.randperm(len(draws), generator=g).tolist()
    return [draws[i] for i in order][:n]


def run_varlen(name, *, steps, warmup, device, tiny, seed=0, implementations=("inductor", "pyfuser")) -> dict:
    """A run at a new sequence length each step, then the same lengths three times more (what
    a long training run meets once every length has been seen), and a fixed-length run
    at the mean.  Each variable step's time is filed by how often its length came
    before (``split_by_novelty``)."""
    spec = (TINY if tiny else FULL)[name]
    seq = spec["sizes"].get("seq") or inspect.signature(zoo.BUILDERS[name]).parameters.get("seq")
    if seq is None:
        raise ValueError(f"--varlen: model {name!r} has no sequence length")
    seq = seq if isinstance(seq, int) else seq.default
    n = warmup + steps
    lengths = varlen_lengths(seq, n, min(VARLEN_LENGTHS, n), seed)
    lengths += lengths[warmup:] * 3
    var = run_model(name, steps=len(lengths) - warmup, warmup=warmup, device=device, tiny=tiny, lengths=lengths,
                    dynamic=None, implementations=implementations, seed=seed)
    for r in var.values():
        r.update(split_by_novelty(r["times_ms"], lengths, warmup))
    ms = lambda t: "-" if t is None else f"{t:.2f}"  # noqa: E731
    print(f"[zoo] {name} at {len(set(lengths))} lengths: median step "
          + ", ".join(f"{impl} {ms(r['median_new_ms'])} ms at new lengths, {ms(r['median_settling_ms'])} at their "
                      f"second and third meetings, {ms(r['median_seen_ms'])} after that"
                      for impl, r in var.items()), flush=True)
    mean = int(round(statistics.mean(lengths[warmup:])))
    fixed = run_model(name, steps=steps, warmup=warmup, device=device, tiny=tiny, lengths=[mean] * n,
                      dynamic=None, implementations=implementations, seed=seed)
    return {"lengths": lengths, "mean_length": mean, "variable": var, "fixed": fixed}


def split_by_novelty(times, lengths, warmup) -> dict:
    """The medians of the timed steps whose length is new (not met in an earlier step,
    warm-up included), met once or twice before (``settling``: straight lines and CUDA
    graphs are built at those meetings) and met three times or more (``seen``: the
    steady state)."""
    met: dict = {}
    for n in lengths[:warmup]:
        met[n] = met.get(n, 0) + 1
    groups = ([], [], [])
    for t, n in zip(times, lengths[warmup:]):
        before = met.get(n, 0)
        groups[0 if before == 0 else 1 if before < 3 else 2].append(t)
        met[n] = before + 1
    med = lambda ts: statistics.median(ts) if ts else None  # noqa: E731
    new, settling, seen = groups
    return {"median_new_ms": med(new), "median_settling_ms": med(settling), "median_seen_ms": med(seen),
            "new_steps": len(new), "settling_steps": len(settling), "seen_steps": len(seen)}


def varlen_rows(name, v) -> list:
    rows = []
    ms = lambda t: "-" if t is None else f"{t:.2f}"  # noqa: E731
    for impl in v["variable"]:
        r, f = v["variable"][impl], v["fixed"][impl]
        c = r["counts"]
        first = max(f["counts"].get("warmup_kernels_compiled", 0), 1)
        total = c.get("warmup_kernels_compiled", 0) + c.get("timed_kernels_compiled", 0)
        per_kernel = f"{total / first:.2f}" if impl == "pyfuser" else "-"
        seen = r.get("median_seen_ms")
        ratio = f"{seen / f['median_ms']:.3f}" if seen else "-"
        rows.append(f"| {name} | {impl} | {len(set(v['lengths']))} | {ms(r.get('median_new_ms'))} "
                    f"({r.get('new_steps', 0)}) | {ms(r.get('median_settling_ms'))} ({r.get('settling_steps', 0)}) "
                    f"| {ms(seen)} ({r.get('seen_steps', 0)}) | {f['median_ms']:.2f} "
                    f"| {ratio} | {c.get('warmup_graphs', 0) + c.get('timed_graphs', 0)} "
                    f"| {total} | {per_kernel} | {c.get('warmup_binaries', 0)} + {c.get('timed_binaries', 0)} "
                    f"| {c.get('warmup_fallbacks', 0) + c.get('timed_fallbacks', 0)} "
                    f"| {_recordings(c, 'forward')} + {_recordings(c, 'backward')} "
                    f"| {'-' if r.get('memory_reserved_gb') is None else format(r['memory_reserved_gb'], '.1f')} |")
    return rows


def _recordings(counts, role) -> int:
    return counts.get(f"warmup_graph_captures_{role}", 0) + counts.get(f"timed_graph_captures_{role}", 0)


def breakdown_rows(name: str, results: dict) -> list:
    rows = []
    for impl, r in results.items():
        b = r.get("breakdown")
        if b:
            k = r.get("kernel_ms") or {}
            rows.append(f"| {name} | {impl} | {b['wall_ms']:.2f} | {b['forward_ms']:.2f} | {b['backward_ms']:.2f} "
                        f"| {b['optimizer_ms']:.2f} | {b['gpu_wait_ms']:.2f} | {sum(k.values()):.2f} "
                        f"| {b['region_calls']:.0f} | {b['graph_replays']:.0f} | {b['graph_misses']:.0f} |")
    return rows


BREAKDOWN_HEADER = ["| model | implementation | step wall (ms) | host: forward | host: backward | host: optimizer "
                    "| wait for GPU | kernel ms (fwd+bwd) | region calls | graph replays | graph misses |",
                    "|---|---|---|---|---|---|---|---|---|---|---|"]


VARLEN_HEADER = ["| model | implementation | distinct lengths | median step at a new length (ms, steps) "
                 "| at its second and third meetings (ms, steps) | at a length met three times before (ms, steps) "
                 "| median step, fixed at the mean (ms) | steady / fixed | Dynamo graphs | pyfuser kernels compiled "
                 "| kernels compiled per kernel of one length | Triton binaries compiled (warm-up + timed) | fallbacks "
                 "| CUDA-graph recordings (fwd + bwd) | memory reserved at the end (GB) |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m pyfuser.bench --model zoo", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--impl", default=",".join(IMPLEMENTATIONS))
    p.add_argument("--varlen", default="", help="comma-separated models to also run at variable sequence lengths")
    p.add_argument("--tiny", action="store_true", help="the zoo's tiny sizes (a smoke test on CPU)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default=None, help="write the results here after each model")
    p.add_argument("--breakdown", type=int, default=0, metavar="N",
                   help="N more steps per implementation split into host and GPU time (GPU only)")
    p.add_argument("--host-profile", action="store_true", help="print a cProfile of one step per implementation")
    args = p.parse_args(argv)
    everything: dict = {}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(everything, f, indent=1, default=str)

    rows, brows = [], []
    for name in filter(None, args.models.split(",")):
        if name not in FULL:
            p.error(f"--models: no model {name!r}; expected some of {', '.join(MODELS)}")
        everything[name] = run_model(name, steps=args.steps, warmup=args.warmup, device=args.device,
                                     tiny=args.tiny, implementations=tuple(args.impl.split(",")),
                                     breakdown=args.breakdown, host_profile=args.host_profile)
        save()
        rows += markdown_rows(name, everything[name])
        brows += breakdown_rows(name, everything[name])
        for impl, r in everything[name].items():
            if r.get("host_profile"):
                print(f"## {name} {impl}: host profile of one step\n{r['host_profile']}", flush=True)
        print("\n".join(HEADER + rows), end="\n\n", flush=True)
        if brows:
            print("\n".join(BREAKDOWN_HEADER + brows), end="\n\n", flush=True)
    vrows = []
    for name in filter(None, args.varlen.split(",")):
        impls = tuple(i for i in args.impl.split(",") if i in ("inductor", "pyfuser"))
        everything[f"{name}_varlen"] = v = run_varlen(name, steps=args.steps, warmup=args.warmup,
                                                      device=args.device, tiny=args.tiny, implementations=impls)
        save()
        vrows += varlen_rows(name, v)
        print("\n".join(VARLEN_HEADER + vrows), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
