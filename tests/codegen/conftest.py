"""Settings for the code-generator tests: outputs are poisoned (NaN for floats, the
dtype's max for ints, True for bools) before every launch, so an element that a
kernel forgets to write cannot pass; the cache counters start at 0 in every test."""
import pytest

from pyfuser.runtime import cache, executor


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    monkeypatch.setattr(executor, "POISON_OUTPUTS", True)
    cache.reset_counters()
    yield
