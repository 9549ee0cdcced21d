"""Tiles: which elements one program of a kernel works on, and how it reduces.

``protocol.Tile`` is what the emitter and the lowering ask of every tile; one module
per kind: ``flat`` (pointwise: ``FlatTile``, ``BroadcastTile``, ``ProbeTile``),
``reduction`` (``ReductionTile``: geometry, masks, indices, cache hints), with its
jobs apart in ``rows`` (peeled rows, the next row loaded ahead), ``accumulate``
(accumulators, Welford/Chan, online softmax) and ``split`` (partials folded across
programs), and ``inner_outer`` (``InnerOuterTile``: a row tile that also sums
columns; its kernel body is ``codegen.inner_outer``'s).
"""
