"""One start of the two gloo ranks for the directory: every module's scenarios run in it
(starting a rank costs more CPU than most scenarios)."""
import pytest

from . import harness


@pytest.fixture(scope="session")
def distributed_results():
    from . import test_ddp, test_fsdp

    return harness.spawn({**test_ddp.scenarios(), **test_fsdp.scenarios()})
