"""PYFUSER_DUMP: each option's output, on the CPU path (GPU-only options print a
clear note there; their real output is checked by the gpu-marked tests)."""
from __future__ import annotations

import re

import pytest
import torch

from pyfuser.runtime import dump, executor

from .conftest import bert_fd, bert_inputs, device, gelu_fd, gelu_inputs

TENSOR_LINE = re.compile(r"^tensor dtype: (\S+) sizes: \(((?:\d+, )*)\) stride: \(((?:\d+, )*)\) "
                         r"pointer: 0x[0-9a-f]+ device: (\S+)$")


def run(capsys, fd, inputs, **kw):
    outs = fd.execute(inputs, **kw)
    return outs, capsys.readouterr().out


def test_unknown_option_lists_the_valid_ones(dumps):
    dumps("kernel_code,kernel_tme")
    with pytest.raises(ValueError, match=r"unknown option\(s\) kernel_tme; valid options: python_definition"):
        gelu_fd().execute(gelu_inputs())


def test_nothing_enabled_prints_nothing_and_builds_no_probe(dumps, capsys, monkeypatch):
    dumps("")
    fd, inputs = gelu_fd(), gelu_inputs()
    fd.execute(inputs)

    def no_probe(*a, **k):
        raise AssertionError("the cached path built a Probe with no dump enabled")

    monkeypatch.setattr(executor, "Probe", no_probe)
    fd.execute(inputs)
    assert capsys.readouterr().out == ""


def test_python_definition_once_per_fusion(dumps, capsys):
    dumps("python_definition")
    fd, inputs = gelu_fd(), gelu_inputs()
    _, out = run(capsys, fd, inputs)
    assert out == f"# fusion{fd.id}\n{repr(fd)}"
    assert repr(fd).startswith("def nvfuser_fusion(fd : FusionDefinition) -> None :")
    _, again = run(capsys, fd, gelu_inputs(rows=5))
    assert again == ""


def test_fusion_args_in_the_reports_format(dumps, capsys):
    dumps("fusion_args")
    fd = gelu_fd()
    x, bias = gelu_inputs(rows=3, cols=24)
    outs, out = run(capsys, fd, [x, bias])
    lines = out.splitlines()
    assert lines[:2] == [f"Arguments for fusion{fd.id}:", "Inputs:"]
    assert lines[4] == "Outputs:" and len(lines) == 7
    tensors = [x, bias] + outs
    for line, t in zip(lines[2:4] + lines[5:7], tensors):
        m = TENSOR_LINE.match(line)
        assert m, line
        assert m.group(2) == "".join(f"{s}, " for s in t.shape)
        assert m.group(3) == "".join(f"{s}, " for s in t.stride())
        assert m.group(4) == str(t.device)
        assert f"pointer: {t.data_ptr():#x}" in line
    assert [TENSOR_LINE.match(line).group(1) for line in lines[2:4] + lines[5:7]] == \
        ["__half", "float", "__half", "bool"]


def test_fusion_args_line_matches_the_report_exactly():
    x = torch.empty_strided((768, 128, 128), (16384, 128, 1), dtype=torch.float16, device="meta")
    line = dump.tensor_line(x)
    assert line.startswith("tensor dtype: __half sizes: (768, 128, 128, ) stride: (16384, 128, 1, ) pointer: 0x")


def test_segmented_fusion_lists_ops_inputs_outputs(dumps, capsys):
    dumps("segmented_fusion")
    fd = bert_fd()
    _, out = run(capsys, fd, bert_inputs())
    assert out.startswith(f"Segmented fusion{fd.id}: 1 segment(s)\n  segment 0: inner_normalization\n")
    assert "    inputs: T0 __half[6, 16, 16], T1 float[2, 1, 1, 16]" in out
    assert "    outputs: T11 float[2, 1, 1, 16], T24 float[2, 3, 16, 16], T27 bool[2, 3, 16, 16], " \
           "T33 __half[2, 3, 16, 16]" in out
    assert "      T16 = max(T15, dims=[3], keepdim=False, dtype=DataType.Null)  # T16 float[2, 3, 16]" in out
    assert "ops (26):" in out
    _, again = run(capsys, fd, bert_inputs())
    assert again == ""  # printed when a plan is made


def test_segmented_fusion_shows_alias_outputs(dumps, capsys):
    from pyfuser import DataType, FusionDefinition

    dumps("segmented_fusion")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.reshape(x, [-1]))
        fd.add_output(fd.ops.neg(x))
    _, out = run(capsys, fd, [torch.randn(2, 3, device=device())])
    assert "  output 0 (T1): a view of an input, no kernel" in out
    assert "  segment 0: pointwise" in out and "      T2 = neg(T0)" in out


def test_segmented_fusion_shows_expanded_outputs(dumps, capsys):
    from pyfuser import DataType, FusionDefinition

    dumps("segmented_fusion")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        s = fd.ops.sum(x, dims=[1], keepdim=True)
        fd.add_output(fd.ops.broadcast_in_dim(s, shape=[2, 3], broadcast_dims=[0, 1]))
    (got,), out = run(capsys, fd, [torch.randn(2, 3, device=device())])
    assert got.stride() == (1, 0)
    assert "  output 0 (T2): an expand (stride 0) of a smaller value, no kernel" in out
    assert "  segment 0: inner_reduction" in out and "    outputs: T1 float[2, 1]" in out


def test_scheduler_params_names_the_choice_and_every_decline(dumps, capsys):
    dumps("scheduler_params")
    fd = bert_fd()
    _, out = run(capsys, fd, bert_inputs())
    lines = out.splitlines()
    assert lines[0] == f"Scheduler params for fusion{fd.id}:"
    assert lines[1] == "  segment 0 (outputs T11, T24, T27, T33): inner_normalization"
    assert re.match(r"    params: Inner(Persistent|Chunked)\(block_k=", lines[2]), lines[2]
    assert "    pointwise: declined: has_reduction: 2 reduction(s) in the segment" in lines
    assert any(line.startswith("    inner_reduction: declined: normalization: ") for line in lines)
    assert any(line.startswith("    outer_reduction: declined: inner_axes: ") for line in lines)


def test_scheduler_params_for_a_pointwise_fusion(dumps, capsys):
    dumps("scheduler_params")
    fd = gelu_fd()
    _, out = run(capsys, fd, gelu_inputs())
    assert re.search(r"  segment 0 \(outputs T\d+, T\d+\): pointwise\n    params: FlatParams\(block=", out), out
    assert "    inner_normalization: declined: no_reduction: the segment has no reduction" in out


def test_launch_params_every_launch(dumps, capsys):
    dumps("launch_params")
    fd, inputs = gelu_fd(), gelu_inputs(rows=4, cols=24)
    for _ in range(2):
        _, out = run(capsys, fd, inputs)
        (line,) = out.splitlines()
        assert line.startswith(f"Launch Parameters: kernel1 (pyfuser_f{fd.id}_k1, pointwise): grid = (")
        assert re.search(r"BLOCK\w* = \d+", line), line
        if device() == "cpu":
            assert "num_warps/num_stages do not apply" in line
        else:
            assert "num_warps = " in line and "num_stages = " in line


def test_kernel_code_is_the_generated_source(dumps, capsys):
    dumps("kernel_code")
    fd = gelu_fd()
    _, out = run(capsys, fd, gelu_inputs())
    assert out.startswith(f"===== kernel pyfuser_f{fd.id}_k1 (pointwise) =====\n")
    assert "@triton.jit" in out and f"def pyfuser_f{fd.id}_k1(" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU note")
def test_ptx_on_cpu_is_a_one_line_note(dumps, capsys):
    dumps("ptx")
    fd, inputs = gelu_fd(), gelu_inputs()
    _, out = run(capsys, fd, inputs)
    assert out == f"ptx: pyfuser_f{fd.id}_k1 runs on CPU under Triton's interpreter; PTX needs a CUDA device\n"
    _, again = run(capsys, fd, inputs)
    assert again == ""  # once per kernel


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU note")
def test_kernel_time_on_cpu_is_a_note_with_the_wall_time(dumps, capsys):
    dumps("kernel_time")
    fd = gelu_fd()
    _, out = run(capsys, fd, gelu_inputs())
    assert re.fullmatch(rf"kernel1 \(pyfuser_f{fd.id}_k1\): kernel_time needs a CUDA device; on CPU the kernel ran "
                        r"in Triton's interpreter \(wall time [\d.]+ ms, not a GPU time\)\n", out), out


@pytest.mark.gpu
def test_kernel_time_on_gpu_uses_the_reports_line(dumps, capsys):
    dumps("kernel_time")
    fd = bert_fd()
    _, out = run(capsys, fd, bert_inputs())
    assert re.fullmatch(r"kernel1 run in \d+\.\d{6} ms, achieved: \d+\.\d{3} GB/s  "
                        rf"\[pyfuser_f{fd.id}_k1: registers \d+, spills \d+\]\n", out), out


@pytest.mark.gpu
def test_ptx_on_gpu(dumps, capsys):
    dumps("ptx")
    fd = gelu_fd()
    _, out = run(capsys, fd, gelu_inputs())
    assert out.startswith(f"===== PTX of pyfuser_f{fd.id}_k1 (kernel1) =====\n")
    assert ".version" in out and ".entry" in out


def test_cache_hits_misses_and_reasons(dumps, capsys):
    dumps("cache")
    fd = gelu_fd()
    _, first = run(capsys, fd, gelu_inputs(rows=4, cols=24))
    assert first.startswith(f"cache fusion{fd.id}: miss: new input signature (first execute of this fusion)\n")
    assert f"  kernel1 pyfuser_f{fd.id}_k1 (pointwise): miss, compiled in " in first
    assert "first kernel for this segment" in first
    assert re.search(r"process totals: compiled \d+, hits \d+, misses \d+, launches \d+", first)

    _, hit = run(capsys, fd, gelu_inputs(rows=4, cols=24))
    assert hit.startswith(f"cache fusion{fd.id}: hit: launches already prepared for these inputs "
                          f"(pyfuser_f{fd.id}_k1)\n")

    _, resized = run(capsys, fd, gelu_inputs(rows=40, cols=24))  # new size: heuristics pick a new block
    assert resized.startswith(f"cache fusion{fd.id}: miss: new input sizes, strides or parameter overrides "
                               "(signature known")
    assert "new heuristics: params FlatParams(" in resized or "hit (same scheduler" in resized

    _, new_sig = run(capsys, fd, gelu_inputs(rows=1, cols=24))  # a size-1 dim: a new signature
    assert "differs from the last one in: " in new_sig and "size-1 dims (False, False) -> (True, False)" in new_sig


def test_cache_names_new_choices(dumps, capsys):
    """Scheduler choices are part of the signature: other choices are a new signature,
    and the story names them."""
    from pyfuser.schedulers import Choices

    dumps("cache")
    fd, inputs = gelu_fd(), gelu_inputs(rows=4, cols=24)
    with Choices(block=32):
        run(capsys, fd, inputs)
    with Choices(block=64):
        _, out = run(capsys, fd, inputs)
    assert f"kernel2 pyfuser_f{fd.id}_k2 (pointwise): miss, compiled in " in out
    assert "differs from the last one in: scheduler choices ((('block', 32),), (), True) -> ((('block', 64),), (), True)" \
        in out, out


def test_all_options_together_on_the_report_fusion(dumps, capsys):
    dumps(",".join(dump.VALID))
    fd = bert_fd()
    _, out = run(capsys, fd, bert_inputs())
    for marker in ("def nvfuser_fusion(", "===== kernel", "Segmented fusion", "Scheduler params", "Launch Parameters",
                   "Arguments for fusion", "cache fusion"):
        assert marker in out, marker


def test_the_cache_story_is_the_executes_own(dumps, capsys):
    """The story is told by the execute that opened it: a plan made by ``fd.explain``
    (which builds kernels) adds nothing to the next execute's story, and two threads
    executing one fusion each print their own."""
    import threading

    from pyfuser.runtime import story

    fd = gelu_fd()
    fd.explain(gelu_inputs(rows=4, cols=24))
    dumps("cache")
    _, first = run(capsys, fd, gelu_inputs(rows=4, cols=24))
    assert first.startswith(f"cache fusion{fd.id}: miss: ") and first.count("kernel1 ") == 1, first
    with story.telling() as outer:
        story.note("outer")
        seen = []

        def other():
            with story.telling() as mine:
                story.note("inner")
                seen.append(list(mine))

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert outer == ["outer"] and seen == [["inner"]]
    story.note("nobody is telling")  # dropped, no error
