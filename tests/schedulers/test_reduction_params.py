"""The params' forms (reduction tiles, pointwise tiles): each prints its form and its
own fields only, reads what it fixes as an attribute, and moves to the form a choice
names (``recast``, ``choose``); ``prefetch`` is a choice like the fields."""
import dataclasses

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import ChoicesError
from pyfuser.schedulers import Choices
from pyfuser.schedulers.pointwise import BroadcastParams, FlatParams
from pyfuser.schedulers.reduction_params import (FORMS, InnerChunked, InnerPersistent, OuterChunked,
                                                  OuterPersistent, PrefetchRows)


def test_each_form_prints_its_name_and_only_its_fields():
    assert repr(PrefetchRows(32768, 16, False, 8, 1)) == \
        "PrefetchRows(block_j=32768, num_warps=16, int64=False, align=8, rewiden=1)"
    assert str(OuterChunked(64, 32, 2, False, split=16, stages=3)) == \
        "OuterChunked(block_k=64, block_j=32, num_warps=2, int64=False, contig_multiple=1, split=16, stages=3)"
    inner_only = {"quad_rng", "align", "aligned_rows", "online", "out_reversed", "rewiden"}
    for form in (OuterPersistent, OuterChunked):
        assert not inner_only & {f.name for f in dataclasses.fields(form)}
    for form in (InnerPersistent, InnerChunked, PrefetchRows):
        assert not {"split", "stages"} & {f.name for f in dataclasses.fields(form)}


def test_every_form_reads_every_attribute():
    names = set(InnerChunked(1, 8, 1, False).values()) | set(OuterChunked(1, 8, 1, False).values())
    for form in FORMS:
        p = form(**{f.name: (8 if f.type == "int" else False) for f in dataclasses.fields(form)})
        assert set(p.values()) == names, form
    p = PrefetchRows(128, 4, False, 8)
    assert (p.inner, p.persistent, p.prefetch, p.block_k, p.online, p.split) == (True, True, True, 1, False, 1)
    assert not OuterPersistent(4, 8, 1, False).inner
    with pytest.raises(AttributeError, match="nprog"):
        p.nprog


def test_recast_moves_to_the_named_form_keeping_the_shared_fields():
    row = InnerPersistent(2, 128, 4, False, quad_rng=True, contig_multiple=4)
    chunks = row.recast(persistent=False, block_j=32)
    assert chunks == InnerChunked(2, 32, 4, False, quad_rng=True, contig_multiple=4)
    assert chunks.recast(persistent=True, block_j=128) == row
    assert OuterChunked(8, 16, 2, False, split=4, stages=3).recast(persistent=True) == OuterPersistent(8, 16, 2, False)


def test_choose_applies_what_the_axis_has_and_switches_forms():
    row = InnerPersistent(1, 128, 4, False, align=8)
    assert row.choose({"split": 4, "stages": 2}) is row  # outer fields: not this tile's
    assert row.choose({"prefetch": True, "rewiden": 2}) == PrefetchRows(128, 4, False, 8, 2)
    assert OuterChunked(8, 16, 2, False).choose({"prefetch": True, "align": 8}) == OuterChunked(8, 16, 2, False)
    pre = PrefetchRows(32768, 16, False, 8, 1)
    assert pre.choose({"persistent": False, "block_j": 8192}) == InnerChunked(1, 8192, 16, False, align=8)
    assert pre.choose({"prefetch": False}) == InnerPersistent(1, 32768, 16, False, align=8)
    with pytest.raises(ChoicesError, match="prefetch=True needs .* block_k=2"):
        row.choose({"prefetch": True, "block_k": 2})


def _softmax_fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        t = fd.ops.cast(x, dtype=DataType.Float)
        e = fd.ops.exp(fd.ops.sub(t, fd.ops.max(t, dims=[1], keepdim=True)))
        fd.add_output(fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)), dtype=DataType.Half))
    return fd


def test_prefetch_is_a_choice_of_its_own_plan():
    """A misaligned row (101 fp16 elements, peeled) prefetched under ``prefetch=True``,
    one row at a time under ``prefetch=False`` (the heuristics' choice on CPU)."""
    fd, x = _softmax_fd(), torch.randn(5, 101).half()
    with Choices(prefetch=True):
        p = fd.explain([x]).segments[0].params
    with Choices(prefetch=False):
        q = fd.explain([x]).segments[0].params
    assert isinstance(p, PrefetchRows) and p.align == 8
    assert q == fd.explain([x]).segments[0].params and not q.prefetch
    assert Choices(prefetch=False) != Choices()


def test_pointwise_forms_follow_outer():
    flat = FlatParams(2048, 4, False)
    assert repr(flat) == "FlatParams(block=2048, num_warps=4, int64=False)"
    assert (flat.outer, flat.block_outer, flat.contig_multiple) == ((), 1, 1)
    tile = flat.choose({"outer": (0,), "block_outer": 8, "split": 4})
    assert tile == BroadcastParams(2048, 4, False, (0,), 8)
    assert tile.choose({"outer": ()}) == flat and flat.choose({"block_j": 16}) is flat
