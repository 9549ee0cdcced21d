"""``Choices``: scoped scheduler choices that replace the global override dict; they
nest, end with their block (also on an error), stay in their thread, and are part of
every cache key."""
import threading

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import ChoicesError
from pyfuser.schedulers import Choices, current_choices

FL = DataType.Float


def row_sums():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=FL)
        fd.add_output(fd.ops.sum(t, [1]))
    return fd


def test_choices_nest_and_end_with_their_block():
    assert not current_choices()
    with Choices(block_j=16, persistent=False):
        with Choices(block_j=32, disable=("inner_outer",)):
            c = current_choices()
            assert c.fields == {"block_j": 32, "persistent": False} and c.disable == {"inner_outer"}
        assert current_choices() == Choices(block_j=16, persistent=False)
        with pytest.raises(RuntimeError):
            with Choices(num_warps=2):
                raise RuntimeError("boom")
        assert current_choices() == Choices(block_j=16, persistent=False)
    assert not current_choices() and current_choices().key == ()


def test_choices_stay_in_their_thread():
    seen = []
    with Choices(num_warps=2):
        t = threading.Thread(target=lambda: seen.append(current_choices()))
        t.start()
        t.join()
    assert seen == [Choices()]


@pytest.mark.parametrize("kw,what", [({"blok_j": 16}, "blok_j"), ({"disable": ("pointwize",)}, "pointwize"),
                                     ({"outer": [0]}, "hashable"),
                                     ({"edits": ((r"\.", ""),)}, "edits is not a field")])
def test_bad_choices_name_the_problem(kw, what):
    with pytest.raises(ChoicesError, match=what):
        Choices(**kw)


def test_two_choices_never_share_a_plan_or_kernel():
    fd, x = row_sums(), torch.randn(4, 64)
    want = x.sum(1)
    torch.testing.assert_close(fd.execute([x])[0], want)
    with Choices(persistent=False, block_j=16):
        torch.testing.assert_close(fd.execute([x])[0], want)
        multi = fd.explain([x]).segments[0].params
    with Choices(persistent=False, block_j=32):
        torch.testing.assert_close(fd.execute([x])[0], want)
    rt = fd._runtime
    assert len(rt.plans) == 3 and len({k.signature for k in rt.kernels}) == 3  # one signature per Choices
    assert multi.block_j == 16 and not multi.persistent
    assert fd.explain([x]).segments[0].params.persistent  # back to the heuristics


def test_disable_plans_without_the_scheduler():
    fd, x = row_sums(), torch.randn(4, 64)
    with Choices(disable=("inner_reduction",)):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            [seg] = fd.explain([x]).segments
    assert seg.scheduler is None and "inner_reduction" not in seg.codes
    assert fd.explain([x]).segments[0].scheduler == "inner_reduction"

