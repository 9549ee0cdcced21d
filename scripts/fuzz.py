"""Run the random fusion generator at length: python scripts/fuzz.py [N] [seed].
Prints the number of fusions run and each failure's recipe (hypothesis shrinks it)."""
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.segment.fuzz_fusions import check, fusions  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else 0
count = 0
failing = None


@seed(SEED)
@settings(max_examples=N, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fusions())
def fuzz(recipe):
    global count, failing
    count += 1
    try:
        check(recipe)
    except Exception:
        failing = recipe  # hypothesis shrinks: the last failing recipe is the smallest
        raise


if __name__ == "__main__":
    try:
        fuzz()
        print(f"fuzz: {count} fusions run, no failure")
    except Exception as err:  # hypothesis has shrunk it: report the minimal recipe
        print(f"fuzz: {count} fusions run, failure: {type(err).__name__}: {err}")
        print(f"smallest failing recipe: {failing!r}")
        sys.exit(1)
