"""python -m pyfuser.bench: pyfuser vs torch.compile vs eager on the benchmark cases.

    python -m pyfuser.bench                                # every case, on the GPU
    python -m pyfuser.bench --cases softmax,layer_norm     # cases whose name contains a substring
    python -m pyfuser.bench --cases general                # a group: the held-out cases
    python -m pyfuser.bench --cases training_ops           # forward + backward of single training ops vs
                                                           # torch.compile, backend="pyfuser" and Liger Kernel
    python -m pyfuser.bench --quick --no-compile           # fewer repetitions, no torch.compile
    python -m pyfuser.bench --dry-run                      # no GPU: tiny sizes on CPU, checks only
    python -m pyfuser.bench --from-json FILE               # the table (and with --out, the chart) of a saved run
    python -m pyfuser.bench --model bert [OPTIONS]         # BERT training steps (--model bert --help)
    python -m pyfuser.bench --model zoo [OPTIONS]          # the model zoo's training steps (--model zoo --help)
    python -m pyfuser.bench --latency [OPTIONS]            # time to a first execute / first step, per phase
                                                           # (--latency --help)

Writes only where it is told: the run's JSON (after every case, so a run cut short
keeps what it measured) and its chart (needs matplotlib) go to --out, by default a
new folder pyfuser-bench-<date>-<gpu> in the current directory (a dry run writes
nothing unless --out is given); --docs FILE also puts the run's section in that
markdown file.  Exit status: 0 when every check is ok, 1 otherwise, 2 on bad usage.
"""
# The project's own GPU runs record into the source tree by naming it: from the
# repository root, PYTHONPATH=src python -m pyfuser.bench --out benchmarks/results
# --docs docs/BENCHMARKS.md (PYFUSER_COMMIT=<hash> where the tree has no .git), or
# --from-json FILE with the same two flags for a JSON fetched from another machine.
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import time
import warnings

# The source tree this module runs from, when it does (for the commit only: outputs go
# where --out and --docs say).
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DRY_SCALE = 1.0 / 4096


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m pyfuser.bench", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.strip().splitlines()[2:]))
    p.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (do_bench warmup=10 ms, rep=30 ms)")
    p.add_argument("--out", default=None, help="folder for the JSON and PNG (default: a new folder "
                                               "pyfuser-bench-<date>-<gpu> here; a dry run writes nothing "
                                               "unless --out is given)")
    p.add_argument("--no-compile", action="store_true", help="do not time torch.compile")
    p.add_argument("--model", default=None, choices=("bert", "zoo"),
                   help="whole-model benchmark, eager vs torch.compile vs pyfuser: bert (BERT training steps; "
                        "the other options are then pyfuser.bench.bert_bench's) or zoo (the model zoo's "
                        "training steps; options of pyfuser.bench.zoo_bench)")
    p.add_argument("--dry-run", action="store_true",
                   help="build every case at tiny sizes on CPU (Triton interpreter) and check it; no timing")
    p.add_argument("--scale", type=float, default=None,
                   help=f"size scale (default 1.0; dry run {DRY_SCALE:g}): rows scale linearly, widths by sqrt")
    p.add_argument("--docs", default=None, help="markdown file to put this run's section in (created if "
                                                "missing; default: none)")
    p.add_argument("--no-docs", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old scripts
    p.add_argument("--budget", type=float, default=420.0,
                   help="seconds; once spent, the remaining cases skip torch.compile (0: no limit; default 420)")
    p.add_argument("--cpu-timing", action="store_true",
                   help="with --dry-run: also run the timing code (wall clock on CPU, torch.compile unless "
                        "--no-compile); a self-test of the harness, the numbers mean nothing")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--from-json", default=None, metavar="FILE",
                   help="do not run: print a saved run's table (its PNG with --out, its docs section with --docs)")
    return p.parse_args(argv)


def _git(*args):
    try:
        r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None
    except Exception:
        return None


def commit_info():
    """(commit, dirty): $PYFUSER_COMMIT when set (a copy of the tree without .git, as on
    the lent GPU machine), else git rev-parse HEAD, else "unknown"."""
    env = os.environ.get("PYFUSER_COMMIT")
    if env:
        return env, None
    commit = _git("rev-parse", "HEAD")
    if commit:
        status = _git("status", "--porcelain", "--untracked-files=no")
        return commit, bool(status)
    return "unknown", None


def _versions():
    import torch

    try:
        import triton

        tv = triton.__version__
    except Exception:
        tv = None
    return torch.__version__, tv


def default_out(header) -> str:
    """A new folder in the current directory named for the run (a later run on the same
    day and GPU gets a numbered one)."""
    from . import report

    base = os.path.join(os.getcwd(), f"pyfuser-bench-{header['date']}-{report.slug(header['gpu'])}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    return path


def _outputs(header, out_dir, rows, docs_path):
    from . import report

    base = os.path.join(out_dir, f"{header['date']}-{report.slug(header['gpu'])}") if out_dir else None
    png = None
    if base:
        msg = report.write_png(base + ".png", header, rows)
        if msg:
            print(msg, flush=True)
        else:
            png = base + ".png"
            print(f"wrote {png}", flush=True)
    if docs_path:
        report.update_docs(docs_path, header, rows, base + ".json" if base else None, png)
        print(f"wrote this run's section of {docs_path}", flush=True)


def from_json(args) -> int:
    from . import report

    header, rows = report.load_json(args.from_json)
    print(report.markdown_table(rows))
    print()
    for line in report.summary_lines(header, rows):
        print(line)
    out_dir = args.out
    if out_dir:
        target = os.path.join(out_dir, f"{header['date']}-{report.slug(header['gpu'])}.json")
        if os.path.abspath(target) != os.path.abspath(args.from_json):  # e.g. fetched from the GPU machine
            os.makedirs(out_dir, exist_ok=True)
            shutil.copyfile(args.from_json, target)
            print(f"copied {args.from_json} -> {target}", flush=True)
    _outputs(header, out_dir, rows, None if args.no_docs else args.docs)
    return 0


def _model(argv):
    """(model name, the other arguments) when ``argv`` asks for a whole-model
    benchmark (``--model NAME`` or ``--model=NAME``), else (None, argv)."""
    for i, a in enumerate(argv):
        if a == "--model" and i + 1 < len(argv):
            return argv[i + 1], argv[:i] + argv[i + 2:]
        if a.startswith("--model="):
            return a.split("=", 1)[1], argv[:i] + argv[i + 1:]
    return None, argv


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--latency" in argv:
        from . import latency

        return latency.main([a for a in argv if a != "--latency"], commit_info()[0])
    model, rest = _model(argv)
    if model == "bert":
        from . import bert_bench

        return bert_bench.main(rest)
    if model == "zoo":
        from . import zoo_bench

        return zoo_bench.main(rest)
    args = parse(argv)
    if args.from_json:
        return from_json(args)

    import torch

    from . import report, training_ops, training_ops_run
    from .cases import CASES, select
    from .harness import Options, copy_bandwidth, run_cases

    if args.list:
        for c in CASES + training_ops.CASES:
            print(f"{c.name:36s} {c.group:6s} {c.describe(c.sizes(args.scale or 1.0))}")
        return 0
    cases = select(args.cases)
    op_cases = training_ops.select(args.cases)  # only when named: never part of "every case"
    if not cases and not op_cases:
        names = ", ".join(c.name for c in CASES + training_ops.CASES)
        print(f"no case matches --cases {args.cases!r}; cases: {names}", flush=True)
        return 2
    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        print("no CUDA device here: timing needs a GPU.  Use --dry-run to build and check every case "
              "at tiny sizes on CPU (Triton interpreter).", flush=True)
        return 2
    if dry:
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    opts = Options(device="cpu" if dry else "cuda", scale=args.scale or (DRY_SCALE if dry else 1.0),
                   timing=not dry or args.cpu_timing, compile=not args.no_compile and (not dry or args.cpu_timing),
                   budget_s=args.budget, warmup=10 if args.quick else 25, rep=30 if args.quick else 100,
                   host_calls=20 if dry else (500 if args.quick else 2000))
    commit, dirty = commit_info()
    tv, trv = _versions()
    now = datetime.datetime.now(datetime.timezone.utc)
    header = {"date": now.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name() if not dry else "cpu-dry-run",
              "device": opts.device, "commit": commit, "dirty": dirty, "torch": tv, "triton": trv,
              "python": platform.python_version(), "copy_gbps": None,
              "mode": "dry-run" if dry else ("quick" if args.quick else "full"),
              "warmup_ms": opts.warmup, "rep_ms": opts.rep, "timing_rounds": opts.rounds, "scale": opts.scale,
              "torch_compile": opts.compile, "cases_requested": len(cases) + len(op_cases),
              "started": now.isoformat(timespec="seconds"), "complete": False}
    print(f"pyfuser bench: {header['gpu']}, commit {commit}{' (dirty)' if dirty else ''}, torch {tv}, "
          f"triton {trv}, {len(cases) + len(op_cases)} case(s), mode {header['mode']}, scale {opts.scale:g}", flush=True)

    out_dir = args.out if args.out else (None if dry else default_out(header))
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, f"{header['date']}-{report.slug(header['gpu'])}.json") if out_dir else None
    kept = []
    if json_path and args.cases and os.path.exists(json_path):  # a partial re-run: keep the other cases' rows
        try:
            _, old = report.load_json(json_path)
            names = {c.name for c in cases + op_cases}
            kept = [r for r in old if r.get("case") not in names]
        except Exception:
            kept = []
    order = {c.name: i for i, c in enumerate(CASES + training_ops.CASES)}

    def merged(rows):
        return sorted(kept + rows, key=lambda r: order.get(r.get("case"), len(order)))

    def on_row(rows):
        if json_path:
            report.write_json(json_path, header, merged(rows))

    t0 = time.perf_counter()
    if opts.timing:
        header["copy_gbps"] = round(copy_bandwidth(opts), 1)
        print(f"device-to-device copy: {header['copy_gbps']:.0f} GB/s (read + write)", flush=True)
        on_row([])
    rows = run_cases(cases, opts, header["copy_gbps"], on_row) if cases else []
    if op_cases:
        done = list(rows)
        rows = done + run_cases(op_cases, opts, header["copy_gbps"], lambda r: on_row(done + r),
                                run=training_ops_run.run_case,
                                t_start=time.perf_counter() - sum(r.get("case_s", 0) for r in done))
    header["complete"] = True
    header["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    header["total_s"] = round(time.perf_counter() - t0, 1)
    rows = merged(rows)
    if json_path:
        report.write_json(json_path, header, rows)
        print(f"wrote {json_path}", flush=True)

    print()
    print(report.markdown_table(rows))
    print()
    for line in report.summary_lines(header, rows):
        print(line)
    print(f"total {header['total_s']:.0f} s", flush=True)
    _outputs(header, out_dir, rows, None if args.no_docs else args.docs)
    return 0 if all(r.get("check") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
