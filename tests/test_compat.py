"""The private torch and Triton APIs behind ``pyfuser.compat`` exist on the installed
versions, and a missing one is named in a ToolchainError."""
import torch
from triton import knobs

from pyfuser import ToolchainError
from pyfuser.compat import CHECKED, current_cuda_device, fast_empty_strided, hook_set, missing, torch_ptxas_path


def test_the_fast_allocator_makes_the_strided_tensor_asked_for():
    empty = fast_empty_strided("cpu")
    assert empty is not None, "torch._C._dynamo.guards._empty_strided_cpu is gone: the allocator falls back"
    t = empty((3, 4), (1, 3), torch.float16)
    assert (t.shape, t.stride(), t.dtype, t.device.type) == ((3, 4), (1, 3), torch.float16, "cpu")


def test_accessors_without_cuda_are_callable():
    assert callable(current_cuda_device)
    assert torch_ptxas_path().endswith("ptxas")


def test_a_missing_private_api_names_itself_and_the_checked_versions():
    err = missing("torch._C._example", "an example")
    assert isinstance(err, ToolchainError) and isinstance(err, RuntimeError)
    text = str(err)
    assert "torch._C._example" in text and "an example" in text
    assert CHECKED["triton"] in text and CHECKED["torch"] in text and torch.__version__ in text


def test_launch_hooks_are_seen_only_when_installed():
    """The direct launcher yields to Triton's runner while a launch hook is installed
    (a profiler's).  Triton keeps each hook as a chain that is never None."""
    chain = knobs.runtime.launch_enter_hook
    assert not hook_set(chain) and not hook_set(None)

    def hook(*args):
        pass

    chain.add(hook)
    try:
        assert hook_set(chain)
    finally:
        chain.remove(hook)
    assert not hook_set(chain)
