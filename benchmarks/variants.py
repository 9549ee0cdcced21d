"""Kernel variants of one fusion on the GPU: scheduler overrides (``Choices`` fields),
each timed (launches replayed under ``do_bench``).

    PYTHONPATH=src python benchmarks/variants.py [--only bert,cast,stats,norm,logsoftmax] [--dump DIR]

Groups: ``bert`` (the report's attention softmax + dropout and its two halves),
``normbwd`` (normalization backwards: one inner-outer kernel, its fold sizes, and the
two kernels they ran as before), ``outer`` (column sums: strip and chunk sizes, the
chunk loop pipelined: ``stages``), ``rope`` (the broadcast tile's sizes against the flat tile),
``pointwise`` (elements per thread of math-heavy flat tiles), ``phases`` (wide rows:
warps), ``heldout``, ``heldout2`` (tile sizes of the held-out bench cases that
torch.compile beat), ``constrow`` (rows narrower than their block: the length a constant or not),
``heldout4`` (the held-out cases below torch.compile at 1add3b9: rows per program and
warps), ``padded`` (persistent rows padded by a fifth or more: lanes per thread),
``half_warps`` (the same change on rows without padding), ``peel_width``
(misaligned rows of 777-16001: peeled against unpeeled), ``peel_rules`` (the same
on rows aligned to 8 or 4 bytes and on layer norms), ``peel_rules2`` (rows of 30522,
fp32 rows, chunked rows), ``rms_chunks`` (RMS norms of 4096-8192: persistent rows
against chunks), ``chunks`` (aligned rows of 4096-8192: persistent against chunked), ``ties`` (the suite cases tied with torch.compile: pointwise tile sizes,
column sums' split and pipelining), ``prefetch`` (rows walked with the next one
loaded ahead, against the tiles without),
``prefetch_general`` (the same on shapes and fusions the rule was not measured on), ``rows1024`` (rows of
513-1024 elements: one or several per program), ``waste`` (rows padded far past their
width: chunks against the persistent row), ``transpose`` (a transposed
input copied contiguous: the transpose tile's sizes against the flat tile),
``cast`` (the byte mix of a fp16 -> fp32 log-softmax without its reductions),
``stats`` (statistics-only rows of 30522), ``norm`` (wide normalizations, online
chunks against persistent rows), ``logsoftmax`` (the report's three log-softmax
fusions).  Source edits of the generated kernels, timed by earlier versions of this
script (L2 hints, aligned windows, exp forms, folds), are recorded in the runs
below and in docs/TUNING.md.  Runs: ``benchmarks/results/*-variants_<commit>.txt``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re

import torch

from pyfuser.schedulers import Choices

from sweep import dropout_only, measure, softmax_only, stats


def without_prefetch():
    """Plan each row one at a time where the heuristics would prefetch it
    (``reduction.prefetch_pays``)."""
    return Choices(prefetch=False)


def spills_allowed():
    """Keep the heuristics' params where the kernel spills (time a spilling candidate
    instead of its fallback)."""
    return Choices(spill_check=False)


def prefetch_variants():
    """The tile as chosen, the tile without prefetching, and each form of the
    prefetching tile (``PrefetchRows.rewiden``, in the spill check's order,
    ``reduction.REWIDEN_ORDER``), timed even where it spills."""
    return [("base", {}), ("without prefetch", {}, without_prefetch())] + [
        (f"rewiden {k} (spills allowed)", dict(rewiden=k), spills_allowed()) for k in (1, 2, 0)]


@contextlib.contextmanager
def built_sources(dump):
    """The sources of the kernels built inside the block (``PYFUSER_DUMP=kernel_code``,
    read from stdout), appended to the list it yields; nothing where ``dump`` is unset."""
    sources: list = []
    if not dump:
        yield sources
        return
    old = os.environ.get("PYFUSER_DUMP")
    os.environ["PYFUSER_DUMP"] = "kernel_code"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            yield sources
    finally:
        if old is None:
            del os.environ["PYFUSER_DUMP"]
        else:
            os.environ["PYFUSER_DUMP"] = old
        sources += re.split(r"(?m)^===== kernel \S+ \(\w+\) =====\n", out.getvalue())[1:]


def bench_build(name):
    from pyfuser.bench import cases
    c = cases.BY_NAME[name]
    sizes = c.sizes(1.0)

    def build(fd):
        c.build(fd, sizes)
        return list(c.make_inputs(sizes, "cuda", None))

    return build


def without(name):
    """Plan without the scheduler ``name`` (what the fusion ran as before it existed)."""
    return Choices(disable=(name,))


def run(name, build, variants, dump=None):
    """Time each variant: (label, overrides[, context manager to plan under])."""
    rows = []
    for label, ov, *ctx in variants:
        with built_sources(dump) as sources, (ctx[0] if ctx else contextlib.nullcontext()):
            ms, nbytes, rec = measure(build, ov)
        row = f"| {name} | {label} | {ms * 1e3:.1f} | {nbytes / ms / 1e6:.0f} | {stats(rec)} |"
        print(row, flush=True)
        rows.append(row)
        if dump:
            for i, src in enumerate(sources):
                with open(os.path.join(dump, f"{name}-{label}-{i}.py".replace(" ", "_")), "w") as f:
                    f.write(src)
    return rows


def run_overrides(name, configs, dump=None, build=None, again=False):
    """Time the fusion as planned, then under each dict of scheduler overrides (labelled
    ``field=value ...``), then as planned once more where ``again`` (the spread of two
    runs of the same kernels)."""
    return run(name, build or bench_build(name), [("base", {})] + [
        (" ".join(f"{k}={v}" for k, v in ov.items()), ov) for ov in configs]
        + ([("base again", {})] if again else []), dump)


def rows_warps(*pairs):
    """Overrides of rows per program and warps: ``(block_k, num_warps)`` pairs."""
    return [dict(block_k=k, num_warps=w) for k, w in pairs]


def ties(dump):
    """The suite cases torch.compile tied (0.99x-1.0x at 08e827f) and their kin.  The
    first run of this group (``results/*-variants_ties_7a6dcea.txt``) timed forms of
    tanh as edits of the kernels then generated; the fp32 tanh without a branch and
    1 + tanh as one exponential are the code's since.  Now: elements per thread and
    warps of flat pointwise tiles, and the split and pipelining of column sums."""
    from bert_kernels import col_sum
    rows = []
    for name in ("bias_gelu_tanh_fp16", "bias_gelu_tanh_3072_fp16", "gelu_tanh_backward_bf16",
                 "gelu_erf_backward_bf16", "adam_step_fp32"):
        rows += run_overrides(name, [dict(block=b, num_warps=w) for b, w in (
            (4096, 8), (2048, 4), (1024, 4), (2048, 8), (4096, 4))], dump, again=True)
    outer = [dict(split=sp, stages=st) for sp in (8, 16, 32) for st in (1, 2, 3)]
    for name in ("bias_grad_sum_dim0_fp16", "bias_grad_sum_dim0_1000_fp16"):
        rows += run_overrides(name, outer, dump, again=True)
    for label, build in (("col sum [8192,768] fp16", col_sum(8192, 768)),
                         ("col sum [8192,3072] fp16", col_sum(8192, 3072))):
        rows += run_overrides(label, outer, dump, build, again=True)
    return rows


def padded(dump):
    """Persistent rows padded by a fifth or more (``reduction._padded_warps``): as
    planned against the rows per program and warps of unpadded rows (``before``), twice
    the rows on those warps, half the warps, and one more step each way."""
    from pyfuser import DataType

    def before(W):
        bj = _next_pow2(W)
        bk = max(1, min(64, 1024 // bj))
        return bk, max(1, bk * bj // (32 * (8 if bj <= 256 else 16)))

    H, BF = DataType.Half, DataType.BFloat16
    rows = []
    for name, W in (("log_softmax_257_fp16", 257), ("softmax_777_bf16", 777), ("layer_norm_768_fp16", 768),
                    ("dropout_residual_layer_norm_768_fp16", 768)):
        bk, w = before(W)
        rows += run_overrides(name, rows_warps((bk, w), (2 * bk, w), (bk, max(1, w // 2)), (4 * bk, 2 * w)),
                              dump, again=True)
    for R, W, dt, kind in ((524288, 100, H, "log_softmax"), (524288, 129, H, "softmax"),
                           (131072, 385, BF, "softmax"), (131072, 300, H, "layer_norm"),
                           (32768, 1100, BF, "softmax"), (32768, 2500, H, "layer_norm")):
        bk, w = before(W)
        rows += run_overrides(f"{kind} [{R}, {W}] {dt.name}", rows_warps((bk, w), (2 * bk, w), (bk, max(1, w // 2))),
                              dump, _rows_fusion(R, W, dt, kind))
    return rows


def half_warps(dump):
    """Persistent rows without padding (the suite's and the held-out ones): as planned
    against half the warps (what ``_padded_warps`` does to padded rows)."""
    from pyfuser.bench import cases

    rows = []
    for name in ("softmax_128_fp16", "softmax_1024_fp32", "layer_norm_1024_bf16", "softmax_backward_fp16",
                 "softmax_64_fp16", "softmax_4096_bf16", "log_softmax_4096_fp16", "layer_norm_4096_fp16",
                 "rms_norm_4096_bf16", "softmax_2000_fp32", "rms_norm_2048_fp16", "softmax_backward_1000_bf16",
                 "rms_norm_8192_bf16"):
        c = cases.BY_NAME[name]
        p = _planned(c)
        rows += run_overrides(name, [dict(block_k=p.block_k, num_warps=max(1, p.num_warps // 2))], dump, again=True)
    return rows


def peel_width(dump):
    """Misaligned rows of 777 to 16001 elements, each as planned (peeled: one row per
    program, head, tail and aligned body), the same tile unpeeled, and two rows per
    program unpeeled on the same and on twice the warps."""
    from pyfuser import DataType

    H, BF = DataType.Half, DataType.BFloat16
    rows = []
    for W, dt, kind in ((777, BF, "softmax"), (1100, BF, "softmax"), (1537, H, "log_softmax"),
                        (2500, H, "layer_norm"), (3001, H, "softmax"), (5001, BF, "softmax"),
                        (5001, H, "layer_norm"), (7001, H, "log_softmax"), (12001, H, "softmax"),
                        (16001, BF, "layer_norm")):
        R = (1 << 25) // W
        build = _rows_fusion(R, W, dt, kind)
        p = _planned_rows(R, W, dt, kind)
        flat = dict(align=1, contig_multiple=_contiguous_multiple(W))
        rows += run_overrides(f"{kind} [{R}, {W}] {dt.name} ({p.block_k}, {p.num_warps})", [
            dict(flat), dict(flat, block_k=2 * p.block_k), dict(flat, block_k=2 * p.block_k, num_warps=2 * p.num_warps),
            dict(num_warps=2 * p.num_warps)], dump, build, again=True)
    return rows


def peel_rules(dump):
    """Peeled rows against the same tile unpeeled (its loads as wide as the row's
    length allows: ``contiguous_multiple``), on rows 8-byte aligned (a multiple of 4
    16-bit or 2 fp32 elements), 4-byte aligned, and on layer norms (whose weight and
    bias, read at each row's own offset, are misaligned in a peeled body).  Since
    d4a7cbc the plan is the faster of the two (``reduction._peel_pays``)."""
    from pyfuser import DataType

    H, BF, F = DataType.Half, DataType.BFloat16, DataType.Float
    rows = []
    for W, dt, kind in ((1028, H, "softmax"), (3004, BF, "log_softmax"), (6004, BF, "softmax"),
                        (1100, H, "layer_norm"), (30524, H, "log_softmax"),
                        (1538, H, "softmax"), (3002, BF, "log_softmax"), (2502, H, "layer_norm"),
                        (1002, F, "softmax"), (3002, F, "log_softmax"),
                        (777, H, "layer_norm"), (1537, H, "layer_norm"), (3001, H, "layer_norm"),
                        (7001, H, "layer_norm"), (12001, BF, "layer_norm"), (16001, BF, "layer_norm")):
        rows += _peeled_and_unpeeled(W, dt, kind, dump)
    return rows


def _peeled_and_unpeeled(W, dt, kind, dump):
    """``_rows_fusion`` over 128 MB of [R, W] rows as planned, then unpeeled; the label
    carries the plan's (persistent, block_k, block_j, num_warps)."""

    R = (1 << 27) // (W * dt.torch.itemsize)
    build = _rows_fusion(R, W, dt, kind)
    p = _planned_rows(R, W, dt, kind)
    label = f"{kind} [{R}, {W}] {dt.name} ({int(p.persistent)}, {p.block_k}, {p.block_j}, {p.num_warps})"
    return run_overrides(label, [dict(align=1, contig_multiple=_contiguous_multiple(W))], dump, build, again=True)


def peel_rules2(dump):
    """Peeled against unpeeled, continued: the bench's rows of 30522 (4-byte aligned;
    peeled, prefetched as planned), fp32 rows of odd length, 16-bit rows 4-byte
    aligned that take chunks."""
    from pyfuser import DataType

    rows = []
    for name in ("log_softmax_full", "log_softmax_sub", "log_softmax_logsum", "softmax_30522_bf16",
                 "log_softmax_backward_bf16", "log_softmax_257_fp16", "softmax_777_bf16"):
        from pyfuser.bench import cases
        W = [x for x in cases.BY_NAME[name].sizes(1.0) if isinstance(x, int)][-1]
        rows += run_overrides(name, [dict(align=1, contig_multiple=_contiguous_multiple(W))], dump, again=True)
    H, BF, F = DataType.Half, DataType.BFloat16, DataType.Float
    for W, dt, kind in ((1001, F, "softmax"), (3001, F, "log_softmax"), (1537, F, "layer_norm"),
                        (1026, BF, "layer_norm"), (4098, H, "softmax"), (50258, H, "log_softmax"),
                        (20002, BF, "softmax")):
        rows += _peeled_and_unpeeled(W, dt, kind, dump)
    return rows


def rms_chunks(dump):
    """RMS norms of 8192 and 4096 (torch.compile's looped kernel beat the persistent row
    on the first): the persistent row as planned against chunks of 1024-4096."""
    rows = []
    for name in ("rms_norm_8192_bf16", "rms_norm_4096_bf16"):
        variants = [("base", {})]
        for bj, w in ((1024, 4), (2048, 4), (2048, 8), (4096, 8)):
            ov = dict(persistent=False, block_k=1, block_j=bj, num_warps=w, align=1)
            variants += [(f"chunks {bj} on {w}", ov)]
        rows += run(name, bench_build(name), variants + [("base again", {})], dump)
    return rows


def _planned_rows(R, W, dt, kind):
    """The params of the reduction kernel ``_rows_fusion(R, W, dt, kind)`` is planned with."""
    from pyfuser import FusionDefinition
    with FusionDefinition() as fd:
        inputs = _rows_fusion(R, W, dt, kind)(fd)
    return _row_params(fd, inputs)


def _planned(case):
    """The params of the case's reduction kernel."""
    sizes = case.sizes(1.0)
    return _row_params(case.define(sizes), list(case.make_inputs(sizes, "cuda", None)))


def _row_params(fd, inputs):
    """The params of the first reduction kernel of ``fd``'s plan for ``inputs``
    (``fd.explain``: after the spill check); every reduction form says whether it is
    persistent, the other schedulers' params do not."""
    return next(s.params for s in fd.explain(inputs).segments if hasattr(s.params, "persistent"))


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _contiguous_multiple(n: int) -> int:
    """What the heuristics tell the compiler a row length is a multiple of
    (``schedulers.base.contiguous_multiple``): the largest power of 2 below 16 dividing
    ``n`` when 16 does not, else 1."""
    return 1 if n % 16 == 0 else n & -n


def _rows_fusion(R, W, dt, kind, device="cuda"):
    """A softmax, log-softmax or layer norm over [R, W] rows of ``dt``."""
    from pyfuser.bench import cases, training as T

    def build(fd):
        if kind == "layer_norm":
            T.build_layer_norm(fd, (R, W, dt))
            return [torch.randn(*s, device=device, dtype=dt.torch) for s in ((R, W), (W,), (W,))]
        cases.build_softmax(fd, (R, W, dt), kind == "log_softmax")
        return [torch.randn(R, W, device=device, dtype=dt.torch)]
    return build


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", help="write each variant's kernel sources here")
    ap.add_argument("--only", default="", help="comma-separated groups: bert, logsoftmax")
    args = ap.parse_args()
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    import triton
    ms = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
    print(f"copy {2 * x.numel() * 4 / ms / 1e6:.0f} GB/s")
    print("| case | variant | us | GB/s | regs/spills |\n|---|---|---|---|---|")
    groups = set(filter(None, args.only.split(","))) or {"bert", "cast", "stats", "norm", "logsoftmax", "normbwd", "outer",
                                                               "rope", "pointwise", "transpose"}
    rows = []
    if "bert" in groups:
        for name in ("bert_softmax_dropout", "bert_softmax_dropout_noview"):
            rows += run(name, bench_build(name), [
                ("base", {}),
                ("k8w2", dict(block_k=8, num_warps=2)),
                ("k16w8", dict(block_k=16, num_warps=8)),
                ("k32w8", dict(block_k=32, num_warps=8)),
                ("k64w16", dict(block_k=64, num_warps=16)),
            ], args.dump)
        rows += run("softmax_only", softmax_only, [("base", {}), ("k16w4", dict(block_k=16, num_warps=4))])
        rows += run("dropout_only", dropout_only, [("base", {})])
    if "cast" in groups:  # the byte mix of log_softmax_sub without its reductions
        def cast_only(fd):
            from pyfuser import DataType
            x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
            fd.add_output(fd.ops.cast(x, DataType.Float))
            return [torch.randn(8192, 30522, device="cuda", dtype=torch.float16)]
        rows += run("cast fp16->fp32 [8192,30522]", cast_only, [("base", {})])
    if "stats" in groups:  # rows reduced to statistics only: log(sum(exp(x - max)))
        M = dict(persistent=False, block_k=1, online=True)
        rows += run("log_softmax_logsum", bench_build("log_softmax_logsum"), [
            ("base", {}),
            ("online 2048 w4", dict(M, block_j=2048, num_warps=4)),
            ("online 4096 w8", dict(M, block_j=4096, num_warps=8)),
            ("online 1024 w2", dict(M, block_j=1024, num_warps=2)),
            ("online 4096 w4", dict(M, block_j=4096, num_warps=4)),
            ("online 8192 w8", dict(M, block_j=8192, num_warps=8)),
            ("online 2048 w8", dict(M, block_j=2048, num_warps=8)),
        ], args.dump)
    if "norm" in groups:  # wide normalizations: online statistics pass + output pass
        M = dict(persistent=False, block_k=1, online=True)
        for name in ("softmax_30522_bf16", "log_softmax_50257_bf16", "log_softmax_sub", "log_softmax_full"):
            rows += run(name, bench_build(name), [
                ("base", {}),
                ("online 2048 w4", dict(M, block_j=2048, num_warps=4)),
                ("online 4096 w8", dict(M, block_j=4096, num_warps=8)),
                ("online 8192 w16", dict(M, block_j=8192, num_warps=16)),
            ], args.dump)
    if "logsoftmax" in groups:
        M = dict(persistent=False, block_k=1)
        P = dict(persistent=True, block_k=1, block_j=32768)
        for name in ("log_softmax_full", "log_softmax_logsum", "log_softmax_sub"):
            rows += run(name, bench_build(name), [
                ("base", {}),
                ("P w16", dict(P, num_warps=16)),
                ("P w8", dict(P, num_warps=8)),
                ("M 8192 w16", dict(M, block_j=8192, num_warps=16)),
                ("M 4096 w8", dict(M, block_j=4096, num_warps=8)),
                ("P w32 noalign", dict(P, num_warps=32, align=1)),
            ], args.dump)
    if "outer" in groups:  # column sums: strip width, rows per chunk, warps, split
        from bert_kernels import col_sum
        for name, build in (("bias_grad_sum_dim0_fp16", bench_build("bias_grad_sum_dim0_fp16")),
                            ("col sum [8192,768] fp16", col_sum(8192, 768)),
                            ("col sum [8192,3072] fp16", col_sum(8192, 3072))):
            rows += run(name, build, [
                ("base", {}),
                ("k64 j64", dict(block_k=64, block_j=64)),
                ("k128 j32", dict(block_k=128, block_j=32)),
                ("k256 j16", dict(block_k=256, block_j=16)),
                ("k32 j128 s16", dict(block_k=32, block_j=128, split=16)),
                ("k32 j128 s64", dict(block_k=32, block_j=128, split=64)),
                ("k64 j128 w8", dict(block_k=64, block_j=128, num_warps=8)),
                ("k128 j64 w8", dict(block_k=128, block_j=64, num_warps=8)),
                ("k256 j32 w8", dict(block_k=256, block_j=32, num_warps=8)),
                ("k64 j64 s64", dict(block_k=64, block_j=64, split=64)),
                ("stages2", dict(stages=2)),
                ("stages3", dict(stages=3)),
                ("k128 j32 stages3", dict(block_k=128, block_j=32, stages=3)),
                ("k64 j64 stages3", dict(block_k=64, block_j=64, stages=3)),
            ], args.dump)
    if "normbwd" in groups:  # normalization backwards: one inner-outer kernel against two kernels
        from pyfuser import DataType
        from pyfuser.bench import training
        bert_ln = (training.build_layer_norm_backward, training.layer_norm_backward_inputs, (8192, 768, DataType.Half))
        builds = [(n, bench_build(n)) for n in ("layer_norm_backward_bf16", "rms_norm_backward_bf16",
                                                 "dropout_residual_layer_norm_backward_bf16")]
        for label, (b, mk, sizes) in (("ln_bwd [8192,768] fp16", bert_ln),):
            def build(fd, b=b, mk=mk, sizes=sizes):
                b(fd, sizes)
                return list(mk(sizes, "cuda", None))
            builds.append((label, build))
        for name, build in builds:
            rows += run(name, build, [
                ("base", {}),
                ("two kernels", {}, without("inner_outer")),
                ("n1056 stages2", dict(nprog=1056, stages=2)),
                ("n792", dict(nprog=792)),
                ("n396", dict(nprog=396)),
                ("stages2", dict(stages=2)),
                ("k2 w4 n528", dict(block_k=2, num_warps=4, nprog=528)),
            ], args.dump)
    if "rope" in groups:  # the broadcast tile: heads on k, cos/sin once per tile column
        from pyfuser import DataType
        from pyfuser.bench import training

        def rope(backward):
            def build(fd):
                sizes = (16384, 8, 128, DataType.BFloat16)
                training.build_rope(fd, sizes, backward=backward)
                x, theta = training.rope_inputs(sizes, "cuda", None)
                return [x] + ([torch.randn_like(x)] if backward else []) + [theta]
            return build
        for name, build in (("rope_forward_bf16", rope(False)), ("rope_backward_bf16", rope(True))):
            rows += run(name, build, [
                ("base", {}),
                ("flat", dict(outer=())),
                ("k8 4096 w8", dict(num_warps=8)),
                ("k8 2048 w4", dict(block=2048)),
                ("k8 8192 w8", dict(block=8192, num_warps=8)),
                ("k4 4096 w4", dict(block_outer=4)),
                ("k4 2048 w4", dict(block_outer=4, block=2048)),
            ], args.dump)
    if "heldout4" in groups:  # held-out cases below torch.compile at 1add3b9, rows per program and warps
        for name, configs in (
                ("layer_norm_768_fp16", [(2, 2), (4, 4), (2, 4), (1, 1)]),
                ("log_softmax_257_fp16", [(1, 1), (4, 4), (8, 4), (4, 2), (8, 8)]),
                ("rms_norm_8192_bf16", [(1, 8), (1, 32), (2, 16)]),
                ("softmax_backward_1000_bf16", [(2, 2), (4, 4), (1, 1)]),
                ("softmax_777_bf16", [(2, 2), (1, 1)])):
            rows += run_overrides(name, rows_warps(*configs), args.dump, again=True)
    if "padded" in groups:  # persistent rows padded by a fifth or more: lanes per thread
        rows += padded(args.dump)
    if "half_warps" in groups:  # persistent rows without padding: half the warps
        rows += half_warps(args.dump)
    if "peel_width" in groups:  # misaligned rows of 777-16001: peeled against unpeeled tiles
        rows += peel_width(args.dump)
    if "peel_rules" in groups:  # peeled against unpeeled: 8- and 4-byte aligned rows, layer norms
        rows += peel_rules(args.dump)
    if "peel_rules2" in groups:  # peeled against unpeeled: rows of 30522, fp32 rows, chunked rows
        rows += peel_rules2(args.dump)
    if "rms_chunks" in groups:  # RMS norms: the persistent row against chunks
        rows += rms_chunks(args.dump)
    if "chunks" in groups:  # aligned rows of 4096-8192: the persistent row against two passes of chunks
        for name in ("rms_norm_8192_bf16", "rms_norm_4096_bf16", "layer_norm_4096_fp16", "layer_norm_5120_bf16"):
            rows += run_overrides(name, [dict(persistent=False, block_k=1, block_j=bj, num_warps=w, align=1)
                                         for bj, w in ((1024, 2), (2048, 4), (4096, 8), (2048, 8))], args.dump,
                                  again=True)
    if "ties" in groups:  # suite cases tied with torch.compile: tanh's cost, bytes in flight, warps
        rows += ties(args.dump)
    if "pointwise" in groups:  # flat tiles of a math-heavy pointwise fusion: elements per thread
        for name in ("gelu_tanh_backward_bf16", "gelu_erf_backward_bf16", "bias_gelu_tanh_fp16"):
            rows += run(name, bench_build(name), [
                ("base", {}),
                ("1024 w4", dict(block=1024, num_warps=4)),
                ("2048 w4", dict(block=2048, num_warps=4)),
                ("4096 w8", dict(block=4096, num_warps=8)),
            ], args.dump)
    if "phases" in groups:  # wide rows: chunks of 8192 on 8 warps, 16 warps
        rows += run("log_softmax_sub", bench_build("log_softmax_sub"), [
            ("base", {}),
            ("8192 x 8 warps", dict(block_j=8192, num_warps=8)),
        ], args.dump)
        rows += run("log_softmax_full", bench_build("log_softmax_full"), [
            ("base", {}),
            ("16 warps", dict(num_warps=16)),
        ], args.dump)
    if "heldout" in groups:  # held-out cases below torch.compile (bench --cases general): tile sizes
        rows += run_overrides("log_softmax_257_fp16", rows_warps(
            (1, 1), (1, 2), (1, 4), (4, 2), (4, 4), (8, 4), (8, 8), (16, 4), (16, 8), (32, 8)), args.dump)
        rows += run_overrides("rms_norm_8192_bf16", [dict(num_warps=w) for w in (4, 8, 32)], args.dump)
        rows += run_overrides("softmax_backward_1000_bf16", rows_warps((1, 4), (1, 8), (2, 4), (2, 8), (4, 8)),
                              args.dump)
        rows += run_overrides("softmax_backward_fp16", rows_warps((2, 4), (4, 4), (4, 8)), args.dump)
        rows += run_overrides("bias_grad_sum_dim0_1000_fp16", [dict(block_k=k, split=sp, stages=st) for k, sp, st in (
            (64, 32, 3), (64, 64, 3), (32, 64, 3), (64, 128, 3), (32, 128, 3), (64, 64, 1), (32, 32, 1))], args.dump)
        rows += run_overrides("bias_grad_sum_dim0_fp16", [dict(split=sp) for sp in (64, 128)], args.dump)
    if "constrow" in groups:  # rows narrower than their block: the length constant (as chosen) or at run time
        runtime_j = dict(runtime_row=True)
        for name in ("log_softmax_257_fp16", "layer_norm_768_fp16", "layer_norm_backward_768_fp16",
                     "softmax_backward_1000_bf16", "dropout_residual_layer_norm_768_fp16"):
            rows += run(name, bench_build(name), [("base", {}), ("runtime J", runtime_j),
                                                  ("base again", {}), ("runtime J again", runtime_j)],
                        args.dump)
    if "heldout2" in groups:  # the held-out cases still below torch.compile after contiguous_multiple
        rows += run_overrides("rms_norm_8192_bf16", rows_warps((2, 16), (2, 32), (4, 32), (2, 8)), args.dump)
        rows += run_overrides("layer_norm_768_fp16", rows_warps((1, 2), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8)),
                              args.dump)
        rows += run_overrides("log_softmax_257_fp16", rows_warps((2, 1), (4, 1), (8, 2), (2, 4), (1, 8)), args.dump)
    if "waste" in groups:  # rows padded far past their width (5120 -> 8192 lanes): chunks instead
        for name, configs in (
                ("layer_norm_5120_bf16", [dict(persistent=False, block_j=bj, num_warps=w) for bj, w in (
                    (1024, 4), (2048, 4), (2048, 8), (1024, 2))] + [dict(num_warps=8), dict(num_warps=32)]),
                ("softmax_12000_fp16", [dict(block_j=bj, num_warps=w) for bj, w in ((4096, 8), (4096, 16), (2048, 8),
                                                                                     (2048, 4))]),
                ("log_softmax_128256_bf16", [dict(block_j=bj, num_warps=w) for bj, w in ((4096, 8), (16384, 16),
                                                                                          (2048, 4))])):
            rows += run_overrides(name, configs, args.dump)
    if "prefetch" in groups:  # rows walked by one program per SM, the next row loaded ahead
        for name in ("log_softmax_full", "log_softmax_sub", "softmax_30522_bf16"):
            rows += run(name, bench_build(name), prefetch_variants(), args.dump)
    if "prefetch_general" in groups:  # the prefetch rule on shapes and fusions it was not measured on
        from pyfuser import DataType
        from pyfuser.bench import training as T

        def norm_rows(R, V, dt, log, out=None):
            def build(fd):
                x = T.tensor(fd, 2, dt)
                xf = fd.ops.cast(x, DataType.Float)
                d = fd.ops.sub(xf, T.bcast_rows(fd, fd.ops.max(xf, dims=[1]), (R, V)))
                s = fd.ops.sum(fd.ops.exp(d), dims=[1])
                y = (fd.ops.sub(d, T.bcast_rows(fd, fd.ops.log(s), (R, V))) if log
                     else fd.ops.div(fd.ops.exp(d), T.bcast_rows(fd, s, (R, V))))
                fd.add_output(y if out is DataType.Float else fd.ops.cast(y, out or dt))
                return [torch.randn(R, V, device="cuda", dtype=dt.torch)]
            return build
        for name, build in (("softmax [8192, 25001] fp16", norm_rows(8192, 25001, DataType.Half, False)),
                            ("log-softmax [6144, 30001] bf16", norm_rows(6144, 30001, DataType.BFloat16, True)),
                            ("log-softmax [4096, 32767] fp16 -> fp32", norm_rows(4096, 32767, DataType.Half, True,
                                                                            DataType.Float)),
                            ("softmax [8192, 26001] bf16 -> fp32", norm_rows(8192, 26001, DataType.BFloat16, False,
                                                                        DataType.Float))):
            rows += run(name, build, prefetch_variants(), args.dump)
    if "rows1024" in groups:  # rows of 513-1024 elements: one row on 2 warps against 2 or 4 rows
        for name in ("layer_norm_768_fp16", "layer_norm_1024_bf16", "softmax_1024_fp32", "softmax_backward_1000_bf16",
                     "softmax_777_bf16"):
            rows += run(name, bench_build(name), [("base", {}), ("2 rows, 2 warps", dict(block_k=2, num_warps=2)),
                                                  ("4 rows, 4 warps", dict(block_k=4, num_warps=4))], args.dump)
    if "transpose" in groups:  # a transposed input made contiguous (BERT's K^T): the transpose tile
        from pyfuser import DataType

        def kt_copy(fd):
            t = fd.define_tensor(shape=[-1] * 4, contiguity=[False] * 4, dtype=DataType.Half)
            fd.add_output(fd.ops.set(t))
            return [torch.randn(64, 12, 128, 64, device="cuda", dtype=torch.float16).transpose(2, 3)]
        rows += run("K^T copy [64,12,64,128] fp16", kt_copy, [
            ("base", {}),
            ("flat", dict(outer=())),
            ("k32 4096", dict(block_outer=32)),
            ("k64 8192 w8", dict(block=8192, num_warps=8)),
            ("k64 2048", dict(block=2048)),
            ("k64 4096 w8", dict(num_warps=8)),
        ], args.dump)
    print("\n".join(["", "| case | variant | us | GB/s | regs/spills |", "|---|---|---|---|---|"] + rows))


if __name__ == "__main__":
    main()
