"""The package's imports point one way, reach no other module's private names and form
no cycles.

``LAYERS`` is the order, lowest first: a module imports only from its own layer or the
layers before it.  It follows ``src/pyfuser/README.md`` (the processing order), with
``rng`` and ``reference`` before ``frontend`` (the definition runs the reference
executor) and ``pyfuser`` (the package's ``__init__``: the public names) between
``runtime`` and the tools that import it.  Every import counts, those inside functions
too: a lazy import still ties the two modules together.

Each check has an allowlist of the violations the code has today, one reason each.  A
new violation fails, and so does an entry that no longer occurs, so the lists only
shrink.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "pyfuser"

LAYERS = ("_version", "nvfuser_direct_version", "errors", "compat_offline", "compat", "settings", "ir", "rng", "reference", "frontend",
          "codegen", "schedulers", "segment", "runtime", "pyfuser", "dynamo", "bench", "demo", "__main__")

# (importer, imported): an import from a later layer
UPWARD = {
    ("pyfuser.frontend.definition", "pyfuser.runtime.executor"): "fd.execute and fd.explain are the user API's entry into the runtime",
    ("pyfuser.frontend.definition", "pyfuser.runtime.profiler"): "fd.profile() raises the profiler's NoProfileError",
    ("pyfuser.frontend.definition", "pyfuser.runtime.repro"): "fd.repro_script() enters the repro tool",
    ("pyfuser.frontend.definition", "pyfuser.runtime.validate"): "fd.validate() enters validation",
}

# (importer, module, name): a private name imported from another module
PRIVATE: dict = {}

# sets of modules that import each other (strongly connected components)
CYCLES: dict = {}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph():
    """(modules, module -> set of imported modules, [(importer, module, private name)])."""
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    edges = {m: set() for m in modules}
    private = []
    for m, path in modules.items():
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges[m].update(a.name for a in node.names if a.name.split(".")[0] == "pyfuser")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "pyfuser":
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in modules:  # ``from . import dump``: the module itself
                        edges[m].add(sub)
                    else:
                        edges[m].add(target)
                        if a.name.startswith("_") and not a.name.endswith("__") and target != m:  # dunders are public
                            private.append((m, target, a.name))
    return modules, edges, private


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1] if len(parts) > 1 else "pyfuser")


def _cycles(edges) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _check(found, allowed, what):
    new = sorted(set(found) - set(allowed), key=str)
    stale = sorted(set(allowed) - set(found), key=str)
    assert not new, f"new {what} (fix them, or list them with a reason): {new}"
    assert not stale, f"{what} listed that no longer occur (drop them from the list): {stale}"


def test_every_package_has_a_layer():
    modules, _, _ = _graph()
    unknown = sorted({m.split(".")[1] for m in modules if "." in m} - set(LAYERS))
    assert not unknown, f"packages missing from LAYERS: {unknown}"


def test_imports_point_down_the_layers():
    _, edges, _ = _graph()
    upward = [(m, t) for m, targets in edges.items() for t in targets if _layer(t) > _layer(m)]
    _check(upward, UPWARD, "imports from a later layer")


def test_no_module_imports_another_modules_private_names():
    _, _, private = _graph()
    _check(private, PRIVATE, "imports of private names")


def test_no_import_cycles():
    _, edges, _ = _graph()
    _check(_cycles(edges), CYCLES, "import cycles")


@pytest.mark.parametrize("allowlist", [UPWARD, PRIVATE, CYCLES], ids=["upward", "private", "cycles"])
def test_every_allowed_violation_says_why(allowlist):
    assert all(isinstance(why, str) and why for why in allowlist.values())
