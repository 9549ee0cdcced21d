"""A line budget for the package's modules: a module past ``BUDGET`` lines is usually two
things, so it is split by job before it grows further.

``OVER`` lists the modules over budget today with their size as a ceiling: a module
that grows past its ceiling fails, and so does one listed but back within the budget
(drop it from the list), so the list only shrinks.
"""
from __future__ import annotations

import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "pyfuser"
BUDGET = 500

# module (relative to src/pyfuser) -> its line count, the most it may have
OVER = {
}


def _sizes() -> dict:
    return {p.relative_to(SRC).as_posix(): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}


def test_modules_stay_within_the_line_budget():
    over = {m: n for m, n in _sizes().items() if n > BUDGET and n > OVER.get(m, BUDGET)}
    assert not over, f"modules over {BUDGET} lines or past their listed ceiling (split them): {over}"


def test_the_over_budget_list_only_shrinks():
    sizes = _sizes()
    stale = {m: sizes.get(m) for m in OVER if sizes.get(m, 0) <= BUDGET}
    assert not stale, f"modules listed in OVER that are within {BUDGET} lines now (drop them): {stale}"
