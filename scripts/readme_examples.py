"""Run the README's Python examples as written, each in a fresh process, on this
machine's device (CUDA when there is one: the FusionDefinition example then runs at the
report's sizes).  From the repository root: ``PYTHONPATH=src python scripts/readme_examples.py``.
tests/test_wheel.py runs the same blocks on CPU from an installed wheel."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tempfile
import time

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def main() -> int:
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, code in enumerate(blocks):
            path = pathlib.Path(tmp) / f"readme_{i}.py"
            path.write_text(code)
            start = time.perf_counter()
            out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
            took = time.perf_counter() - start
            status = "ok" if out.returncode == 0 else f"FAILED (exit {out.returncode})"
            print(f"README example {i + 1} of {len(blocks)}: {status} in {took:.1f} s")
            if out.returncode:
                failed += 1
                print(out.stdout[-2000:], out.stderr[-4000:], sep="\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
