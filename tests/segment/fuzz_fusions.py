"""A random fusion generator: DAGs of pointwise, reduction and broadcast ops over
small random shapes and dtypes, run through execute and checked against the
reference executor.  Used by the CI test (a few hundred examples) and by
``scripts/fuzz.py`` (thousands)."""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from pyfuser import DataType, FusionDefinition

UNARY = ["exp", "neg", "abs", "tanh", "sin", "relu", "sigmoid"]
BINARY = ["add", "mul", "sub", "maximum"]
DTYPES = [DataType.Float, DataType.Half, DataType.BFloat16]


@st.composite
def fusions(draw):
    """A recipe: shape, input dtypes, a list of op steps (all indices in range), the
    outputs, and which inputs arrive transposed (a [cols, rows] tensor's ``.t()``).
    Rows and columns of 16 or more let the pointwise scheduler's 2-D tiles run:
    heavy ops on a broadcast row (``row0``), transposed inputs, an input's column 0
    broadcast along the rows (``col0``: read once per row, the row tile)."""
    rows = draw(st.one_of(st.integers(1, 6), st.integers(16, 24)))
    cols = draw(st.one_of(st.integers(1, 9), st.integers(16, 40)))
    n_in = draw(st.integers(1, 3))
    dts = [draw(st.sampled_from(DTYPES)) for _ in range(n_in)]
    transposed = [draw(st.booleans()) for _ in range(n_in)]
    steps = []
    n = n_in
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "reduce_bcast", "cast", "permute",
                                     "pad", "cat", "row0", "col0"]))
        a = draw(st.integers(0, n - 1))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(UNARY)), a))
        elif kind == "binary":
            steps.append(("binary", draw(st.sampled_from(BINARY)), a, draw(st.integers(0, n - 1))))
        elif kind in ("reduce", "reduce_bcast"):
            steps.append((kind, draw(st.sampled_from(["sum", "max"])), a, draw(st.integers(0, 1))))
        elif kind == "cast":
            steps.append(("cast", draw(st.sampled_from(DTYPES)), a))
        elif kind == "pad":  # pad dim d by (lo, hi), then slice a window of the old extent
            lo, hi = draw(st.integers(0, 3)), draw(st.integers(0, 3))
            steps.append(("pad", draw(st.integers(0, 1)), a, lo, hi, draw(st.integers(0, lo + hi)),
                          draw(st.sampled_from([None, 0.5, -2.0])), draw(st.booleans())))
        elif kind == "cat":  # cat with another value along d, then slice a window
            d = draw(st.integers(0, 1))
            steps.append(("cat", d, a, draw(st.integers(0, n - 1)), draw(st.integers(0, (rows, cols)[d])),
                          draw(st.booleans())))
        elif kind == "row0":  # a heavy op of row 0 broadcast down the rows
            steps.append(("row0", draw(st.sampled_from(["tanh", "sin"])), a))
        elif kind == "col0":  # an op of column 0 broadcast along each row
            steps.append(("col0", draw(st.sampled_from(["neg", "exp"])), a))
        else:
            steps.append(("permute", None, a))
        n += 1
    outs = sorted(set(draw(st.lists(st.integers(n_in, n - 1), min_size=1, max_size=3))))
    return rows, cols, dts, steps, outs, transposed


def build(recipe):
    """The FusionDefinition of a recipe, and inputs for it.  Every value is kept 2-D
    [rows, cols] (reductions keep dims and are broadcast back; a permute of a
    non-square value is followed by a permute back; a pad or cat is sliced back to
    [rows, cols] at an offset), so any two values combine.  A pad's or cat's wider
    result may be an output too (a kernel over it stores the values below it only
    inside their own extents)."""
    rows, cols, dts, steps, outs, *rest = recipe
    transposed = rest[0] if rest else [False] * len(dts)
    with FusionDefinition() as fd:
        vals = [fd.define_tensor(shape=[-1, -1], contiguity=[not t, not t], dtype=dt)
                for dt, t in zip(dts, transposed)]
        wide_outs = []
        for s in steps:
            kind, op, a = s[0], s[1], vals[s[2]]
            if kind == "unary":
                v = getattr(fd.ops, op)(a)
            elif kind == "binary":
                v = getattr(fd.ops, op)(a, vals[s[3]])
            elif kind == "cast":
                v = fd.ops.cast(a, dtype=op)
            elif kind == "row0":
                r0 = fd.ops.slice(a, start_indices=[0, 0], end_indices=[1, cols])
                v = getattr(fd.ops, op)(fd.ops.broadcast_in_dim(r0, shape=[rows, cols], broadcast_dims=[0, 1]))
            elif kind == "col0":
                c0 = fd.ops.slice(a, start_indices=[0, 0], end_indices=[rows, 1])
                v = getattr(fd.ops, op)(fd.ops.broadcast_in_dim(c0, shape=[rows, cols], broadcast_dims=[0, 1]))
            elif kind == "permute":
                v = fd.ops.permute(fd.ops.exp(fd.ops.permute(a, dims=[1, 0])), dims=[1, 0])
            elif kind in ("pad", "cat"):
                d = op
                if kind == "pad":
                    widths = [0, 0, s[3], s[4]] if d == 0 else [s[3], s[4], 0, 0]
                    value = None if s[6] is None else fd.define_scalar(s[6])
                    wide, start = fd.ops.pad(a, widths, value), s[5]
                else:
                    wide, start = fd.ops.cat([a, vals[s[3]]], dim=d), s[4]
                starts, ends = [0, 0], [rows, cols]
                starts[d], ends[d] = start, start + (rows, cols)[d]
                v = fd.ops.slice(wide, start_indices=starts, end_indices=ends)
                if s[-1]:
                    wide_outs.append(wide)
            else:
                r = getattr(fd.ops, op)(a, dims=[s[3]], keepdim=kind == "reduce")
                if kind == "reduce":
                    v = fd.ops.broadcast_in_dim(r, shape=[rows, cols], broadcast_dims=[0, 1])
                else:
                    v = fd.ops.broadcast_in_dim(r, shape=[rows, cols], broadcast_dims=[1 - s[3]])
            vals.append(v)
        for o in outs:
            fd.add_output(vals[o])
        for w in wide_outs:
            fd.add_output(w)
    g = torch.Generator().manual_seed(rows * 131 + cols * 7 + len(steps))
    inputs = [(torch.rand(cols, rows, generator=g) * 2 - 1).to(dt.torch).t() if t else
              (torch.rand(rows, cols, generator=g) * 2 - 1).to(dt.torch) for dt, t in zip(dts, transposed)]
    return fd, inputs


def check(recipe):
    fd, inputs = build(recipe)
    got = fd.execute(inputs)
    want = fd.reference(inputs)
    # 16-bit values round at every op, in a different order of operations than eager's
    # (fused vs one op at a time): a fusion with 16-bit values compares at 16-bit
    # precision.
    low = any(dt is not DataType.Float for dt in recipe[2]) or any(s[0] == "cast" and s[1] is not DataType.Float
                                                                  for s in recipe[3])
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if low:
            tol = dict(rtol=2e-2, atol=2e-2)
        else:
            tol = dict(rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(g.float(), w.float(), equal_nan=True, **tol)
    # The second execute runs the cached program's straight-line runner
    # (``straight.straight_line``): bit for bit the first's results.
    for g, a in zip(got, fd.execute(inputs)):
        torch.testing.assert_close(a, g, rtol=0, atol=0, equal_nan=True)
