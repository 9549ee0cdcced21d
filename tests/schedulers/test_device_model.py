"""The device model (``schedulers.device_model``): where it comes from (presets, the
device's properties once per index, the override, the environment), that plans keep
apart per model, and that the rules reading it follow it (on meta tensors: the CUDA
heuristics planned on the CPU)."""
from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.bench import seeds
from pyfuser.bench.cases import BY_NAME, select
from pyfuser.bench.offline import check_case, meta_inputs, plan_offline
from pyfuser.bench import training as T
from pyfuser.dynamo.rewrites.pad_matmuls import min_flops_per_byte
from pyfuser.errors import ChoicesError, SettingError
from pyfuser.ir.concretize import bind
from pyfuser.schedulers import INNER_NORMALIZATION, OUTER_REDUCTION, Segment, inner_outer
from pyfuser.schedulers import device_model as dm
from pyfuser.schedulers.device_model import PRESETS, DeviceModel, current_model, device_model, model_for

from ..codegen.common import need_ptxas

H = DataType.Half
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the model without a GPU")


def cuda_segment(build, shapes_dtypes, model):
    """The segment of every output of ``build`` as the CUDA heuristics see it for
    ``model``, from meta tensors."""
    with FusionDefinition() as fd:
        build(fd)
    b = bind(fd.ir, [torch.empty(s, dtype=d, device="meta") for s, d in shapes_dtypes])
    return Segment(list(fd.ir.outputs), b.shapes, {v: {"contiguous": True} for v in fd.ir.inputs}, "cuda",
                   model=model)


def column_sum(fd):
    x = T.tensor(fd, 2, H)
    fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[0]), H))


def layer_norm_backward(R, N, model):
    return cuda_segment(lambda fd: T.build_layer_norm_backward(fd, (R, N, H)),
                        [((R, N), torch.float16)] * 2 + [((N,), torch.float16)] + [((R,), torch.float32)] * 2, model)


# -- where the model comes from --------------------------------------------------------------
@no_gpu
def test_without_a_gpu_the_model_is_the_h200_preset():
    assert DeviceModel.of() is PRESETS["h200"]
    assert model_for(torch.device("cuda", 0)) is PRESETS["h200"]  # an offline plan (bench.offline)
    assert model_for(torch.device("cpu")) is PRESETS["h200"]
    assert Segment([], {}, {}, "cpu").model is PRESETS["h200"]
    assert "sms=132" in repr(current_model()) and "l2_bytes=62914560" in repr(current_model())


def _fake_cuda(monkeypatch, props):
    queries = []

    def get_device_properties(index):
        queries.append(index)
        return props

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", get_device_properties)
    monkeypatch.setattr(dm, "_BY_INDEX", {})
    return queries


def test_the_devices_properties_are_read_once_per_index(monkeypatch):
    """What torch reports is taken; what it does not (shared memory, warps on an old
    torch; bandwidth and GEMM rate always) comes from the preset of the architecture."""
    props = types.SimpleNamespace(name="NVIDIA GeForce RTX 4090", major=8, minor=9, multi_processor_count=128,
                                  L2_cache_size=72 * 2**20)
    queries = _fake_cuda(monkeypatch, props)
    m = DeviceModel.of(torch.device("cuda", 0))
    assert DeviceModel.of(0) is m and DeviceModel.of() is m and model_for(torch.device("cuda", 0)) is m
    assert queries == [0]  # a cached execute's plan lookups never query the driver again
    sm89 = PRESETS["sm89"]
    assert (m.name, m.arch, m.sms, m.l2_bytes) == ("NVIDIA GeForce RTX 4090", 89, 128, 72 * 2**20)
    assert (m.shared_bytes_per_sm, m.max_warps_per_sm, m.bandwidth) == (sm89.shared_bytes_per_sm, 48, sm89.bandwidth)


def test_reported_properties_win_and_a_newer_arch_takes_the_newest_preset(monkeypatch):
    props = types.SimpleNamespace(name="future", major=12, minor=0, multi_processor_count=170, L2_cache_size=2**27,
                                  shared_memory_per_multiprocessor=100 * 1024, shared_memory_per_block_optin=99 * 1024,
                                  max_threads_per_multi_processor=1536, regs_per_multiprocessor=65536)
    _fake_cuda(monkeypatch, props)
    m = DeviceModel.of(3)
    assert (m.arch, m.sms, m.shared_bytes_per_sm, m.shared_bytes_per_block, m.max_warps_per_sm) == \
        (120, 170, 100 * 1024, 99 * 1024, 48)
    assert m.bandwidth == PRESETS["h200"].bandwidth  # sm_90's numbers, the newest preset's


def test_a_block_overrides_the_model_and_nests():
    base = current_model()
    with device_model("a100") as m:
        assert m is PRESETS["a100"] and current_model() is m and model_for(torch.device("cuda", 0)) is m
        with device_model(PRESETS["sm89"]):
            assert current_model().name == "sm89"
        assert current_model() is m
    assert current_model() is base


def test_a_bad_model_names_the_presets():
    with pytest.raises(ChoicesError, match=r"no preset 'b200'; presets: h200, h100, a100, sm89"):
        device_model("b200")
    with pytest.raises(ChoicesError, match="expected a preset's name or a DeviceModel, got 90"):
        device_model(90)


def test_the_environment_names_a_preset(monkeypatch):
    monkeypatch.setenv("PYFUSER_DEVICE_MODEL", "sm89")
    assert current_model() is PRESETS["sm89"]
    with device_model("a100"):
        assert current_model() is PRESETS["a100"]  # the block wins
    monkeypatch.setenv("PYFUSER_DEVICE_MODEL", "b200")
    with pytest.raises(SettingError, match="PYFUSER_DEVICE_MODEL: unknown value 'b200'"):
        current_model()


def test_plans_keep_apart_per_model():
    """The same fusion and inputs under two models: two signatures, two plans, two
    prepared programs, and both right."""
    with FusionDefinition() as fd:
        seeds.build_log_softmax_sub(fd, 6, 40)
    x = torch.randn(6, 40, dtype=torch.float16)
    want = fd.reference([x])
    for name in ("h200", "sm89", "h200"):
        with device_model(name):
            torch.testing.assert_close(fd.execute([x])[0], want[0])
    rt = fd._runtime
    assert len(rt.plans) == 2 and len(rt.programs) == 2
    sigs = list(rt.plans)
    assert [p for p, label in zip(sigs[0].parts, sigs[0].labels) if label == "device model"] == [PRESETS["h200"]]
    assert "device model" in rt.explain_signature(sigs[0])  # against the last plan, sm89's


# -- the rules follow the model --------------------------------------------------------------
def test_the_split_target_scales_with_the_sms():
    """256 strips of column sums: split 16 ways on 132 SMs (4096 programs), 8 on 108."""
    grids = {}
    for name in ("h200", "a100"):
        seg = cuda_segment(column_sum, [((65536, 16384), torch.float16)], PRESETS[name])
        grids[name] = OUTER_REDUCTION.grid(seg, OUTER_REDUCTION.heuristics(seg))
    assert grids == {"h200": (256, 16), "a100": (256, 8)}


def test_pipelined_chunks_fit_the_shared_memory_of_each_model():
    """The bias gradient's 4 KB chunk is pipelined where a 32nd of an SM's shared
    memory holds it (228 KiB), not on sm_89's 100 KiB; the inner-outer row loop keeps
    two [2, 8192] fp16 blocks of dy and x (128 KiB) on sm_90, one on sm_89 (99 KiB a
    program)."""
    for name, outer_stages, rows_stages in (("h200", 3, 3), ("a100", 3, 3), ("sm89", 1, 2)):
        m = PRESETS[name]
        seg = cuda_segment(column_sum, [((16384, 4096), torch.float16)], m)
        assert OUTER_REDUCTION.heuristics(seg).stages == outer_stages, name
        p = inner_outer.heuristics(layer_norm_backward(4096, 8192, m))
        assert p.stages == rows_stages, name
        assert (p.stages - 1) * p.block_k * p.block_j * 4 <= m.shared_bytes_per_block


def test_wide_rows_walk_back_when_the_rows_in_flight_fill_l2():
    """Log-softmax over 50257 fp16 words: 4 rows of 16 warps on each of 132 SMs fill
    more than 3/4 of 60 MiB, so the output pass walks back; 3 rows (48 warps) on 128
    SMs fit 3/4 of sm89's 72 MiB, and 3 on 132 SMs fit 3/4 of 60 MiB."""
    shapes = [((4096, 50257), torch.float16)]
    models = {**PRESETS, "h200_48_warps": dataclasses.replace(PRESETS["h200"], max_warps_per_sm=48)}
    got = {name: INNER_NORMALIZATION.heuristics(cuda_segment(lambda fd: seeds.build_log_softmax_sub(fd, 4096, 50257),
                                                            shapes, models[name])).out_reversed
           for name in ("h200", "sm89", "h200_48_warps")}
    assert got == {"h200": True, "sm89": False, "h200_48_warps": False}


def test_inner_outer_programs_follow_the_warps_and_registers():
    """4 programs of 4 warps per SM on 64 warps, 3 on 48; the one-wave register budget
    grows as the programs per SM fall."""
    got = {}
    for name in ("h200", "sm89"):
        seg = layer_norm_backward(16384, 1024, PRESETS[name])
        p = inner_outer.heuristics(seg)
        got[name] = (p.nprog, inner_outer.max_registers(seg, p))
    assert got == {"h200": (528, 128), "sm89": (384, 170)}


def test_matmul_padding_threshold_follows_gemm_rate_over_bandwidth():
    assert min_flops_per_byte(PRESETS["h200"]) == 300
    assert min_flops_per_byte(PRESETS["h100"]) > 300 > min_flops_per_byte(PRESETS["a100"])


# -- a dry run per model: plan and generate as the GPU would, on the CPU ---------------------
@pytest.mark.parametrize("name", list(PRESETS))
def test_every_seed_fusion_plans_and_generates_for_each_model(name):
    """The bench's seed fusions at full size, planned on meta inputs as the CUDA runtime
    would plan them for ``name``: every kernel step passes its run-time check and is
    generated (``scripts/device_models.py`` prints the params chosen)."""
    for case in select("seed"):
        sizes = case.sizes(1.0)
        with device_model(name):
            rt, b, plan = plan_offline(case.define(sizes), meta_inputs(case, sizes))
        kernel_steps = [s for s in plan.steps if s.scheduler is not None]
        assert kernel_steps and len(rt.kernels) >= len(kernel_steps), case.name
        assert all(k.signature.parts[1] is PRESETS[name] for k in rt.kernels), case.name


@pytest.mark.parametrize("name", list(PRESETS))
def test_the_bias_gradient_compiles_for_each_models_arch_without_spills(name):
    """Compiled by Triton's ptxas for the model's sm_<arch>: the heuristics' params are
    kept (no spill, within budget)."""
    need_ptxas()
    m = PRESETS[name]
    with device_model(m):
        (row,) = check_case(BY_NAME["bias_grad_sum_dim0_fp16"], arch=m.arch, log=lambda *a: None)
    (params, usage), *_ = row["tried"]
    assert row["chosen"] == params and usage.spills == 0


@pytest.mark.gpu
def test_the_gpus_own_model_agrees_with_its_preset():
    """On an H100 SXM or H200: what torch reports is the preset's (SMs, L2, registers,
    shared memory, warps), so the presets' numbers are the ones plans use there."""
    m = DeviceModel.of()
    kind = next((k for k in ("h200", "h100") if k in m.name.lower()), None)
    if kind is None or "pcie" in m.name.lower():  # the presets are the SXM boards
        pytest.skip(f"no preset for {m.name}")
    fields = ("arch", "sms", "l2_bytes", "registers_per_sm", "shared_bytes_per_sm", "shared_bytes_per_block",
              "max_warps_per_sm")
    assert {f: getattr(m, f) for f in fields} == {f: getattr(PRESETS[kind], f) for f in fields}
