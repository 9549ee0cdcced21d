"""``PYFUSER_DUMP=name,name``: debug output, nvFuser style.

The variable is read on every check (tests and users flip it at run time); an
unknown name is an error listing the valid ones, so a typo never silently dumps
nothing.
"""
from __future__ import annotations

import os
import sys

VALID = ("python_definition", "fusion_args", "scheduler_params", "segmented_fusion", "launch_params",
         "kernel_code", "ptx", "kernel_time", "cache")

_parsed: dict[str, frozenset] = {}


def enabled_dumps() -> frozenset:
    raw = os.environ.get("PYFUSER_DUMP", "")
    if raw not in _parsed:
        names = frozenset(n.strip() for n in raw.split(",") if n.strip())
        bad = sorted(names - set(VALID))
        if bad:
            raise ValueError(f"PYFUSER_DUMP: unknown option(s) {', '.join(bad)}; valid options: {', '.join(VALID)}")
        _parsed[raw] = names
    return _parsed[raw]


def dumping(name: str) -> bool:
    assert name in VALID, name
    return name in enabled_dumps()


def emit(text: str):
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
