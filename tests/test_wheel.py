"""The package as a user installs it: a wheel built from the tree, installed (not
editable) into a fresh virtual environment, runs the README's Python examples exactly as
they are written there, and ``python -m pyfuser`` reports the installed copy.

The wheel is built without build isolation (no download: the setuptools of the
environment running the tests) from a copy of the files it needs, so the source tree
gets no ``build/`` folder.  The fresh venv sees torch, Triton and numpy through a path
file naming the test environment's site-packages as a plain path (so that
environment's own editable pyfuser, itself a path file there, is not read).
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def readme_examples() -> list:
    return FENCE.findall((ROOT / "README.md").read_text())


def _run(args, **kw):
    out = subprocess.run(args, capture_output=True, text=True, timeout=240, **kw)
    assert out.returncode == 0, f"{' '.join(map(str, args))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("wheel")
    tree = tmp / "tree"
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "docs", tree / "docs")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run(pip + ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"), str(tree)])
    wheel, = (tmp / "dist").glob("pyfuser-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = pathlib.Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    deps = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "torch"))]
    (site / "test_environment.pth").write_text("\n".join(deps) + "\n")
    _run(pip + ["--python", str(python), "install", "--no-deps", "--no-index", str(wheel)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYFUSER_", "PYTHON", "TORCH_LOGS"))}
    env.update(PYFUSER_CACHE_DIR=str(tmp / "cache"), CUDA_VISIBLE_DEVICES="")
    work = tmp / "work"
    work.mkdir()
    return python, site, env, work


def test_the_readme_has_runnable_examples():
    blocks = readme_examples()
    assert len(blocks) >= 2
    assert any('backend="pyfuser"' in b for b in blocks) and any("FusionDefinition()" in b for b in blocks)


def test_the_readme_examples_run_from_the_installed_wheel(installed):
    python, site, env, work = installed
    check = "import pyfuser, sys; print(pyfuser.__file__)"
    where = _run([python, "-c", check], env=env, cwd=work).stdout.strip()
    assert where.startswith(str(site)), f"pyfuser imported from {where}, not the wheel's install"
    for i, code in enumerate(readme_examples()):
        script = work / f"readme_{i}.py"
        script.write_text(code)
        out = _run([python, str(script)], env=env, cwd=work)
        assert "InterpreterWarning" in out.stderr  # on CPU tensors, said once
        assert not (work / "docs").exists() and not (work / "build").exists()


def test_python_m_pyfuser_reports_the_installed_copy(installed):
    python, site, env, work = installed
    text = _run([python, "-m", "pyfuser"], env=env, cwd=work).stdout
    assert re.search(r"^pyfuser \d+\.\d+\.\d+ \(" + re.escape(str(site)), text, re.M)
    assert "PYFUSER_CUDA_GRAPHS" in text and f"kernel cache: {env['PYFUSER_CACHE_DIR']}" in text
    docs = re.search(r"^docs: (.*)$", text, re.M).group(1)
    assert docs.startswith(str(python.parent.parent)) and os.path.isfile(os.path.join(docs, "SEMANTICS.md"))
    meta = next(site.glob("pyfuser-*.dist-info"))
    assert (meta / "licenses" / "LICENSE").exists() or (meta / "LICENSE").exists()
    assert "pyfuser = pyfuser.dynamo:pyfuser_backend" in (meta / "entry_points.txt").read_text()
