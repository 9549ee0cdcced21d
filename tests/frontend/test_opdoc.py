"""docs/OPS.md is what the op table gives (``make ops-doc`` writes it), and it names every
``fd.ops`` builder and every nvFuser op, supported or not."""
from __future__ import annotations

import pathlib

from pyfuser.frontend import opdoc
from pyfuser.frontend.ops import Operators
from pyfuser.ir.ops import OPS

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "OPS.md"


def test_ops_doc_is_current():
    assert DOC.read_text(encoding="utf-8") == opdoc.render(), "docs/OPS.md is stale: run make ops-doc"


def test_every_op_and_every_nvfuser_op_has_a_line():
    text = opdoc.render()
    builders = {n for n in dir(Operators) if not n.startswith("_") and callable(getattr(Operators, n))}
    for name in set(OPS) | builders | opdoc.LEGACY | opdoc.DIRECT:
        assert f"| `{name}` |" in text, name


def test_every_unsupported_nvfuser_op_says_why():
    defined = set(OPS) | {n for n in dir(Operators) if not n.startswith("_")}
    missing = (opdoc.LEGACY | opdoc.DIRECT) - defined
    assert missing <= set(opdoc.NOT_SUPPORTED), missing - set(opdoc.NOT_SUPPORTED)


def test_check_mode(tmp_path):
    stale = tmp_path / "OPS.md"
    stale.write_text("old\n")
    assert opdoc.main([str(stale), "--check"]) == 1
    assert opdoc.main([str(stale)]) == 0 and opdoc.main([str(stale), "--check"]) == 0
