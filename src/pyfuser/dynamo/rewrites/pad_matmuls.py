"""Pad 16-bit matmuls whose sizes are not multiples of 8, before partitioning.

cuBLAS runs a half-precision GEMM at a fraction of its speed when a size, and so a
leading dimension, is not a multiple of 8 elements (16 bytes): GEMMs over a
vocabulary of 30522 take two and a half times as long as over 30528
(docs/TUNING.md#pad-matmuls).  So a ``mm`` / ``addmm`` whose ``K`` or ``M`` is misaligned is rewritten on zero-padded
operands and its result's rows sliced back (a contiguous view); zeros along K add
nothing to the products.

* An operand that is a transpose (``t``, ``transpose``, ``permute``) of a tensor is
  padded at its source and transposed again, so the gradient of the decoder's
  output is padded once for both backward GEMMs.  Pads are ``constant_pad_nd``
  nodes: the partitioner fuses them into the region that produces the operand when
  there is one, else ATen copies.
* A misaligned ``N`` (the result's columns) is padded too: the weight's rows and the
  bias get zeros, and the result is sliced back, a view whose rows start every
  ``N + pad`` elements.  The first try lost in the log-softmax fusion reading the
  view more than it gained on the forward GEMM: its rows were peeled as if
  contiguous, which misaligned every strided row.  Rows
  of such a view now peel from their own start (``ReductionTile.aligned_rows``, chosen
  by ``reduction.strided_rows_dominate``).
* Padding pays when the GEMM's time saved exceeds the copies added: about 2.5e-15 s
  per FLOP saved (239 vs 581 TFLOP/s) against 3.3e-13 s per byte a pad moves (read
  plus written, at 3 TB/s): break-even near 130 FLOPs per byte, so matmuls with at
  least ``min_flops_per_byte`` FLOPs per byte their pads move are rewritten: 300 on
  the ``h200`` device model, scaled by the GEMM rate over the bandwidth of the
  device's (both times scale with them).  A small weight next to a big activation
  costs little to pad.
* A misaligned dim of ``WIDE_DIM`` or more (a vocabulary) is padded to a multiple
  of ``LINE`` (128 bytes), so that each padded row starts on a cache line.
* A symbolic size (dynamic shapes: the token count) is not padded, its alignment
  being unknown at compile time, and the cost rule is skipped where it has one (it
  is a batch's token count, many rows): the static dims are padded.
* CUDA only: on the CPU (and in the interpreter) alignment buys nothing.  ``ALWAYS``
  forces the rewrite anywhere (tests).

The graph's metadata is recomputed with FakeTensorProp afterwards; if anything in
the rewrite fails, the caller keeps the graph unpadded.
"""
from __future__ import annotations

from fractions import Fraction

import torch

from ...schedulers.device_model import H200, DeviceModel, model_for
from ..rules import ATEN_ONLY, RESHAPES, meta
from .sum_views import leading_merge

aten = torch.ops.aten

ALIGN = 8  # elements per 16 bytes of a 16-bit dtype
# A misaligned dim at least WIDE_DIM long pads to a multiple of LINE elements (128
# bytes, a cache line) rather than of ALIGN, for at most 1.5% more columns: rows
# starting on cache lines made a 50257-word head's GEMMs and its gradient's pad faster
# (docs/TUNING.md#pad-matmuls).
LINE = 64
WIDE_DIM = 4096
# FLOPs per byte a pad moves from which a matmul is padded, on the ``h200`` model.
MIN_FLOPS_PER_BYTE = 300
ALWAYS = False  # pad regardless of device and cost (tests)
PAD_N = True  # pad the result's columns too (see the module docstring)

_TRANSPOSES = (aten.t.default, aten.transpose.int, aten.permute.default)


def min_flops_per_byte(model: DeviceModel) -> Fraction:
    """``MIN_FLOPS_PER_BYTE`` for ``model``: scaled by its GEMM rate over its bandwidth
    relative to the ``h200`` model's (exact: 300 on it).  The time a pad saves per
    FLOP falls with the GEMM rate, the time it costs per byte with the bandwidth."""
    return Fraction(MIN_FLOPS_PER_BYTE * model.matmul_flops * H200.bandwidth, H200.matmul_flops * model.bandwidth)


def _pad_amount(n) -> int:
    """Zeros to add to a dim of size ``n``: none when it is a multiple of ``ALIGN``,
    else up to a multiple of ``LINE`` for a dim of at least ``WIDE_DIM``, of ``ALIGN``
    for a shorter one; none for a symbolic size, whose alignment is not known when
    the graph is compiled."""
    if not isinstance(n, int) or n % ALIGN == 0:
        return 0
    return -n % (LINE if n >= WIDE_DIM else ALIGN)


def pad_matmuls(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm``'s misaligned 16-bit matmuls in place; returns how many.  The
    nodes' ``meta["val"]`` are stale where it rewrote (``registry.rewritten`` propagates them)."""
    padded_sources: dict = {}
    count = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in (aten.mm.default, aten.addmm.default):
            count += _rewrite(gm.graph, node, padded_sources)
    if count:
        _sums_from_padded(gm.graph, padded_sources)
        gm.graph.eliminate_dead_code()  # the transposes the padded operands replaced
        gm.graph.lint()
        gm.recompile()
    return count


def _rewrite(graph, node, cache) -> int:
    bias = None
    if node.target is aten.addmm.default:
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 3:
            return 0
        bias, a, b = node.args
    else:
        a, b = node.args
    va, vb, out = meta(a), meta(b), meta(node)
    if va is None or vb is None or out is None or out.dtype not in (torch.float16, torch.bfloat16):
        return 0
    (M, K), N = va.shape, vb.shape[1]
    pm, pk, pn = _pad_amount(M), _pad_amount(K), _pad_amount(N) if PAD_N else 0
    if not (pm or pk or pn):
        return 0
    if bias is not None and pm and meta(bias).dim() > 1 and meta(bias).shape[0] != 1:
        return 0  # a per-row bias would need its rows padded too
    if not ALWAYS:
        if out.device.type != "cuda":
            return 0
        copied = (va.numel() * 4 if pm or pk else 0) + (vb.numel() * 4 if pk or pn else 0)
        if all(isinstance(d, int) for d in (M, N, K)) and \
                2 * M * N * K < min_flops_per_byte(model_for(out.device)) * copied:
            return 0  # (with a symbolic size the cost is not known: pad, as for the tokens of a batch)
    with graph.inserting_before(node):
        pa = _padded(graph, a, {0: pm, 1: pk}, cache)
        pb = _padded(graph, b, {0: pk, 1: pn}, cache)
        if bias is not None and pn and meta(bias).dim() >= 1 and meta(bias).shape[-1] != 1:
            bias = _padded(graph, bias, {meta(bias).dim() - 1: pn}, cache)
        args = (pa, pb) if bias is None else (bias, pa, pb)
        res = graph.call_function(node.target, args)
        if pm:
            res = graph.call_function(aten.slice.Tensor, (res, 0, 0, M))
        if pn:  # a view with the padded row stride: its readers peel from each row's start
            res = graph.call_function(aten.slice.Tensor, (res, 1, 0, N))
    node.replace_all_uses_with(res)
    graph.erase_node(node)
    if pn:
        _contiguous_at_outputs(graph, res)
    return 1


def _contiguous_at_outputs(graph, sliced):
    """Where the sliced result, or a reshape of it, leaves the graph, it leaves as a
    contiguous copy: eager returns contiguous logits, and code that ``view``s them
    must keep working.  The copy is taken of the sliced result itself and viewed as
    the output, so it is one more output of the fusion that reads the logits anyway
    (a loss's log-softmax statistics read the same [tokens, vocabulary] view once the
    backend folds the view chain back, ``sink_views``): one kernel reads the logits
    once, writes the copy and keeps the statistics.  A copy of the [batch, seq,
    vocabulary] view was a kernel of its own (docs/TUNING.md#pad-matmuls)."""
    todo, copy = [(sliced, [])], None
    while todo:
        n, chain = todo.pop()
        for user in list(n.users):
            if user.op == "output":
                if copy is None:
                    with graph.inserting_after(sliced):
                        copy = graph.call_function(aten.clone.default, (sliced,),
                                                   {"memory_format": torch.contiguous_format})
                out = copy
                with graph.inserting_after(n):
                    for shape in chain:
                        out = graph.call_function(aten.view.default, (out, shape))
                user.replace_input_with(n, out)
            elif user.op == "call_function" and user.target in RESHAPES:
                todo.append((user, chain + [list(meta(user).shape)]))


def _sums_from_padded(graph, padded: dict):
    """A sum over the leading dims of a tensor that is also padded (the gradient of
    a vocabulary projection: padded for its GEMMs, summed for the bias gradient) reads
    the padded copy, through a slice that stays a view between the regions
    (``rules.ATEN_ONLY``), instead of computing the tensor a second time: the
    region that pads it would otherwise recompute it in a column-sum kernel of its
    own (several times the sum of the padded copy: docs/TUNING.md#pad-matmuls).  ``padded``: ``_padded``'s cache, (node, pads) -> pad node."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for (src, pads), pad in list(padded.items()):
        if not isinstance(src, torch.fx.Node) or pad.op != "call_function":
            continue
        readers = [(src, 1)]  # (tensor, how many of its leading dims make the padded tensor's dim 0)
        if src.op == "call_function" and src.target in RESHAPES:
            m = leading_merge(meta(src.args[0]).shape, meta(src).shape)
            if m is not None:
                readers.append((src.args[0], m))
        for base, merged in readers:
            for user in list(base.users):
                keepdim = _sum_of_leading(user, base, merged)
                if keepdim is not None and order[pad] < order[user]:
                    _sum_padded(graph, user, keepdim, base, merged, src, pad, pads)


def _sum_of_leading(user, base, merged):
    """keepdim when ``user`` sums ``base`` over exactly its first ``merged`` dims, else None."""
    if user.op != "call_function" or user.target is not aten.sum.dim_IntList or user.args[0] is not base:
        return None
    args = list(user.args) + [None] * 2
    dims, keepdim = args[1], bool(args[2] if args[2] is not None else user.kwargs.get("keepdim", False))
    rank = meta(base).dim()
    if not isinstance(dims, (list, tuple)) or sorted(d % rank for d in dims) != list(range(merged)):
        return None
    return keepdim


def _sum_padded(graph, user, keepdim, base, merged, src, pad, pads):
    """Replace the sum ``user`` of ``base``'s first ``merged`` dims by the sum of the
    padded ``pad`` sliced back to ``src``'s shape."""
    with graph.inserting_before(user):
        view = pad
        for d, p in enumerate(pads):
            if p:
                view = graph.call_function(aten.slice.Tensor, (view, d, 0, meta(src).shape[d]))
                view.meta[ATEN_ONLY] = True
        out = graph.call_function(aten.sum.dim_IntList, (view, [0], False), dict(user.kwargs))
        if keepdim:
            out = graph.call_function(aten.view.default, (out, [1] * merged + list(meta(base).shape[merged:])))
    user.replace_all_uses_with(out)
    graph.erase_node(user)


def _padded(graph, node, pads: dict, cache):
    """``node`` zero-padded at the end of each dim by ``pads[dim]`` elements; a
    transpose is padded at its source (``cache``: one pad per source and amounts)."""
    if not any(pads.values()):
        return node
    if isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _TRANSPOSES:
        src = node.args[0]
        rank = meta(src).dim()
        perm = _permutation(node, rank)
        if perm is not None:
            inner = _padded(graph, src, {perm[d]: p for d, p in pads.items()}, cache)
            return graph.call_function(node.target, (inner,) + tuple(node.args[1:]), dict(node.kwargs))
    rank = meta(node).dim()
    key = (node, tuple(pads.get(d, 0) for d in range(rank)))
    if key not in cache:
        flat = []
        for d in reversed(range(rank)):  # constant_pad_nd lists the last dim first
            flat += [0, pads.get(d, 0)]
        cache[key] = graph.call_function(aten.constant_pad_nd.default, (node, flat, 0.0))
    return cache[key]


def _permutation(node, rank):
    """Dim d of the transposed view is dim perm[d] of its source."""
    if node.target is aten.t.default:
        return [1, 0] if rank == 2 else None
    if node.target is aten.transpose.int:
        i, j = (d % rank for d in node.args[1:3])
        perm = list(range(rank))
        perm[i], perm[j] = perm[j], perm[i]
        return perm
    return [d % rank for d in node.args[1]]

