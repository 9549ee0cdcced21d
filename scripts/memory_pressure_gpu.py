"""Train through the backend, CUDA graphs on, on a device left nearly full (GPU only).

    PYTHONPATH=src python scripts/memory_pressure_gpu.py                       # LLaMA, a few layers
    PYTHONPATH=src python scripts/memory_pressure_gpu.py --model gpt2 --margin-factor 1.1

1. The eager model trains ``--steps`` AdamW steps (same weights and batches) for the
   reference losses, and is freed.
2. The compiled model trains its warm-up steps (``graphs.WARMUP_CALLS``: no graph is
   recorded yet) on the empty device; the second one's peak above what was allocated
   before it is the uncaptured step's need.
3. A ballast tensor then fills the device but for ``--margin-factor`` times that need
   (or ``--margin-mb``): room for uncaptured training, less than a recording needs on
   top (while recording, the caching allocator cannot reuse its cached blocks).
4. The remaining steps run: the first records the forward and backward graphs.

Prints the captures and failed captures, the allocator's statistics after each step,
and the losses against eager's.  Exits 1 on a crash (an out-of-memory error included),
on a leak (with every capture failed, the memory allocated after a step must equal
what it was after the last warm-up step, and the memory reserved after emptying the
cache too), or on losses away from eager's; 0 otherwise, saying whether the failure
path was exercised (a capture that succeeded leaves it untested: lower the margin).
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
import traceback
import warnings

import torch

MB = 1 << 20


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama", choices=["llama", "gpt2", "mlp"])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--margin-factor", type=float, default=1.25)
    p.add_argument("--margin-mb", type=float, default=None, help="free memory left by the ballast (overrides the factor)")
    p.add_argument("--no-ballast", action="store_true", help="the control run: nothing fills the device")
    p.add_argument("--rtol", type=float, default=2e-3)
    return p.parse_args()


def build(args):
    from pyfuser.bench import zoo

    if args.model == "mlp":
        return zoo.build("mlp", features=args.hidden, hidden=4 * args.hidden, classes=args.vocab)
    sizes = dict(hidden=args.hidden, layers=args.layers, heads=args.heads, vocab=args.vocab, seq=args.seq)
    if args.model == "llama":
        sizes.update(kv_heads=max(1, args.heads // 4), intermediate=int(2.75 * args.hidden))
    return zoo.build(args.model, **sizes)


def batches(zm, args):
    g = torch.Generator().manual_seed(1)
    return [{k: v.cuda() for k, v in zm.batch(args.batch, g).items()} for _ in range(args.steps)]


def step(model, opt, batch):
    from pyfuser.bench.zoo import loss as loss_of

    loss = loss_of(model(**batch))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def mem(tag):
    a, r = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    free, total = torch.cuda.mem_get_info()
    print(f"  {tag:<34} allocated {a / MB:9.1f} MB  reserved {r / MB:9.1f} MB  device free {free / MB:9.1f} MB")
    return a, r


def main() -> int:
    args = parse()
    import pyfuser.dynamo as pd
    from pyfuser.dynamo.regions import graphs

    if args.model != "mlp":
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("transformers is not installed: training the zoo's MLP instead")
            args.model = "mlp"
    zm = build(args)
    data = batches(zm, args)
    print(f"{args.model}: {sum(p.numel() for p in zm.model.parameters()) / 1e6:.1f} M parameters, batch {args.batch}, "
          f"{torch.cuda.get_device_name()}")

    reference = copy.deepcopy(zm.model).cuda()
    opt = torch.optim.AdamW(reference.parameters(), lr=1e-4)
    want = [step(reference, opt, b) for b in data]
    del reference, opt
    torch.cuda.empty_cache()

    model = copy.deepcopy(zm.model).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    compiled = torch.compile(model, backend="pyfuser")
    pd.reset()
    got, ballast, settled = [], None, None
    start = time.time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k, b in enumerate(data):
            if k == graphs.WARMUP_CALLS - 1:
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            got.append(step(compiled, opt, b))
            if k == graphs.WARMUP_CALLS - 1:
                need = torch.cuda.max_memory_allocated() - before
                torch.cuda.empty_cache()
                settled = mem(f"after step {k} (warm-up), cache emptied")
                margin = args.margin_mb * MB if args.margin_mb is not None else args.margin_factor * need
                free = torch.cuda.mem_get_info()[0]
                print(f"  uncaptured step's need {need / MB:.1f} MB; leaving {margin / MB:.1f} MB free")
                if not args.no_ballast and free > margin:
                    ballast = torch.empty(int(free - margin), dtype=torch.uint8, device="cuda")
            else:
                mem(f"after step {k}")
    s = pd.stats()
    for w in caught:
        if "pyfuser" in str(w.message):
            print(f"  warning: {w.message}")
    print(f"  {time.time() - start:.1f} s; captures {s.get('graph_captures', 0)}, failed captures "
          f"{s.get('graph_capture_failures', 0)}, replays {s.get('graph_replays', 0)}, "
          f"region fallbacks {s.get('fallbacks', 0)}")
    ok = True
    for k, (g, w) in enumerate(zip(got, want)):
        close = abs(g - w) <= args.rtol * abs(w) + 1e-4
        ok &= close
        print(f"  step {k}: loss {g:.6f}  eager {w:.6f}{'' if close else '  <- differs'}")
    captures, failures = s.get("graph_captures", 0), s.get("graph_capture_failures", 0)
    del ballast
    torch.cuda.empty_cache()
    after = mem("ballast freed, cache emptied")
    if captures == 0 and failures > 0:
        if after != settled:
            print(f"LEAK: allocated {after[0]} B (want {settled[0]}), reserved {after[1]} B (want {settled[1]})")
            ok = False
        else:
            print("the failure path was exercised: every capture failed and gave its memory back")
    elif failures > 0:
        print(f"{failures} capture(s) failed and {captures} succeeded (their pools stay: no leak check)")
    else:
        print("note: no capture failed, so the failure path was not exercised; lower --margin-factor")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("memory_pressure_gpu.py needs a CUDA device")
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        print("FAIL: crashed")
        sys.exit(1)
