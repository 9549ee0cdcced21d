"""pyproject.toml declares what the package imports: ``pip install .`` then any import
of pyfuser finds its third-party modules (extras for the benchmark tools)."""
from __future__ import annotations

import ast
import pathlib
import re
import sys

import pytest

from pyfuser import ToolchainError
from pyfuser.runtime.interpreter import numpy_hint

ROOT = pathlib.Path(__file__).resolve().parents[1]
# import name -> the distribution that provides it
PROVIDED_BY = {"functorch": "torch", "liger_kernel": "liger-kernel"}  # import name -> distribution


def third_party_imports() -> dict:
    found = {}
    for path in (ROOT / "src" / "pyfuser").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "pyfuser" and top not in sys.stdlib_module_names:
                    found.setdefault(PROVIDED_BY.get(top, top), set()).add(path.relative_to(ROOT).as_posix())
    return found


def declared():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = lambda req: re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()  # noqa: E731
    extras = {name(r) for reqs in project.get("optional-dependencies", {}).values() for r in reqs}
    return {name(r) for r in project["dependencies"]}, extras


def test_every_third_party_import_is_declared():
    required, extras = declared()
    missing = {dist: sorted(paths) for dist, paths in third_party_imports().items()
               if dist.lower() not in required | extras}
    assert missing == {}, f"imported but not declared in pyproject.toml: {missing}"


def test_the_runtime_needs_only_the_required_dependencies():
    """Everything but the benchmark tools runs on the required dependencies alone."""
    required, _ = declared()
    tools = ("src/pyfuser/bench/",)
    outside = {dist: sorted(p for p in paths if not p.startswith(tools))
               for dist, paths in third_party_imports().items() if dist.lower() not in required}
    assert {d: p for d, p in outside.items() if p} == {}


@pytest.mark.parametrize("triton, numpy, bad", [("3.6.0", "2.3.5", False), ("3.6.0", "2.4.0", True),
                                                ("3.6.1", "2.5.1", True), ("3.9.0", "2.4.6", False),
                                                ("3.8.0", "2.4.6", False)])
def test_the_known_bad_numpy_is_named(triton, numpy, bad):
    hint = numpy_hint(triton, numpy)
    assert (hint is not None) == bad
    if bad:
        assert f"found numpy {numpy}: pip install 'numpy<2.4'" in hint


def test_a_failing_launch_under_the_bad_pair_names_the_fix(monkeypatch):
    from pyfuser.runtime import interpreter

    class Failing:
        def __getitem__(self, grid):
            def run(*args):
                raise TypeError("only 0-dimensional arrays can be converted to Python scalars")
            return run

    kernel = interpreter.InterpretedKernel(Failing())
    monkeypatch.setattr(interpreter, "numpy_hint", lambda: "pip install 'numpy<2.4'")
    with pytest.raises(ToolchainError, match=r"TypeError: only 0-dimensional(.|\n)*pip install 'numpy<2.4'"):
        kernel[(1,)](1)
    monkeypatch.setattr(interpreter, "numpy_hint", lambda: None)
    with pytest.raises(TypeError, match="only 0-dimensional"):  # any other pair: the error as it is
        kernel[(1,)](1)
