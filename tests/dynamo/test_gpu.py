"""The backend on a CUDA device (compiled kernels): run on the GPU machine with
``PYTHONPATH=src python -m pytest -q tests/dynamo -m gpu``."""
import copy

import pytest
import torch

import pyfuser
import pyfuser.dynamo as pd

pytestmark = pytest.mark.gpu


def test_tiny_bert_fp16_autocast_on_cuda():
    transformers = pytest.importorskip("transformers")
    from tests.dynamo.test_models import TINY_BERT, assert_grads_close

    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY_BERT)
    reference = transformers.BertForMaskedLM._from_config(config, attn_implementation="eager").cuda().train()
    model = copy.deepcopy(reference)
    ids = torch.randint(0, 500, (4, 32), device="cuda")
    labels = torch.randint(0, 500, (4, 32), device="cuda")
    launches = pyfuser.cache_info()["launches"]
    compiled = torch.compile(model, backend="pyfuser")
    with torch.autocast("cuda", dtype=torch.float16):
        out = compiled(input_ids=ids, labels=labels)
        want = reference(input_ids=ids, labels=labels)
    out.loss.backward()
    want.loss.backward()
    torch.testing.assert_close(out.loss, want.loss, rtol=5e-3, atol=5e-3)
    assert_grads_close(model, reference, rtol=2e-2)
    assert pd.stats().get("fallbacks", 0) == 0 and pyfuser.cache_info()["launches"] > launches


def test_cpu_scalar_inputs_move_to_the_region_device():
    def fn(x, s):
        return (x * s + 1).exp() * s

    x = torch.randn(8, 16, device="cuda")
    s = torch.tensor(0.5)  # a CPU scalar, as ATen allows next to CUDA tensors
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="pyfuser")(x, s), fn(x, s))
    assert pd.stats()["regions"] == 1 and pd.stats().get("fallbacks", 0) == 0


def test_dropout_on_cuda_reuses_the_forward_mask():
    torch.manual_seed(1)
    lin = torch.nn.Linear(64, 64).cuda()

    def fn(x):
        return torch.nn.functional.dropout(torch.relu(lin(x)), 0.3, True)

    x = torch.randn(32, 64, device="cuda")
    y = torch.compile(fn, backend="pyfuser")(x)
    mask = y != 0
    y.sum().backward()
    g = lin.weight.grad.clone()
    lin.weight.grad = None
    (torch.relu(lin(x)) * mask / 0.7).sum().backward()
    torch.testing.assert_close(g, lin.weight.grad)
