"""python -m pyfuser.bench --latency: where the time to a first execute and to a first
training step goes, phase by phase (``runtime/phases.py``).

    python -m pyfuser.bench --latency                              # GPU: the seed fusions, GPT-2 full size
    python -m pyfuser.bench --latency --device cpu                 # CPU: tiny sizes, Triton's interpreter
    python -m pyfuser.bench --latency --latency-model llama --latency-layers 4 --latency-parts model
    python -m pyfuser.bench --latency --out DIR                    # also the run's JSON in DIR

Measured, each in a process of its own so that cold means cold: every seed fusion's
first execute (``cases.py``, group "seed"), and the first training steps of a zoo model
(``--latency-model``, default gpt2: tiny on CPU, ``zoo_bench.FULL``'s size on the GPU)
through ``torch.compile(backend="pyfuser")``: step 1, then steps 2..N (N =
``--latency-steps``, by default the step that records the CUDA graphs).  Each runs
twice against the same fresh directories: pyfuser's kernel cache (PYFUSER_CACHE_DIR),
Triton's (TRITON_CACHE_DIR) and Inductor's (TORCHINDUCTOR_CACHE_DIR): "cold" with them
empty, "warm" in a second process that finds what the first left.

The table has a row per phase (exclusive seconds, and how many times each was
entered), the time no phase covers and the wall time; columns are cold and warm of the
seeds (summed), of step 1 and of steps 2..N.  Below it: each seed's wall time, the
steps' wall times, each process's own wall time (imports included), and the slowest
Triton compiles.  docs/DEBUGGING.md ("Time to first step") says how to read it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings

CPU_SCALE = 1.0 / 4096  # the seeds' size on CPU, as the dry run's
MODEL_STEPS = 3  # default steps: graphs.WARMUP_CALLS ordinary calls, then the one that records the CUDA graphs
PARTS = ("seeds", "model")


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m pyfuser.bench --latency", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.strip().splitlines()[2:7]))
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when there is one")
    p.add_argument("--latency-parts", default="seeds,model", help="what to measure: seeds, model or both "
                                                                  "(comma-separated; default both)")
    p.add_argument("--latency-seeds", default="", help="comma-separated substrings of seed case names (default all)")
    p.add_argument("--latency-model", default="gpt2", help="the zoo model whose first steps are measured "
                                                           "(bert, gpt2, llama, t5, vit, mlp; default gpt2)")
    p.add_argument("--latency-layers", type=int, default=None, help="the model's layers (default: its size's)")
    p.add_argument("--latency-size", choices=("tiny", "full"), default=None,
                   help="the model's size (default: full on the GPU, tiny on CPU)")
    p.add_argument("--latency-steps", type=int, default=MODEL_STEPS,
                   help=f"training steps measured: step 1, then 2..N (default {MODEL_STEPS})")
    p.add_argument("--latency-against", choices=("inductor", "none"), default=None,
                   help="also train the model through torch.compile's default backend, each in processes of "
                        "its own, for the first-step and peak-memory ratios (default: inductor on the GPU)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds one process may take (default 1800)")
    p.add_argument("--out", default=None, help="folder (or .json file) for the run's JSON (default: none)")
    return p.parse_args(argv)


# -- the child: one measurement in a fresh process ------------------------------------------------
def measure_seed(name: str, device: str, scale: float) -> dict:
    """A seed fusion's first execute (the definition built before the recording)."""
    import torch

    from ..runtime import phases
    from .cases import CASES

    case = next(c for c in CASES if c.name == name)
    sizes = case.sizes(scale)
    fd = case.define(sizes)
    inputs = case.make_inputs(sizes, device, torch.Generator(device=device).manual_seed(0))
    import_s = preload(device)
    with phases.recording() as first:
        fd.execute(inputs)
        _sync(device)
    return {"first": first.as_dict(), "sizes": case.describe(sizes), "import_s": import_s}


def preload(device: str) -> float:
    """Seconds to import what a first execute imports lazily (the runtime, Triton; on
    CPU the interpreter and numpy), done before the recording: a process pays them
    once, cold or warm, and the table is about pyfuser's work."""
    t = time.perf_counter()
    import triton.language  # noqa: F401

    from ..runtime import executor  # noqa: F401

    if device == "cpu":
        from ..runtime import interpreter  # noqa: F401
    return time.perf_counter() - t


def model_setup(name: str, device: str, size: str, layers: int | None):
    """(model, batch, autocast dtype or None, sizes) of zoo model ``name``."""
    import torch

    from . import zoo
    from .zoo_bench import FULL, TINY

    table = FULL if size == "full" else TINY
    spec = table.get(name, dict(sizes={}, batch=4, amp=None))  # the MLP trains in fp32
    sizes = dict(spec["sizes"], **({"layers": layers} if layers else {}))
    built = zoo.build(name, **sizes)
    batch = {k: v.to(device) for k, v in built.batch(spec["batch"], torch.Generator().manual_seed(0)).items()}
    return built.model.to(device), batch, spec["amp"], dict(sizes, batch=spec["batch"])


def measure_model(name: str, device: str, size: str = "tiny", layers: int | None = None,
                  steps: int = MODEL_STEPS, backend: str = "pyfuser") -> dict:
    """The phases of a zoo model's first training step through torch.compile(backend=...),
    and of steps 2..``steps`` together; on the GPU also the peak memory the steps
    allocated and reserved (the model's weights and gradients included: the same for
    every backend)."""
    import torch

    import pyfuser.dynamo  # noqa: F401 - registers the backend

    from ..runtime import phases
    from . import zoo

    model, batch, amp, sizes = model_setup(name, device, size, layers)
    import_s = preload(device)
    compiled = torch.compile(model, backend=backend)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        t = time.perf_counter()
        with torch.autocast(device, dtype=amp or torch.float32, enabled=amp is not None):
            loss = zoo.loss(compiled(**batch))
        loss.backward()
        model.zero_grad(set_to_none=True)
        _sync(device)
        return time.perf_counter() - t

    with phases.recording() as first:
        walls, dynamo = [step()], dynamo_seconds()
        _charge_dynamo(dynamo)
    later = None
    if steps > 1:
        with phases.recording() as rec:
            walls += [step() for _ in range(steps - 1)]
            _charge_dynamo(dynamo_seconds() - dynamo)  # recompiles
        later = rec.as_dict()
    peak = {"peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved()} \
        if device == "cuda" else {}
    return {"first": first.as_dict(), "later": later, "step_walls": walls, "import_s": import_s,
            "sizes": ", ".join(f"{k}={v}" for k, v in sizes.items()), "backend": backend, **peak}


def dynamo_seconds() -> float:
    """Seconds Dynamo spent compiling frames in this process, less its calls of the
    backend: torch's compile metrics (``torch._dynamo.utils.compilation_time_metrics``,
    a private dict read by the bench alone, as zoo_bench reads Dynamo's counters; 0
    where it is missing)."""
    try:
        from torch._dynamo.utils import compilation_time_metrics as metrics
    except ImportError:
        return 0.0
    return sum(metrics.get("_compile.compile_inner", ())) - sum(metrics.get("OutputGraph.call_user_compiler", ()))


def _charge_dynamo(seconds: float):
    from ..runtime import phases

    if seconds > 0:
        phases.charge("dynamo", seconds)


def _sync(device: str):
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def child_main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m pyfuser.bench.latency")
    p.add_argument("--child", required=True, help="seed:NAME or model:NAME")
    p.add_argument("--device", required=True)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--size", default="tiny")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--steps", type=int, default=MODEL_STEPS)
    p.add_argument("--backend", default="pyfuser")
    p.add_argument("--json-out", required=True)
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    kind, name = a.child.split(":", 1)
    if kind == "seed":
        result = measure_seed(name, a.device, a.scale)
    else:
        result = measure_model(name, a.device, a.size, a.layers, a.steps, a.backend)
    with open(a.json_out, "w") as f:
        json.dump(result, f)
    return 0


# -- the driver ------------------------------------------------------------------------------------
def child_env(cache_root: str) -> dict:
    """The environment of a measured process: every compile cache in ``cache_root``, and
    this pyfuser first on the path."""
    import pyfuser

    src = os.path.dirname(os.path.dirname(os.path.abspath(pyfuser.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for var, sub in (("PYFUSER_CACHE_DIR", "pyfuser"), ("TRITON_CACHE_DIR", "triton"),
                     ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
        env[var] = os.path.join(cache_root, sub)
    return env


def run_child(args: list, env: dict, timeout: float) -> dict:
    """One measured process: its result (with ``process_s``, its own wall time), or
    ``{"error": ...}`` with the end of its output."""
    with tempfile.TemporaryDirectory(prefix="pyfuser-latency-out-") as d:
        out = os.path.join(d, "result.json")
        cmd = [sys.executable, "-m", "pyfuser.bench.latency", *args, "--json-out", out]
        t = time.perf_counter()
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        took = time.perf_counter() - t
        if r.returncode != 0 or not os.path.exists(out):
            tail = (r.stdout + r.stderr).strip().splitlines()[-15:]
            return {"error": f"exit status {r.returncode}", "output": "\n".join(tail)}
        with open(out) as f:
            result = json.load(f)
    result["process_s"] = took
    return result


def measure_cold_warm(args: list, timeout: float, say=print) -> dict:
    """``{"cold": ..., "warm": ...}``: the child ``args`` run twice against one set of
    fresh cache directories."""
    runs = {}
    with tempfile.TemporaryDirectory(prefix="pyfuser-latency-cache-") as root:
        env = child_env(root)
        for mode in ("cold", "warm"):
            runs[mode] = run_child(args, env, timeout)
            res = runs[mode]
            say(f"  {mode}: " + (f"FAILED ({res['error']})\n{res.get('output', '')}" if "error" in res else
                                 f"{res['first']['wall']:.2f} s first call, process {res['process_s']:.1f} s"))
    return runs


def seed_names(filter_text: str) -> list:
    from .cases import CASES

    subs = [s for s in filter_text.split(",") if s]
    return [c.name for c in CASES if c.group == "seed" and (not subs or any(s in c.name for s in subs))]


def run(args, device: str, say=print) -> dict:
    """Every measurement ``args`` asks for: {"seeds": {name: runs}, "model": runs or None}."""
    parts = {p for p in args.latency_parts.split(",") if p}
    if not parts <= set(PARTS):
        raise SystemExit(f"--latency-parts: expected some of {', '.join(PARTS)}, got {args.latency_parts!r}")
    out = {"seeds": {}, "model": None, "against": None}
    if "seeds" in parts:
        scale = CPU_SCALE if device == "cpu" else 1.0
        for name in seed_names(args.latency_seeds):
            say(f"seed {name}")
            out["seeds"][name] = measure_cold_warm(
                ["--child", f"seed:{name}", "--device", device, "--scale", repr(scale)], args.timeout, say)
    if "model" in parts:
        size = args.latency_size or ("full" if device == "cuda" else "tiny")
        say(f"model {args.latency_model} ({size}), {args.latency_steps} steps")
        child = ["--child", f"model:{args.latency_model}", "--device", device, "--size", size,
                 "--steps", str(args.latency_steps)]
        if args.latency_layers:
            child += ["--layers", str(args.latency_layers)]
        out["model"] = measure_cold_warm(child, args.timeout, say)
        against = args.latency_against or ("inductor" if device == "cuda" else "none")
        if against != "none":
            say(f"model {args.latency_model} through torch.compile ({against})")
            out["against"] = measure_cold_warm(child + ["--backend", against], args.timeout, say)
    return out


# -- the report ------------------------------------------------------------------------------------
def columns(results: dict, model: str) -> dict:
    """Header -> PhaseReport: the seeds summed, the model's step 1 and steps 2..N, cold and warm."""
    from ..runtime.phases import PhaseReport

    cols = {}
    for mode in ("cold", "warm"):
        ok = [r[mode] for r in results["seeds"].values() if "error" not in r[mode]]
        if ok:
            total = PhaseReport()
            for r in ok:
                total = total.merged(PhaseReport.from_dict(r["first"]))
            cols[f"seeds {mode}"] = total
    runs = results.get("model") or {}
    for key, label in (("first", "step 1"), ("later", "steps 2+")):
        for mode in ("cold", "warm"):
            r = runs.get(mode)
            if r and "error" not in r and r.get(key):
                cols[f"{model} {label} {mode}"] = PhaseReport.from_dict(r[key])
    return cols


def report_lines(results: dict, model: str) -> list:
    """The table and the lines below it (module docstring)."""
    from ..runtime.phases import table

    cols = columns(results, model)
    lines = (table(cols).splitlines() if cols else ["(no measurement succeeded)"]) + [""]
    for label, runs in _runs(results, model):
        lines.append(f"{label}: " + ", ".join(_summary(runs[m], m, steps=label.startswith("model"))
                                              for m in ("cold", "warm")))
    lines += against_lines(results, model)
    compiles = cold_compiles(results, model)
    if compiles:
        lines.append(f"slowest Triton compiles (cold, of {len(compiles)}; {sum(c[3] for c in compiles):.2f} s "
                     f"in all):")
        lines += [f"  {label}: {k} ({s}): {t:.3f} s" for label, k, s, t in compiles[:10]]
    return lines


def _runs(results: dict, model: str) -> list:
    """(label, {"cold": ..., "warm": ...}) of every measurement."""
    out = [(f"seed {name}", runs) for name, runs in results["seeds"].items()]
    out += [(f"model {model}", results["model"])] if results.get("model") else []
    return out + ([(f"model {model} (torch.compile)", results["against"])] if results.get("against") else [])


def against_lines(results: dict, model: str) -> list:
    """pyfuser's first step, warm first step, later steps and peak memory beside
    torch.compile's, each process alone (the issue's ratios: first step and memory
    pyfuser / torch.compile, lower is better).  Later steps: step 2, ordinary on both
    sides, and the median of the steps after the one that records pyfuser's CUDA graphs
    (``MODEL_STEPS``; with ``--latency-steps`` above it): a median over steps 2..N would
    mix the recording into pyfuser's side alone."""
    ours, theirs = results.get("model") or {}, results.get("against") or {}
    if not theirs:
        return []
    lines = [f"{model} against torch.compile (pyfuser / torch.compile):"]
    for mode in ("cold", "warm"):
        a, b = ours.get(mode, {}), theirs.get(mode, {})
        if "error" in a or "error" in b or not a or not b:
            lines.append(f"  {mode}: not compared (a process failed)")
            continue
        first = f"first step {a['step_walls'][0]:.2f} s / {b['step_walls'][0]:.2f} s = " \
                f"{a['step_walls'][0] / b['step_walls'][0]:.2f}x"
        later, sa, sb = "", a["step_walls"], b["step_walls"]
        if len(sa) > 1 and len(sb) > 1:  # step 2: both ordinary (pyfuser's MODEL_STEPS-th records its graphs)
            later = f"; step 2 {sa[1] * 1e3:.1f} ms / {sb[1] * 1e3:.1f} ms"
        if len(sa) > MODEL_STEPS and len(sb) > MODEL_STEPS:
            ma, mb = _median(sa[MODEL_STEPS:]), _median(sb[MODEL_STEPS:])
            later += f"; steps {MODEL_STEPS + 1}+ median {ma * 1e3:.1f} ms / {mb * 1e3:.1f} ms"
        peak = ""
        if a.get("peak_allocated") and b.get("peak_allocated"):
            pa, pb = a["peak_allocated"], b["peak_allocated"]
            peak = f"; peak allocated {pa / 2**30:.2f} GiB / {pb / 2**30:.2f} GiB = {pa / pb:.2f}x" \
                   f" (reserved {a['peak_reserved'] / 2**30:.2f} / {b['peak_reserved'] / 2**30:.2f} GiB)"
        lines.append(f"  {mode}: {first}{later}{peak}")
    cold, warm = ours.get("cold", {}), ours.get("warm", {})
    if cold.get("step_walls") and warm.get("step_walls"):
        lines.append(f"  pyfuser's warm first step is {warm['step_walls'][0] / cold['step_walls'][0]:.0%} of its cold one")
    return lines + [""]


def _median(xs: list) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def cold_compiles(results: dict, model: str) -> list:
    """(measurement, kernel, scheduler, seconds) of the cold runs' Triton compiles, slowest
    first (each process numbers its kernels from 0: the label tells them apart)."""
    rows = []
    for label, runs in _runs(results, model):
        cold = runs["cold"]
        for key in ("first", "later"):
            if "error" not in cold and cold.get(key):
                rows += [(label, k, s, t) for k, s, t in cold[key]["kernels"]]
    return sorted(rows, key=lambda r: -r[3])


def _summary(res: dict, mode: str, steps: bool = False) -> str:
    if "error" in res:
        return f"{mode} FAILED ({res['error']})"
    process = f"(process {res['process_s']:.1f} s, imports before {res.get('import_s', 0.0):.1f} s)"
    if steps:
        return f"{mode} steps {' + '.join(f'{w:.2f}' for w in res['step_walls'])} s {process}"
    return f"{mode} {res['first']['wall']:.3f} s {process}"


def header(args, device: str, commit) -> dict:
    import torch

    try:
        import triton

        tv = triton.__version__
    except Exception:
        tv = None
    now = datetime.datetime.now(datetime.timezone.utc)
    return {"date": now.strftime("%Y-%m-%d"), "device": device,
            "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu", "commit": commit,
            "torch": torch.__version__, "triton": tv, "python": platform.python_version(),
            "model": args.latency_model, "model_size": args.latency_size or ("full" if device == "cuda" else "tiny"),
            "layers": args.latency_layers, "steps": args.latency_steps,
            "against": args.latency_against or ("inductor" if device == "cuda" else "none"),
            "started": now.isoformat(timespec="seconds")}


def json_path(out: str, head: dict) -> str:
    if out.endswith(".json"):
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        return out
    from .report import slug

    os.makedirs(out, exist_ok=True)
    return os.path.join(out, f"latency-{head['date']}-{slug(head['gpu'])}.json")


def main(argv=None, commit=None) -> int:
    args = parse(sys.argv[1:] if argv is None else list(argv))
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: use --device cpu (tiny sizes, Triton's interpreter)", flush=True)
        return 2
    head = header(args, device, commit)
    print(f"pyfuser latency: {head['gpu']}, commit {commit}, torch {head['torch']}, triton {head['triton']}",
          flush=True)
    results = run(args, device, say=lambda s: print(s, flush=True))
    lines = report_lines(results, args.latency_model)
    print()
    print("\n".join(lines), flush=True)
    if args.out:
        path = json_path(args.out, head)
        with open(path, "w") as f:
            json.dump({"header": head, "results": results, "table": "\n".join(lines)}, f, indent=1)
        print(f"wrote {path}", flush=True)
    runs = _runs(results, args.latency_model)
    return 0 if runs and not any("error" in r for _, both in runs for r in both.values()) else 1


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
