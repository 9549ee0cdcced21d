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
_RESULT = re.compile(r"benchmarks/results/([A-Za-z0-9_.*\-]+\.(?:txt|json|png|log))")


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


def test_cited_results_exist():
    """Every benchmarks/results/ file the docs, the benchmarks' README and src/ cite
    exists (a ``*`` in a citation must match at least one file)."""
    cited = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md"),
                                                                      os.path.join(ROOT, "benchmarks", "README.md")]
    cited += [p for p in glob.glob(os.path.join(SRC, "**", "*.*"), recursive=True) if p.endswith((".py", ".md"))]
    missing = []
    for path in cited:
        if not os.path.exists(path):
            continue
        for name in _RESULT.findall(open(path, encoding="utf-8").read()):
            if not glob.glob(os.path.join(ROOT, "benchmarks", "results", name)):
                missing.append(f"{os.path.relpath(path, ROOT)}: {name}")
    assert not missing, "cited result files missing from benchmarks/results/:\n" + "\n".join(missing)
