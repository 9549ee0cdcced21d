"""The private torch and Triton APIs behind ``pyfuser.compat`` exist on the installed
versions, and a missing one is named in a ToolchainError."""
import torch
from triton import knobs

from pyfuser import ToolchainError
from pyfuser import compat
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


def test_interpreter_accessors_reach_the_interpreter_classes():
    import numpy as np
    import triton.language as tl

    from pyfuser.compat import (argument_conversion, interpreted_function_base, interpreter_module,
                                set_argument_conversion, tensor_handle)

    interp = interpreter_module()
    assert interpreted_function_base() is interp.InterpretedFunction
    h = tensor_handle(np.array([1.5], dtype=np.float32), tl.float32)
    assert isinstance(h, interp.TensorHandle) and h.data[0] == 1.5
    convert = argument_conversion()
    set_argument_conversion(convert)
    assert argument_conversion() is convert


def test_compiled_kernel_accessors_without_a_gpu():
    from pyfuser.compat import compiled_kernels, load_handles

    class NoHandles:
        pass

    load_handles(NoHandles())  # nothing to load: no error
    assert compiled_kernels(NoHandles(), 0) == []


def test_offline_compile_and_ptxas_command():
    """A kernel compiled for sm_90 without a GPU, and the ptxas command that would
    report its registers (run only where the ptxas it names exists)."""
    import os

    import triton

    from pyfuser.compat import compile_offline, ptxas_command

    @triton.jit
    def copy(x_ptr, out_ptr, n, BLOCK: triton.language.constexpr):
        offs = triton.language.arange(0, BLOCK)
        triton.language.store(out_ptr + offs, triton.language.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.empty(64, device="meta")
    ck = compile_offline(copy, (x, x, 64), {"BLOCK": 64, "num_warps": 1}, 90)
    assert "ptx" in ck.asm
    cmd = ptxas_command(ck, "k.ptx", "k.cubin")
    assert "-v" in cmd and any(c.startswith("--gpu-name=sm_90") for c in cmd)
    assert cmd[-3:] == ["k.ptx", "-o", "k.cubin"] and os.path.basename(cmd[0]).startswith("ptxas")


def test_dynamo_and_aot_autograd_accessors():
    from pyfuser import compat

    assert not compat.dynamo_backend_taken("pyfuser_compat_test")
    compat.register_dynamo_backend("pyfuser_compat_test", lambda gm, args: gm)
    assert compat.dynamo_backend_taken("pyfuser_compat_test")
    assert callable(compat.aot_autograd(fw_compiler=lambda gm, args: gm))
    assert hasattr(compat.functorch_config(), "cse")
    assert callable(compat.min_cut_partition)
    aten = torch.ops.aten
    assert aten.gelu.default in compat.get_decompositions([aten.gelu])
    assert isinstance(aten.add.Tensor, compat.OpOverload)
    assert compat.qualified_name(aten.view.default) == "torch.ops.aten.view.default"
    with compat.unset_fake_temporarily():
        assert compat.detect_fake_mode([torch.ones(1)]) is None


def test_fx_accessors():
    from pyfuser import compat

    gm = torch.fx.symbolic_trace(lambda x: (x + 1) * (x + 1))
    cse = compat.fx_graph_cse(gm.graph)
    assert sum(n.op == "call_function" for n in cse.nodes) == 2
    graph = torch.fx.Graph()
    compat.share_codegen(graph, gm.graph)
    assert graph._codegen is gm.graph._codegen

    def fn(args):
        return args

    compat.mark_boxed(fn)
    assert fn._boxed_call is True
    m = torch.nn.Linear(2, 2)
    assert not compat.module_call_hooked(m)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert compat.module_call_hooked(m)
    finally:
        handle.remove()
    handle = m.register_forward_pre_hook(lambda *a: None)
    try:
        assert compat.module_call_hooked(m)
    finally:
        handle.remove()
    assert not compat.module_call_hooked(m)
    assert [a.name for a in compat.op_schema(torch.ops.aten.add.Tensor).arguments] == ["self", "other", "alpha"]
    assert compat.op_schema(len) is None


def test_storage_accessors():
    from pyfuser import compat

    x = torch.arange(12.0)
    v = compat.reinterpret_tensor(x, (3, 2), (4, 1), 2)
    assert v.tolist() == [[2.0, 3.0], [6.0, 7.0], [10.0, 11.0]]
    assert compat.storage_id(v) == compat.storage_id(x) != compat.storage_id(torch.ones(1))
    assert compat.storage_use_count(compat.storage_id(x)) >= 1
    a, b = [torch.zeros(2), torch.zeros(3)], [torch.ones(2), torch.full((3,), 2.0)]
    compat.foreach_copy_(a, b)
    assert a[0].tolist() == [1.0, 1.0] and a[1].tolist() == [2.0, 2.0, 2.0]


def test_overlap_grouped_mm_and_packet_accessors():
    x = torch.randn(3)
    assert compat.has_internal_overlap(x.expand(4, 3)) and not compat.has_internal_overlap(x)
    assert isinstance(torch.ops.aten.add, compat.OpOverloadPacket)
    assert not isinstance(torch.ops.aten.add.Tensor, compat.OpOverloadPacket)
    if torch.cuda.is_available():
        a, b = torch.randn(6, 4, device="cuda", dtype=torch.bfloat16), torch.randn(2, 4, 5, device="cuda",
                                                                                    dtype=torch.bfloat16)
        out = compat.grouped_mm(a, b, torch.tensor([2, 6], device="cuda", dtype=torch.int32))
        assert out.shape == (6, 5)


def test_sym_floor_div_is_the_class_of_size_floor_division():
    import sympy

    s = sympy.Symbol("s0", integer=True, positive=True)
    assert isinstance(compat.sym_floor_div()(s, 2), compat.sym_floor_div())
