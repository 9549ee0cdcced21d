"""Benchmark output: the markdown table, the JSON record, the PNG chart and the
section of docs/BENCHMARKS.md for one run (one date + GPU)."""
from __future__ import annotations

import json
import math
import os
import re

COLUMNS = ["case", "shape/dtype", "pyfuser ms", "inductor ms", "eager ms", "pyfuser % of copy",
           "inductor % of copy", "speedup vs inductor", "kernels", "regs", "spills", "check"]

DOCS_HEADER = """# Benchmarks

Written by `python -m pyfuser.bench` (run it on a GPU from the source tree:
`PYTHONPATH=src python -m pyfuser.bench`; `--help` lists the options).  Only measured
numbers go here; each run's full record is the JSON file linked from its section,
next to a bar chart of % of copy bandwidth.

Method:

- Every case is a fusion (`src/pyfuser/bench/cases.py`): the report's seed fusions at
  the report's sizes, and a suite of training-size fusions (softmax/log-softmax at
  short, medium and vocabulary-wide rows, layer/RMS norm, bias+GELU, softmax
  backward, an outer-axis reduction, dropout+residual+layer norm, attention
  softmax+dropout) that move several times the 50 MB L2, and the training step's
  fusions (`--cases training`, defined in `src/pyfuser/bench/training.py`).
- The same math written in PyTorch eager is the baseline and, through
  `torch.compile` (default mode, `torch._dynamo.reset()` before each case), the
  Inductor baseline.
- Before timing, pyfuser's outputs are checked against eager's (`check`); dropout
  outputs are checked with pyfuser's own keep mask (out == where(mask, y * scale, 0)).
- Time = median of `triton.testing.do_bench` (L2 flushed before every repetition).
  pyfuser is timed through `fd.execute(inputs)`, host work included.
- Bytes = every input and every output once (an output that is a view of an input
  moves 0 bytes); the same count for every implementation.  % of copy = effective
  GB/s / the GB/s of a 1 GiB device-to-device copy (read + write) measured in the
  same run.
- `kernels` = kernel launches per execute; `regs` = per kernel, as the compiled
  Triton kernel reports them (`CompiledKernel.n_regs`); `spills` = ptxas's spill
  stores / 4 where the kernel has local memory (the driver's `n_spills` counts all
  local memory, such as accurate sin/cos's argument-reduction table).
- The host-overhead case times a cached execute of a one-kernel pointwise fusion on
  1024 elements: wall time per call (`time.perf_counter`, many calls), target <= 30 us.

<!-- Runs follow, newest first; each is replaced when the same date and GPU run again. -->
"""

_BEGIN = "<!-- bench-run: {key} -->"
_END = "<!-- /bench-run -->"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def _f(v, spec=".3f", suffix=""):
    return "-" if v is None else f"{v:{spec}}{suffix}"


def _list(xs):
    if not xs or all(x is None for x in xs):  # no kernels, or the interpreter (no registers)
        return "-"
    return "/".join("?" if x is None else str(x) for x in xs)


def _ms(v):
    if v is None:
        return "-"
    return f"{v:.4f}" if v < 0.1 else f"{v:.3f}"


def row_cells(r: dict) -> list[str]:
    kernels = "-" if r.get("kernels") is None else str(r["kernels"])
    if r.get("host_segments"):
        kernels += f" +{r['host_segments']} host"
    check = r.get("check", "?")
    if r.get("group") == "host" and r.get("host_us_per_call") is not None:
        check += f" ({r['host_us_per_call']:.1f} us {'<=' if r.get('host_within_target') else '>'} " \
                 f"{r.get('host_target_us', 30):.0f})"
    return [r.get("case", "?"), r.get("shape", ""), _ms(r.get("pyfuser_ms")), _ms(r.get("inductor_ms")),
            _ms(r.get("eager_ms")), _f(r.get("pyfuser_pct_of_copy"), ".0f", "%"),
            _f(r.get("inductor_pct_of_copy"), ".0f", "%"), _f(r.get("speedup_vs_inductor"), ".2f", "x"),
            kernels, _list(r.get("regs")), _list(r.get("spills")), check]


# The training-ops group (forward + backward through autograd, training_ops.py): its
# own columns, "% of bound" being the bytes of its fwd+bwd byte model over the time,
# as a share of copy bandwidth.
OPS_GROUP = "training_ops"
OPS_IMPLS = ("eager", "inductor", "pyfuser", "liger")
OPS_COLUMNS = (["case", "shape/dtype"] + [f"{i} ms" for i in OPS_IMPLS] + [f"{i} % of bound" for i in OPS_IMPLS]
               + ["pyfuser vs inductor", "pyfuser vs liger", "check"])


def _na(r, impl):
    """"n/a" for an implementation the case has none of (Liger without the op, or not
    importable), else "-" for no number."""
    return "n/a" if str(r.get("checks", {}).get(impl, "")).startswith("n/a") else "-"


def ops_row_cells(r: dict) -> list[str]:
    ms = [_ms(r.get(f"{i}_ms")) if r.get(f"{i}_ms") is not None else _na(r, i) for i in OPS_IMPLS]
    pct = [_f(r.get(f"{i}_pct_of_copy"), ".0f", "%") if r.get(f"{i}_pct_of_copy") is not None else _na(r, i)
           for i in OPS_IMPLS]
    vs_liger = _f(r.get("speedup_vs_liger"), ".2f", "x") if r.get("speedup_vs_liger") else _na(r, "liger")
    return ([r.get("case", "?"), r.get("shape", "")] + ms + pct
            + [_f(r.get("speedup_vs_inductor"), ".2f", "x"), vs_liger, r.get("check", "?")])


def _table(columns, cells) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    return lines


def markdown_table(rows: list[dict]) -> str:
    """The fusions' table; the training-ops rows, if any, in a table of their own after it."""
    ops = [r for r in rows if r.get("group") == OPS_GROUP]
    rest = [r for r in rows if r.get("group") != OPS_GROUP]
    lines = _table(COLUMNS, [row_cells(r) for r in rest]) if rest or not ops else []
    if ops:
        lines += ([""] if lines else []) + _table(OPS_COLUMNS, [ops_row_cells(r) for r in ops])
    return "\n".join(lines)


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(rows: list[dict]) -> dict:
    def speedups(groups):
        return [r.get("speedup_vs_inductor") for r in rows if r.get("group") in groups and r.get("speedup_vs_inductor")]

    suite, seeds, training = speedups({"suite"}), speedups({"seed"}), speedups({"training"})
    general = speedups({"general"})
    out = {"geomean_speedup_vs_inductor_suite": _round(geomean(suite)), "suite_cases_timed": len(suite),
           "geomean_speedup_vs_inductor_seeds": _round(geomean(seeds)), "seed_cases_timed": len(seeds),
           "geomean_speedup_vs_inductor_training": _round(geomean(training)), "training_cases_timed": len(training),
           "geomean_speedup_vs_inductor_all": _round(geomean(suite + seeds + training)),
           # held-out cases: their own mean, and which of them torch.compile beats
           "geomean_speedup_vs_inductor_general": _round(geomean(general)), "general_cases_timed": len(general),
           "general_below_inductor": [r["case"] for r in rows if r.get("group") == "general"
                                      and r.get("speedup_vs_inductor") and r["speedup_vs_inductor"] < 1.0],
           "checks_ok": sum(1 for r in rows if r.get("check") == "ok"), "cases": len(rows),
           "spilling_kernels": sum(1 for r in rows for s in (r.get("spills") or []) if s)}
    if any(r.get("group") == OPS_GROUP for r in rows):
        for impl in ("inductor", "liger"):
            xs = [r.get(f"speedup_vs_{impl}") for r in rows if r.get("group") == OPS_GROUP and r.get(f"speedup_vs_{impl}")]
            out[f"geomean_speedup_vs_{impl}_training_ops"] = _round(geomean(xs))
            out[f"training_ops_cases_timed_vs_{impl}"] = len(xs)
    host = [r for r in rows if r.get("group") == "host" and r.get("host_us_per_call") is not None]
    if host:
        out["host_us_per_call"] = host[0]["host_us_per_call"]
        out["host_within_target"] = host[0].get("host_within_target")
    return out


def _round(x, n=3):
    return None if x is None else round(x, n)


def summary_lines(header: dict, rows: list[dict]) -> list[str]:
    s = summary(rows)
    lines = []
    if s["geomean_speedup_vs_inductor_suite"] is not None:
        lines.append(f"geomean speedup vs torch.compile, suite ({s['suite_cases_timed']} cases): "
                     f"{s['geomean_speedup_vs_inductor_suite']:.2f}x")
    if s["geomean_speedup_vs_inductor_seeds"] is not None:
        lines.append(f"geomean speedup vs torch.compile, seed fusions ({s['seed_cases_timed']} cases): "
                     f"{s['geomean_speedup_vs_inductor_seeds']:.2f}x")
    if s["geomean_speedup_vs_inductor_training"] is not None:
        lines.append(f"geomean speedup vs torch.compile, training fusions ({s['training_cases_timed']} cases): "
                     f"{s['geomean_speedup_vs_inductor_training']:.2f}x")
    if s["geomean_speedup_vs_inductor_general"] is not None:
        below = ", ".join(s["general_below_inductor"]) or "none"
        lines.append(f"geomean speedup vs torch.compile, held-out fusions ({s['general_cases_timed']} cases, "
                     f"not tuned on): {s['geomean_speedup_vs_inductor_general']:.2f}x; below 1.0x: {below}")
    for impl, who in (("inductor", "torch.compile"), ("liger", "Liger Kernel")):
        if s.get(f"geomean_speedup_vs_{impl}_training_ops") is not None:
            lines.append(f"geomean speedup vs {who}, training ops forward + backward "
                         f"({s[f'training_ops_cases_timed_vs_{impl}']} cases): "
                         f"{s[f'geomean_speedup_vs_{impl}_training_ops']:.2f}x")
    if "host_us_per_call" in s:
        lines.append(f"host overhead (cached execute, 1024 elements): {s['host_us_per_call']:.1f} us per call "
                     f"({'within' if s['host_within_target'] else 'over'} the 30 us target)")
    lines.append(f"checks: {s['checks_ok']} of {s['cases']} ok; kernels that spill: {s['spilling_kernels']}")
    return lines


# --- files -------------------------------------------------------------------------------------


def write_json(path: str, header: dict, rows: list[dict]):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = dict(header)
    data["summary"] = summary(rows)
    data["rows"] = rows
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


def load_json(path: str) -> tuple[dict, list[dict]]:
    with open(path) as f:
        data = json.load(f)
    rows = data.pop("rows", [])
    data.pop("summary", None)
    return data, rows


def write_png(path: str, header: dict, rows: list[dict]) -> str | None:
    """Bar chart of % of copy bandwidth per case and implementation.  Returns an
    explanation instead of raising when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ("matplotlib is not installed: no PNG chart.  Install it (pip install matplotlib) and run "
                f"`python -m pyfuser.bench --from-json {os.path.splitext(path)[0]}.json` to draw it from the JSON.")
    timed = [r for r in rows if r.get("group") != "host" and any(
        r.get(k) is not None for k in ("pyfuser_pct_of_copy", "inductor_pct_of_copy", "eager_pct_of_copy"))]
    if not timed:
        return "no timed cases: no PNG chart"
    impls = [("pyfuser", "pyfuser_pct_of_copy", "#2a7ab9"), ("torch.compile", "inductor_pct_of_copy", "#e08a1e"),
             ("eager", "eager_pct_of_copy", "#9a9a9a")]
    n = len(timed)
    fig, ax = plt.subplots(figsize=(10, 0.5 * n + 1.8))
    height = 0.27
    for j, (label, key, color) in enumerate(impls):
        ys = [i + (j - 1) * height for i in range(n)]
        vals = [r.get(key) or 0.0 for r in timed]
        ax.barh(ys, vals, height=height, label=label, color=color)
    ax.set_yticks(range(n))
    ax.set_yticklabels([r["case"] for r in timed], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(100, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel(f"% of device-to-device copy bandwidth ({header.get('copy_gbps') or 0:.0f} GB/s)")
    ax.set_title(f"pyfuser vs torch.compile vs eager - {header.get('gpu', '?')}, {header.get('date', '?')}, "
                 f"commit {str(header.get('commit', '?'))[:10]}", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def docs_section(header: dict, rows: list[dict], json_rel: str | None, png_rel: str | None) -> str:
    key = f"{header.get('date')} {slug(str(header.get('gpu')))}"
    lines = [_BEGIN.format(key=key), "",
             f"## {header.get('date')}, {header.get('gpu')}", "",
             f"- commit `{header.get('commit')}`{' (working tree had changes)' if header.get('dirty') else ''}; "
             f"torch {header.get('torch')}, triton {header.get('triton')}",
             f"- copy bandwidth: {_f(header.get('copy_gbps'), '.0f')} GB/s (1 GiB device-to-device, read + write); "
             f"do_bench warmup={header.get('warmup_ms')} ms rep={header.get('rep_ms')} ms"
             + (f", the lowest median of {header['timing_rounds']} rounds" if header.get("timing_rounds", 1) > 1 else "")]
    if header.get("note"):
        lines.append(f"- {header['note']}")
    if not header.get("complete", True):
        lines.append(f"- **partial run**: {len(rows)} of {header.get('cases_requested', '?')} cases")
    lines += [f"- {s}" for s in summary_lines(header, rows)]
    if json_rel:
        lines.append(f"- record: [{os.path.basename(json_rel)}]({json_rel})")
    lines += ["", markdown_table(rows), ""]
    if png_rel:
        lines += [f"![% of copy bandwidth per case]({png_rel})", ""]
    lines.append(_END)
    return "\n".join(lines) + "\n"


def update_docs(path: str, header: dict, rows: list[dict], json_path: str | None, png_path: str | None):
    """Create docs/BENCHMARKS.md if needed and put this run's section in it, replacing
    the section of the same date and GPU."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    rel = lambda p: os.path.relpath(os.path.abspath(p), d) if p and os.path.exists(p) else None  # noqa: E731
    section = docs_section(header, rows, rel(json_path), rel(png_path))
    text = open(path).read() if os.path.exists(path) else DOCS_HEADER
    key = f"{header.get('date')} {slug(str(header.get('gpu')))}"
    begin = _BEGIN.format(key=key)
    if begin in text:
        i = text.index(begin)
        j = text.find(_END, i)
        j = len(text) if j < 0 else j + len(_END)
        text = text[:i] + section.rstrip("\n") + text[j:]
    else:
        marker = "<!-- Runs follow"
        k = text.find(marker)
        if k >= 0:
            k = text.find("\n", k) + 1
            text = text[:k] + "\n" + section + text[k:]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)
