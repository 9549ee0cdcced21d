"""CI slice of the random fusion generator (scripts/fuzz.py runs thousands)."""
from hypothesis import HealthCheck, given, settings

from .fuzz_fusions import check, fusions


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fusions())
def test_random_fusions_match_reference(recipe):
    check(recipe)
