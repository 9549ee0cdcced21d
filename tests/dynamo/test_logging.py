"""``TORCH_LOGS="pyfuser"`` through ``torch._logging.set_logs``, in the process.

Each log record of the backend carries its data (``record.pyfuser_report``, a
``report.GraphReport``; ``pyfuser_region``; ``pyfuser_progress``): the tests check the
reason codes and names there, and that the text shows the codes.
"""
import logging

import warnings
from contextlib import contextmanager

import pytest
import torch

import pyfuser.dynamo as pd
from pyfuser.dynamo.report import logs
from pyfuser.errors import EagerFallbackWarning
from pyfuser.schedulers.base import Choices


@contextmanager
def _quiet(category):
    """The runtime warns once per process that a segment runs as torch ops: expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category)
        yield


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def with_attr(self, attr):
        return [r for r in self.records if hasattr(r, attr)]


@pytest.fixture
def records():
    """Records reaching the ``pyfuser`` logger (torch's handlers do not propagate to the root)."""
    handler = _Records()
    logger = logging.getLogger("pyfuser")
    saved = logger.handlers[:], logger.propagate, logger.level
    logger.addHandler(handler)
    yield handler
    torch._logging.set_logs()  # back to torch's defaults
    logger.handlers[:], logger.propagate, logger.level = saved  # and the logger as other tests know it


def mixed(x, i):
    y = (x * 2).exp()
    c = torch.cumsum(y, 1)  # no rule
    q = torch.div(x, 3.0, rounding_mode="floor")  # a rule that rejects this use
    b = i.to(torch.int8) * 2  # a dtype pyfuser does not compute in
    return (c + 1).sigmoid() * q.relu(), b


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 4, generator=g), torch.randint(0, 5, (3, 4), generator=g)


def _report(records):
    reps = [r.pyfuser_report for r in records.with_attr("pyfuser_report") if r.levelno == logging.INFO]
    assert reps, [r.getMessage() for r in records.records]
    return reps[0]


def test_info_names_regions_sources_and_reason_codes(records):
    torch._logging.set_logs(modules={"pyfuser": logging.INFO})
    with torch.no_grad():
        torch.compile(mixed, backend="pyfuser")(*_inputs())
    rep = _report(records)
    assert rep.kind == "inference" and rep.name.startswith("inference")
    codes = {o.node.target: o.code for o in rep.outside}
    assert codes["aten.cumsum.default"] == "no_rule"
    assert codes["aten.div.Tensor_mode"] == "unsupported_use"
    assert codes["aten.mul.Tensor"] == "unsupported_dtype"  # the int8 product
    assert rep.regions and all(r.name.startswith(rep.name + ".pyfuser_region_") for r in rep.regions)
    assert all(r.fusion_ids and r.fused for r in rep.regions)
    assert any("test_logging.py" in s and "exp()" in s for r in rep.regions for s in r.sources)
    text = next(r.getMessage() for r in records.with_attr("pyfuser_report"))
    for code in ("no_rule", "unsupported_use", "unsupported_dtype"):
        assert f": {code}:" in text
    # INFO alone: no FusionDefinitions or kernels
    assert not records.with_attr("pyfuser_region")
    assert any(getattr(r, "pyfuser_progress", {}).get("kernels_built", 0) > 0 for r in records.records)


def test_debug_adds_fusion_definitions_and_kernels(records):
    torch._logging.set_logs(modules={"pyfuser": logging.DEBUG})
    with torch.no_grad():
        torch.compile(mixed, backend="pyfuser")(*_inputs())
    rep = _report(records)
    fusions = [r for r in records.with_attr("pyfuser_region") if r.name.endswith("__pyfuser_fusions")]
    kernels = [r for r in records.with_attr("pyfuser_region") if r.name.endswith("__pyfuser_kernels")]
    assert {r.pyfuser_region.name for r in fusions} == {r.name for r in rep.regions}
    assert {r.pyfuser_region.name for r in kernels} == {r.name for r in rep.regions}
    for r in fusions:
        ids = r.pyfuser_region.fusion_ids
        assert f"# fusion{ids[0]}\ndef nvfuser_fusion(" in r.getMessage()
    assert all(r.pyfuser_kernel in r.getMessage() for r in kernels)


def test_an_artifact_alone(records):
    torch._logging.set_logs(modules={"pyfuser_fusions": True})
    with torch.no_grad():
        torch.compile(mixed, backend="pyfuser")(*_inputs())
    assert records.with_attr("pyfuser_region")
    assert not [r for r in records.records if r.levelno >= logging.INFO and r.name.startswith("pyfuser")]


def test_fallback_after_an_error_is_a_reason(records, monkeypatch):
    from pyfuser.dynamo.regions import region

    def broken(graph, specs):
        raise RuntimeError("translation broke")

    monkeypatch.setattr(region, "translate", broken)
    torch._logging.set_logs(modules={"pyfuser": logging.INFO})
    with pytest.warns(pd.FallbackWarning, match="translation broke"), torch.no_grad():
        torch.compile(mixed, backend="pyfuser")(*_inputs())
    rep = _report(records)
    assert rep.regions and not any(r.fused for r in rep.regions)
    fell = [o for o in rep.outside if o.code == "fallback"]
    assert fell and all("translation broke" in o.reason.detail for o in fell)
    assert rep.counts["inside"] == 0


def test_a_segment_no_scheduler_takes_logs_the_rejection_codes(records):
    from pyfuser.schedulers import SCHEDULERS

    def softmax(x):
        return (x * 2).softmax(-1) + 1

    others = tuple(s.NAME for s in SCHEDULERS if s.NAME != "pointwise")
    torch._logging.set_logs(modules={"pyfuser": logging.INFO})
    with Choices(disable=others), torch.no_grad(), _quiet(EagerFallbackWarning):
        torch.compile(softmax, backend="pyfuser")(torch.randn(3, 8))
    reps = [r.pyfuser_report for r in records.with_attr("pyfuser_report") if any(g.segments for g in
                                                                                r.pyfuser_report.regions)]
    assert reps, "no segments logged"
    host = [s for g in reps[0].regions for s in g.segments if s.scheduler is None]
    assert host and all(s.codes.get("pointwise") for s in host)
    text = next(r.getMessage() for r in records.with_attr("pyfuser_report") if "segments" in r.getMessage())
    assert f"pointwise={host[0].codes['pointwise']}" in text


def test_long_compiles_log_progress(records, monkeypatch):
    monkeypatch.setattr(logs, "HEARTBEAT_S", 0.01)
    torch._logging.set_logs(modules={"pyfuser": logging.INFO})
    with torch.no_grad():
        torch.compile(mixed, backend="pyfuser")(*_inputs())
    beats = [r.pyfuser_progress for r in records.with_attr("pyfuser_progress") if "still" in r.getMessage()]
    assert beats and {"regions", "fusions_created", "kernels_compiled"} <= set(beats[0])


def test_dumps_name_the_region_of_each_fusion(capsys, monkeypatch):
    monkeypatch.setenv("PYFUSER_DUMP", "python_definition")
    with torch.no_grad():
        torch.compile(mixed, backend="pyfuser")(*_inputs())
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("pyfuser.dynamo: inference"))
    fusion = line.split(" runs fusion")[1].split(":")[0]
    assert f"# fusion{fusion}\ndef nvfuser_fusion(" in out and "nodes " in line
    assert "test_logging.py" in out


def test_nothing_is_reported_without_logging(records):
    with torch.no_grad():
        torch.compile(mixed, backend="pyfuser")(*_inputs())
    assert not records.records


def test_info_says_whether_each_training_graph_is_replayed_as_a_cuda_graph(records, monkeypatch):
    from pyfuser.dynamo.regions import graphs

    monkeypatch.setattr(graphs, "enabled", lambda: True)  # on the CPU the check itself says why not
    torch._logging.set_logs(modules={"pyfuser": logging.INFO})
    x = torch.randn(3, 4, requires_grad=True)
    torch.compile(lambda a: (a * 2).exp().sum(), backend="pyfuser")(x).backward()
    lines = [r.getMessage() for r in records.records if "CUDA graph" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("forward ") and lines[1].startswith("backward ")
    assert all("not replayed as a CUDA graph: input" in s and "is not a CUDA tensor" in s for s in lines)
