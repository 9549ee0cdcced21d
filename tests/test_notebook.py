"""The lab notebook stays out of the code: source comments name docs/TUNING.md
sections that exist, cite result files that exist, and carry no measurements log.

What ``test_no_lab_notebook_in_src`` rejects in a comment or docstring under src/:

* a date, ``20YY-MM-DD``;
* a before -> after timing, ``X -> Y us`` / ``X -> Y ms`` (with or without a unit
  on X, with ``->`` or ``→``), or ``from X to Y us`` / ``ms``;
* a commit-like token (7 to 40 hex digits, with at least one digit and one letter)
  on a line that also holds a timing (a number followed by ``us`` or ``ms``).

A rule's magnitudes in a few words ("about 20 instructions", "about 5 us of a
launch's host time") stay allowed: they are the why.  The tables, dates and commits
behind a rule belong in docs/TUNING.md.

The notebook also stays small outside src/: benchmarks/ keeps at most a dozen tools
that import none of each other, benchmarks/results/ at most 40 records, every record
a doc cites exists, docs/TUNING.md and docs/BENCHMARKS.md stay short, and core
comments name a rule, not the model a measurement was made on.
"""
from __future__ import annotations

import ast
import glob
import io
import os
import re
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
TUNING = os.path.join(ROOT, "docs", "TUNING.md")

_TAG = re.compile(r"TUNING\.md#([A-Za-z0-9_-]+)")
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_NUM = r"\d+(?:\.\d+)?"
_ARROW = re.compile(rf"{_NUM}\s*(?:us|ms)?\s*(?:->|→)\s*{_NUM}\s*(?:us|ms)\b")
_FROM_TO = re.compile(rf"\bfrom {_NUM} to {_NUM}\s*(?:us|ms)\b")
_TIMING = re.compile(rf"\b{_NUM}\s*(?:us|ms)\b")
_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
_RESULT = re.compile(r"benchmarks/results/([A-Za-z0-9_.*{},\-]+\.(?:txt|json|png|log))")
# ``..._NAME.txt``: a record named without its ``DATE-GPU-`` prefix
_SHORT = re.compile(r"\.\.\._([A-Za-z0-9_.*{},\-]+\.(?:txt|json|png|log))")
BENCH = os.path.join(ROOT, "benchmarks")
MAX_TOOLS, MAX_RESULTS, MAX_TUNING_LINES, MAX_BENCHMARKS_LINES = 12, 40, 500, 300
# A model named in a core comment (outside src/pyfuser/bench/): "T5" only where it
# cannot be an IR value's name.
_MODEL = re.compile(r"\b(?:GPT-?2|BERT|LLaMA|Llama|ViT|RoBERTa|Mistral|Qwen|T5(?='s|-| adds| model))")
# Worked examples in design essays that explain a rule; anecdotes go to TUNING.md.
MAX_MODEL_MENTIONS = 0


def _py_files():
    for d, _, files in os.walk(SRC):
        for f in sorted(files):
            if f.endswith(".py"):
                yield os.path.join(d, f)


def _prose(path):
    """(line number, text) of every comment and docstring line of a source file."""
    text = open(path, encoding="utf-8").read()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                for i, line in enumerate(body[0].value.value.splitlines()):
                    yield body[0].lineno + i, line


def _sections():
    return {m.group(1).strip() for m in re.finditer(r"^## +(\S+)", open(TUNING, encoding="utf-8").read(), re.M)}


def test_tuning_tags_resolve():
    sections = _sections()
    missing = []
    for path in _py_files():
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            for tag in _TAG.findall(line):
                if tag not in sections:
                    missing.append(f"{os.path.relpath(path, ROOT)}:{n}: {tag}")
    assert not missing, "tags naming no '## ' section of docs/TUNING.md:\n" + "\n".join(missing)


def test_no_lab_notebook_in_src():
    found = []
    for path in _py_files():
        for n, line in _prose(path):
            why = ("a date" if _DATE.search(line) else
                   "a before -> after timing" if _ARROW.search(line) or _FROM_TO.search(line) else
                   "a commit next to a timing" if _HASH.search(line) and _TIMING.search(line) else None)
            if why:
                found.append(f"{os.path.relpath(path, ROOT)}:{n}: {why}: {line.strip()}")
    assert not found, ("measurement log in src/ comments (move it to docs/TUNING.md and "
                       "tag the section):\n" + "\n".join(found))


def _expand(name):
    """``a_{x,y}_b`` -> ``a_x_b``, ``a_y_b``."""
    m = re.search(r"\{([^{}]*)\}", name)
    if not m:
        return [name]
    return [n for alt in m.group(1).split(",") for n in _expand(name[:m.start()] + alt + name[m.end():])]


def test_cited_results_exist():
    """Every benchmarks/results/ file the docs, the READMEs and src/ cite exists: full
    paths, ``{a,b}`` alternatives and ``..._NAME`` short forms (a ``*`` in a citation
    must match at least one file)."""
    cited = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md"),
                                                                      os.path.join(BENCH, "README.md")]
    cited += [p for p in glob.glob(os.path.join(SRC, "**", "*.*"), recursive=True) if p.endswith((".py", ".md"))]
    missing = []
    for path in cited:
        if not os.path.exists(path):
            continue
        text = open(path, encoding="utf-8").read()
        names = [n for c in _RESULT.findall(text) for n in _expand(c)]
        names += ["*" + n for c in _SHORT.findall(text) for n in _expand(c)]
        for name in names:
            if not glob.glob(os.path.join(BENCH, "results", name)):
                missing.append(f"{os.path.relpath(path, ROOT)}: {name}")
    assert not missing, "cited result files missing from benchmarks/results/:\n" + "\n".join(missing)


def test_benchmarks_are_a_few_independent_tools():
    """At most a dozen scripts, none importing another (a shared helper belongs in
    pyfuser.bench), each documented in benchmarks/README.md."""
    scripts = sorted(f[:-3] for f in os.listdir(BENCH) if f.endswith(".py"))
    assert len(scripts) <= MAX_TOOLS, f"{len(scripts)} scripts in benchmarks/ (at most {MAX_TOOLS}): {scripts}"
    readme = open(os.path.join(BENCH, "README.md"), encoding="utf-8").read()
    bad = []
    for name in scripts:
        if f"`{name}.py" not in readme:
            bad.append(f"{name}.py: not in benchmarks/README.md")
        tree = ast.parse(open(os.path.join(BENCH, name + ".py"), encoding="utf-8").read())
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{name}.py imports {m}" for m in mods if m.split(".")[0] in scripts]
        if "sys.path" in open(os.path.join(BENCH, name + ".py"), encoding="utf-8").read():
            bad.append(f"{name}.py edits sys.path")
    assert not bad, "\n".join(bad)


def test_results_keep_only_latest_runs_and_cited_files():
    results = os.listdir(os.path.join(BENCH, "results"))
    assert len(results) <= MAX_RESULTS, (f"{len(results)} files in benchmarks/results/ (at most {MAX_RESULTS}): keep "
                                         "the latest run per GPU kind and the files the docs cite")


def test_tuning_and_benchmarks_pages_stay_short():
    for name, cap in (("TUNING.md", MAX_TUNING_LINES), ("BENCHMARKS.md", MAX_BENCHMARKS_LINES)):
        n = len(open(os.path.join(ROOT, "docs", name), encoding="utf-8").read().splitlines())
        assert n <= cap, f"docs/{name}: {n} lines (at most {cap}): cut history and duplicate tables"


def test_core_comments_name_rules_not_models():
    """A comment says the rule and names its TUNING.md section; which model a
    measurement was made on belongs in that section."""
    found = []
    for path in _py_files():
        if os.sep + "bench" + os.sep in path:
            continue
        for n, line in _prose(path):
            if _MODEL.search(line):
                found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert len(found) <= MAX_MODEL_MENTIONS, (
        f"{len(found)} model names in core comments (at most {MAX_MODEL_MENTIONS}); state the rule and "
        "name its docs/TUNING.md section:\n" + "\n".join(found))
