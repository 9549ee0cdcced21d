"""Segmentation: which steps (kernels, host steps) compute a fusion.

The stage between the schedulers and the runtime: given a binding, it decides the
steps of a plan (``planner.make_plan``): host-op stages, ``split.split`` at shape
groups and reductions, ``refine`` (merging kernels, storing intermediates narrow),
ordered topologically (``flow``).  Whether a group of outputs is one kernel is asked
of a ``schedule`` callable the caller passes in (the runtime's, which also builds the
kernel), so this package never imports the runtime.  docs/SEGMENTATION.md describes
the passes.

Modules: ``steps`` (``Step``, ``Plan``, what a step reads), ``subfusion`` (a part of
the graph as a fusion of its own), ``aliases`` (outputs that are inputs, views or
expands), ``cuts`` (host levels, narrow stores at host ops, first reductions),
``split``, ``flow`` (the data flow between steps, merge candidates, topological
order), ``refine`` (merge and narrow), ``planner`` (the stages, eager warnings).
"""
