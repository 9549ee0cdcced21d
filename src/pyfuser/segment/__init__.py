"""Segmentation: which steps (kernels, host steps) compute a fusion.

The stage between the schedulers and the runtime; it never imports the runtime.
docs/SEGMENTATION.md describes the passes.

Modules: ``steps`` (``Step``, ``Plan``, what a step reads), ``subfusion`` (a part of
the graph as a fusion of its own).
"""
