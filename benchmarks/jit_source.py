"""Triton kernels written as text in a probe script, imported as a module:
``@triton.jit`` reads a function's source from its file, so the text is written to a
temporary file first."""
import importlib.util
import os
import tempfile


def module_from_source(name: str, text: str):
    path = os.path.join(tempfile.mkdtemp(), f"{name}.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
