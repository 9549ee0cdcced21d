"""Runtime tests: dumps, profiler, repro scripts, validate.  CPU tensors through
Triton's interpreter, small shapes; GPU-only checks carry the ``gpu`` marker."""
import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.bench.seeds import SEEDS, build_bert_softmax_dropout

BERT_SIZES = (2, 3, 16)  # B, H, S


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def gelu_fd() -> FusionDefinition:
    """A small pointwise fusion: fp16 input plus an fp32 bias broadcast over rows; an
    fp16 and a bool output."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        t = fd.ops.add(fd.ops.cast(x, dtype=DataType.Float), fd.ops.broadcast_in_dim(b, shape=[-1, -1],
                                                                                     broadcast_dims=[1]))
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.exp(t), fd.define_scalar(0.5)), dtype=DataType.Half))
        fd.add_output(fd.ops.gt(t, fd.define_scalar(0.0)))
    return fd


def gelu_inputs(rows=4, cols=24):
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    return [torch.randn(rows, cols, generator=g).to(device(), torch.float16),
            torch.randn(cols, generator=g).to(device())]


def bert_fd() -> FusionDefinition:
    with FusionDefinition() as fd:
        build_bert_softmax_dropout(fd, *BERT_SIZES)
    return fd


def bert_inputs():
    return SEEDS["bert_softmax_dropout"].make_inputs(BERT_SIZES, device(), torch.Generator().manual_seed(0))


@pytest.fixture
def dumps(monkeypatch):
    """``dumps("a,b")`` sets PYFUSER_DUMP for the test."""
    def set_(names: str):
        monkeypatch.setenv("PYFUSER_DUMP", names)
    monkeypatch.delenv("PYFUSER_PROF", raising=False)
    return set_
