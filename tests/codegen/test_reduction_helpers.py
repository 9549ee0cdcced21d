"""A kernel defines only the reduction helpers it calls (the op table's ``Combine``
functions with a ``@triton.jit`` source), in the table's order."""
from __future__ import annotations

import torch

from pyfuser.ir.reductions import MAX_NAN, MIN_NAN, PROD

from .common import check, define_input, fusion, gen_for, make_tensor, sources_of


def _sources(op, x):
    def build(fd):
        t = define_input(fd, x)
        fd.add_output(getattr(fd.ops, op)(t, dims=[1]))

    fd = fusion(build)
    check(fd, [x], what=op)
    return "\n".join(sources_of(fd))


def test_sum_kernel_defines_no_max_min_or_prod_helper():
    src = _sources("sum", make_tensor((8, 33), torch.float32, gen_for("helpers-sum")))
    for h in (PROD, MAX_NAN, MIN_NAN):
        assert f"def {h.name}(" not in src


def test_max_kernel_defines_only_the_max_helper():
    src = _sources("max", make_tensor((8, 33), torch.float32, gen_for("helpers-max")))
    assert src.count(f"def {MAX_NAN.name}(") == 1 and f", {MAX_NAN.name}," in src
    assert f"def {MIN_NAN.name}(" not in src and f"def {PROD.name}(" not in src


def test_integer_max_uses_the_builtin():
    x = torch.randint(-9, 9, (8, 33), generator=gen_for("helpers-int"), dtype=torch.int32)
    src = _sources("max", x)
    assert f"def {MAX_NAN.name}(" not in src and "tl.standard._elementwise_max" in src


def test_helpers_follow_the_table_order():
    x = make_tensor((8, 33), torch.float32, gen_for("helpers-order"))

    def build(fd):
        t = define_input(fd, x)
        fd.add_output(fd.ops.min(t, dims=[1]))
        fd.add_output(fd.ops.prod(t, dims=[1]))

    fd = fusion(build)
    check(fd, [x], what="min and prod")
    for src in sources_of(fd):
        if f"def {MIN_NAN.name}(" in src and f"def {PROD.name}(" in src:
            assert src.index(f"def {PROD.name}(") < src.index(f"def {MIN_NAN.name}(")
