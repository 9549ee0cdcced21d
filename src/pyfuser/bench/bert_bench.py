"""BERT training steps: eager vs torch.compile (Inductor) vs torch.compile(backend="pyfuser").

    python -m pyfuser.bench.bert_bench                 # 64x128 and 16x512, on the GPU
    python -m pyfuser.bench.bert_bench --configs 64x128 --steps 10 --no-dropout
    python -m pyfuser.bench --model bert [same options]  # the same, from the bench

The model is ``BertForMaskedLM`` built from ``transformers.BertConfig()`` (bert-base,
random weights, nothing downloaded, eager attention).  Each implementation starts
from the same weights and trains on the same batches: fp16 autocast (bf16 on CPU),
AdamW, no loss scaling.  Per implementation ``run_bert_benchmark`` returns:

* ``median_ms``: median training-step time (forward, backward, optimizer step), from
  CUDA events around each step after ``warmup`` steps (wall clock on CPU); the
  implementations take turns step by step (``run_bert_benchmark``);
* ``host_ms``: the host's time inside each timed step (no synchronization): where it
  is about ``times_ms``, the step is host-bound (the GPU waits for launches);
* ``losses``: the loss of each of the ``steps`` timed steps (with dropout on, each
  implementation draws its own masks, so losses agree only roughly);
* ``fusions``: FusionDefinitions the pyfuser backend created (forward + backward);
  ``region_calls_per_step`` and ``pyfuser_launches_per_step``: fused regions run and
  pyfuser kernels launched per step (``pyfuser.cache_info()["launches"]``);
* ``gpu_kernels_per_step``: every GPU kernel of one step, from the profiler (all
  implementations, for comparison); ``kernel_ms_per_step``: that step's kernel time
  split into matmul (cuBLAS/CUTLASS), copy (memcpy/memset) and other, the non-matmul
  work fusion targets; ``kernel_ms_per_part``: the same for the step's two parts,
  profiled one after the other: ``model`` (forward and backward, the graphs
  ``torch.compile`` hands the backend) and ``optimizer`` (AdamW's ``foreach`` kernels,
  eager and identical under every implementation); ``top_other_kernels``: the
  heaviest non-matmul kernels;
  ``top_matmul_kernels``: the heaviest GEMMs (the same cuBLAS calls should cost the
  same under every implementation: a difference points at operand layouts);
  ``pyfuser_kernel_traffic``: pyfuser's kernels among the heaviest, with the MB their
  tensor arguments address per step and the GB/s that makes (``kernel_traffic``: the
  launches of one step recorded); the kernels far from the copy bandwidth are where
  the non-matmul time can still shrink;
  ``graph_replays_per_step`` and ``graph_misses_per_step``: backward graphs replayed
  as CUDA graphs (``graphs.py``; their regions and launches are not counted in the
  two numbers before) and backward calls that ran uncaptured after a capture;
  ``fallbacks``: regions that ran in ATen;
  ``first_step_s``: the first step, compilation included.

transformers is imported lazily, so this module imports on machines without it.
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import sys
import time
from unittest import mock

import torch

# the step's costs; kernel_class, tensor_bytes and kernel_traffic are also this module's API
from .step_profile import (cprofiled, kernel_class, kernel_traffic, profile_step,  # noqa: F401
                           pyfuser_kernel_rows, tensor_bytes)

IMPLEMENTATIONS = ("eager", "inductor", "pyfuser")
# Also accepted: pyfuser with its backward graphs never captured as CUDA graphs
# (``PYFUSER_CUDA_GRAPHS=0`` while it compiles), to measure what the capture buys.
UNCAPTURED = "pyfuser_uncaptured"
CONFIGS = ((64, 128), (16, 512))
TINY_CONFIG = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                   vocab_size=300, max_position_embeddings=32)  # ``--tiny``


def _bert_config(dropout: bool, overrides: dict | None):
    from transformers import BertConfig

    config = BertConfig()
    if not dropout:
        config.hidden_dropout_prob = 0.0
        config.attention_probs_dropout_prob = 0.0
    for k, v in (overrides or {}).items():
        setattr(config, k, v)
    return config


def _new_model(config):
    from transformers import BertForMaskedLM

    try:
        return BertForMaskedLM._from_config(config, attn_implementation="eager")
    except TypeError:  # an older transformers without the keyword
        config._attn_implementation = "eager"
        return BertForMaskedLM(config)


def _batches(config, batch, seq, n, device, seed):
    """``n`` masked-LM batches: random tokens, labels on about 15% of the positions."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, config.vocab_size, (batch, seq), generator=g)
        labels = torch.where(torch.rand(batch, seq, generator=g) < 0.15, ids, torch.full_like(ids, -100))
        labels[:, 0] = ids[:, 0]  # never an all-ignored batch
        out.append((ids.to(device), labels.to(device)))
    return out


class _Timer:
    """CUDA events on a GPU, the wall clock on CPU."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.marks = []

    def start(self):
        self.marks.append([self._mark(), None])

    def stop(self):
        self.marks[-1][1] = self._mark()

    def _mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def times_ms(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self.marks]
        return [(b - a) * 1e3 for a, b in self.marks]


def training_step(model, opt, dev_type: str, amp_dtype):
    """``step(ids, labels) -> loss``: forward under autocast, backward, optimizer step.
    Its two halves are ``step.model_step(ids, labels)`` (forward and backward: what
    ``torch.compile(model)`` compiles) and ``step.optimizer_step()`` (AdamW, eager
    under every implementation)."""
    def model_step(ids, labels):
        with torch.autocast(dev_type, dtype=amp_dtype):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        return loss.detach()

    def optimizer_step():
        opt.step()
        opt.zero_grad(set_to_none=True)

    def step(ids, labels):
        loss = model_step(ids, labels)
        optimizer_step()
        return loss

    step.model_step, step.optimizer_step = model_step, optimizer_step
    return step


class _Run:
    """One implementation's training run: compiled and warmed up on construction, then
    timed a step at a time (``timed_step``), so that several implementations can take
    turns, and summarised by ``results``.  Each keeps its own random state (swapped in
    around its steps): its dropout masks are those it would draw running alone."""

    def __init__(self, impl, model, batches, warmup, device, amp_dtype, lr, seed, profile_host=False):
        import pyfuser
        import pyfuser.dynamo as pd

        if impl == "pyfuser":
            model = torch.compile(model, backend="pyfuser", dynamic=False)
        elif impl == UNCAPTURED:  # its own backend object: Dynamo would reuse pyfuser's graphs
            model = torch.compile(model, backend=_uncaptured_backend, dynamic=False)
        elif impl == "inductor":
            model = torch.compile(model, dynamic=False)
        elif impl != "eager":
            raise ValueError(f"run_bert_benchmark: unknown implementation {impl!r}; expected one of "
                             f"{IMPLEMENTATIONS + (UNCAPTURED,)}")
        self.impl, self.device, self.batches, self.profile_host = impl, device, batches, profile_host
        self.cuda = torch.device(device).type == "cuda"
        params = [p for p in model.parameters() if p.requires_grad]
        self.step = training_step(model, torch.optim.AdamW(params, lr=lr), torch.device(device).type, amp_dtype)
        self.rng = self._seeded(seed)
        self.counts = {}  # backend counters and pyfuser launches, during this run's own steps only
        stats0, launches0 = pd.stats(), pyfuser.cache_info()["launches"]
        t0 = time.perf_counter()

        def warm_up():
            for ids, labels in batches[:warmup]:
                self._own_rng(self.step, ids, labels)
            if self.cuda:
                torch.cuda.synchronize()

        if impl.startswith("pyfuser"):
            # Each backend translates its own regions, so ``fusions`` counts them even when
            # another pyfuser implementation ran first (compiled kernels are still shared).
            from pyfuser.dynamo.regions import region
            region.forget_translations()
        # With profile_host: where the first steps (compilation) spend their time.
        with _graphs_off(impl == UNCAPTURED):  # read when the backward compiles
            self.compile_prof = cprofiled(warm_up, "cumulative", 45) if profile_host else warm_up()
        self.first_step_s = time.perf_counter() - t0
        self._count(stats0, launches0, "warmup_")
        self.timer, self.losses, self.host_ms = _Timer(device), [], []

    def _count(self, stats0, launches0, prefix=""):
        import pyfuser
        import pyfuser.dynamo as pd

        stats, stats0 = dict(pd.stats(), launches=pyfuser.cache_info()["launches"]), dict(stats0, launches=launches0)
        for key, v in stats.items():
            self.counts[prefix + key] = self.counts.get(prefix + key, 0) + v - stats0.get(key, 0)

    def _seeded(self, seed):
        saved = self._rng_state()
        torch.manual_seed(seed)  # the same dropout stream for eager and Inductor
        mine = self._rng_state()
        self._set_rng(saved)
        return mine

    def _rng_state(self):
        return (torch.get_rng_state(), torch.cuda.get_rng_state() if self.cuda else None)

    def _set_rng(self, state):
        torch.set_rng_state(state[0])
        if self.cuda:
            torch.cuda.set_rng_state(state[1])

    def _own_rng(self, fn, *args):
        saved = self._rng_state()
        self._set_rng(self.rng)
        try:
            return fn(*args)
        finally:
            self.rng = self._rng_state()
            self._set_rng(saved)

    def timed_step(self, ids, labels):
        """One training step timed: CUDA events around it on a GPU (the wall clock on
        CPU), and the host's time inside ``step`` (no synchronization)."""
        self.losses.append(self._own_rng(self._timed, ids, labels))

    def _timed(self, ids, labels):
        import pyfuser
        import pyfuser.dynamo as pd

        stats0, launches0 = pd.stats(), pyfuser.cache_info()["launches"]
        self.timer.start()
        t0 = time.perf_counter()
        loss = self.step(ids, labels)
        self.host_ms.append((time.perf_counter() - t0) * 1e3)
        self.timer.stop()
        self._count(stats0, launches0)
        return loss

    def results(self) -> dict:
        times, steps, counts = self.timer.times_ms(), len(self.losses), self.counts
        last = self.batches[-1]
        step = lambda: self._own_rng(self.step, *last)  # noqa: E731
        parts = {"model": lambda: self._own_rng(self.step.model_step, *last), "optimizer": self.step.optimizer_step}
        prof = profile_step(parts) if self.cuda else None
        traffic = kernel_traffic(step) if self.impl.startswith("pyfuser") else {}
        host = cprofiled(lambda: [step() for _ in range(3)]) if self.profile_host else None
        return {
            "host_profile": host,
            "compile_profile": self.compile_prof,
            "median_ms": statistics.median(times),
            "times_ms": times,
            "host_ms": self.host_ms,
            "losses": [float(x) for x in self.losses],
            "fusions": counts.get("warmup_fusions_created", 0) + counts.get("fusions_created", 0),
            "region_calls_per_step": counts.get("region_calls", 0) / steps,
            "pyfuser_launches_per_step": counts.get("launches", 0) / steps,
            # backward graphs replayed as CUDA graphs (their regions and launches are not
            # counted above: no Python runs), and calls that ran uncaptured after capture
            "graph_replays_per_step": counts.get("graph_replays", 0) / steps,
            "graph_misses_per_step": counts.get("graph_misses", 0) / steps,
            "gpu_kernels_per_step": prof["gpu_kernels"] if prof else None,
            "kernel_ms_per_step": prof["kernel_ms"] if prof else None,
            # the same split by part: "model" (forward + backward, the compiled graphs'
            # work) and "optimizer" (AdamW, eager and the same under every implementation)
            "kernel_ms_per_part": prof["kernel_ms_parts"] if prof else None,
            "top_other_kernels": prof["top_other"] if prof else None,
            "top_matmul_kernels": prof["top_matmul"] if prof else None,
            # pyfuser's kernels among the top non-matmul ones: MB per step and GB/s
            "pyfuser_kernel_traffic": pyfuser_kernel_rows(prof["top_other"] if prof else None, traffic),
            "fallbacks": counts.get("warmup_fallbacks", 0) + counts.get("fallbacks", 0),
            "first_step_s": self.first_step_s,
        }


def _uncaptured_backend(gm, example_inputs, **kwargs):
    from ..dynamo.backend import pyfuser_backend

    return pyfuser_backend(gm, example_inputs, **kwargs)


def _graphs_off(off: bool):
    """The environment with backward CUDA graphs turned off, while the block runs."""
    return mock.patch.dict(os.environ, {"PYFUSER_CUDA_GRAPHS": "0"} if off else {})


def run_bert_benchmark(batch, seq, steps=20, device="cuda", dropout=True, *, implementations=IMPLEMENTATIONS,
                       warmup=3, config_overrides=None, lr=1e-4, seed=0, profile_host=(), on_result=None) -> dict:
    """Train BERT for ``warmup + steps`` steps with each implementation; returns
    ``{implementation: results}`` (see the module docstring).  ``config_overrides``
    (BertConfig fields) shrinks the model for tests.

    Every implementation is compiled and warmed up first; the timed steps then take
    turns (step i of each implementation before step i + 1 of any), so that a host
    whose speed drifts during the run (the GPU machine's does:
    docs/TUNING.md#host-time) slows every implementation alike.  Each implementation has its own
    model, optimizer and random state."""
    config = _bert_config(dropout, config_overrides)
    torch.manual_seed(seed)
    initial = _new_model(config).state_dict()
    batches = _batches(config, batch, seq, warmup + steps, device, seed + 1)
    amp_dtype = torch.float16 if torch.device(device).type == "cuda" else torch.bfloat16
    torch.compiler.reset()
    runs = {}
    for impl in implementations:
        model = _new_model(config)
        model.load_state_dict(copy.deepcopy(initial))
        model.to(device).train()
        runs[impl] = _Run(impl, model, batches, warmup, device, amp_dtype, lr, seed + 2, impl in profile_host)
    # Compilation leaves millions of Python objects behind; collected now, they cannot
    # trigger a full garbage collection (tens of ms) inside a timed step.
    gc.collect()
    for ids, labels in batches[warmup:warmup + steps]:
        for run in runs.values():
            run.timed_step(ids, labels)
    results = {}
    for impl, run in runs.items():
        results[impl] = run.results()
        if on_result is not None:
            on_result(results)
    return results


def markdown_table(batch, seq, results) -> str:
    base = results.get("eager", {}).get("median_ms")
    ind = results.get("inductor", {}).get("median_ms")
    lines = [f"BERT MLM training step (fp16 autocast, AdamW), batch {batch} x seq {seq}", "",
             "| implementation | median step (ms) | host ms in step | vs eager | vs torch.compile | fusions "
             "| regions/step | backward graph replays/step "
             "| pyfuser launches/step | GPU kernels/step | matmul kernel ms | non-matmul kernel ms "
             "| of which forward + backward | fallbacks | first loss | last loss |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for impl, r in results.items():
        t = r["median_ms"]
        vs = lambda ref: f"{ref / t:.2f}x" if ref else "-"  # noqa: E731
        kernels = "-" if r["gpu_kernels_per_step"] is None else str(r["gpu_kernels_per_step"])
        kms = r.get("kernel_ms_per_step")
        mm, other = ("-", "-") if not kms else (f"{kms['matmul']:.2f}", f"{kms['other'] + kms['copy']:.2f}")
        model = (r.get("kernel_ms_per_part") or {}).get("model")
        model = f"{model['other'] + model['copy']:.2f}" if model else "-"
        host = f"{statistics.median(r['host_ms']):.2f}" if r.get("host_ms") else "-"
        lines.append(f"| {impl} | {t:.2f} | {host} | {vs(base)} | {vs(ind)} | {r['fusions']} | "
                     f"{r['region_calls_per_step']:.0f} | {r.get('graph_replays_per_step', 0):.2f} | "
                     f"{r['pyfuser_launches_per_step']:.0f} | {kernels} | "
                     f"{mm} | {other} | {model} | {r['fallbacks']} | {r['losses'][0]:.4f} | {r['losses'][-1]:.4f} |")
    ref = results.get("inductor", {}).get("times_ms")
    for impl, r in results.items():
        if ref and impl != "inductor":
            speedup, faster = paired_speedup(r["times_ms"], ref)
            lines.append(f"\n{impl} against torch.compile step by step (the same turn): median speedup "
                         f"{speedup:.2f}x, faster in {faster} of {len(ref)} steps")
    return "\n".join(lines)


def paired_speedup(times, ref_times) -> tuple:
    """(median of ``ref / time`` over the steps of the same turn, how many steps were
    faster than the reference's): the implementations take turns, so each pair saw
    the same host."""
    ratios = [b / a for a, b in zip(times, ref_times)]
    return statistics.median(ratios), sum(x > 1 for x in ratios)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m pyfuser.bench.bert_bench", description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=",".join(f"{b}x{s}" for b, s in CONFIGS), help="BATCHxSEQ,...")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-dropout", action="store_true")
    p.add_argument("--tiny", action="store_true",
                   help="a 1-layer BERT of hidden size 32 and 300 words instead of bert-base: a smoke test of "
                        "the run on CPU, not a benchmark")
    p.add_argument("--impl", default=",".join(IMPLEMENTATIONS),
                   help=f"comma-separated: eager,inductor,pyfuser (and {UNCAPTURED}: no backward CUDA graphs)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default=None, help="also write the results to this file (after each implementation, "
                                                 "so a run cut short keeps what it measured)")
    p.add_argument("--profile-host", default="", help="comma-separated implementations whose host time to profile "
                                                      "(cProfile of the warm-up steps and of 3 extra steps, in the "
                                                      "JSON; the latter also printed)")
    args = p.parse_args(argv)
    everything = {}

    def save(results, cfg=None):
        if cfg is not None:
            everything[cfg] = results
        if args.json:
            with open(args.json, "w") as f:
                json.dump(everything, f, indent=1)

    for cfg in args.configs.split(","):
        batch, seq = (int(x) for x in cfg.lower().split("x"))
        results = run_bert_benchmark(batch, seq, args.steps, args.device, not args.no_dropout,
                                     implementations=tuple(args.impl.split(",")), warmup=args.warmup,
                                     config_overrides=TINY_CONFIG if args.tiny else None,
                                     profile_host=tuple(filter(None, args.profile_host.split(","))),
                                     on_result=lambda r, cfg=cfg: save(r, cfg))
        save(results, cfg)
        print(markdown_table(batch, seq, results), end="\n\n", flush=True)
        for impl, r in results.items():
            if r.get("host_profile"):
                print(f"host profile, {impl}, {cfg}:\n{r['host_profile']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
