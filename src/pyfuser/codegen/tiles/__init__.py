"""Tiles: which elements one program of a kernel works on, and how it reduces.

``protocol.Tile`` is what the emitter and the lowering ask of every tile; one module
per kind: ``flat`` (pointwise: ``FlatTile``, ``BroadcastTile``, ``ProbeTile``),
``reduction`` (``ReductionTile``).
"""
