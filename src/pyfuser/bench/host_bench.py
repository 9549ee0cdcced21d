"""Host cost of a fused-region call, on CPU, with kernel launches stubbed.

    PYTHONPATH=src python -m pyfuser.bench.host_bench

Trains a tiny BERT (2 layers, hidden 64, batch 2x8) through ``backend="pyfuser"`` for
a few steps, then replaces every prepared launch with a no-op and times (a) each
region call of one step replayed in a loop, (b) whole forward+backward steps.  The
numbers are Python host time (what a GPU step pays per region before any kernel
runs), not GPU step times.
"""
from __future__ import annotations

import argparse
import gc
import time

import torch


def _noop(*args, **kwargs):
    pass


class _StubKernel:
    def __getitem__(self, grid):
        return _noop


def prepared_programs():
    """Every cached ``Program`` of the backend's translated regions."""
    from ..dynamo.regions import region as R

    for t in R._TRANSLATIONS.values():
        if hasattr(t, "fd") and t.fd._runtime is not None:
            yield from t.fd._runtime.programs.values()


def stub_launches():
    """Replace every launch of the backend's cached programs by a no-op (their next
    run takes the loop, then builds a straight-line runner around the stubs)."""
    for p in prepared_programs():
        p.launches = [la._replace(fn=_StubKernel()) for la in p.launches]
        p.forget_launchers()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200, help="replays of one step's region calls per timing")
    ap.add_argument("--steps", type=int, default=50, help="training steps per timing")
    args = ap.parse_args(argv)

    import transformers

    from ..dynamo.regions import region as R

    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                     intermediate_size=128, vocab_size=500, max_position_embeddings=64,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertForMaskedLM._from_config(config, attn_implementation="eager").train()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 500, (2, 8), generator=g)
    labels = torch.randint(0, 500, (2, 8), generator=g)
    compiled = torch.compile(model, backend="pyfuser", dynamic=False)

    def step():
        compiled(input_ids=ids, labels=labels).loss.backward()

    for _ in range(3):
        step()
    stub_launches()
    for _ in range(3):
        step()

    recorded = []
    forward = R.FusedRegion.forward

    def recording(self, *a):
        recorded.append((self, a))
        return forward(self, *a)

    R.FusedRegion.forward = recording
    try:
        step()
    finally:
        R.FusedRegion.forward = forward

    def best(fn, n, repeat=7):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times) / n

    def calls():
        for _ in range(args.reps):
            for r, a in recorded:
                r(*a)

    def steps():
        for _ in range(args.steps):
            step()

    gc.collect()
    per_call = best(calls, args.reps * len(recorded))
    per_step = best(steps, args.steps)
    print(f"{len(recorded)} region calls per step; host time per region call {per_call * 1e6:.2f} us, "
          f"per tiny-BERT training step {per_step * 1e3:.3f} ms (CPU, launches stubbed)")
    return per_call, per_step


if __name__ == "__main__":
    main()
