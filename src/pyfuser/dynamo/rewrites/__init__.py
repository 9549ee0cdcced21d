"""Graph rewrites: every pass over an FX graph the backend makes, one module each.

``registry.REWRITES`` lists them in the order they run, each with the graph it
rewrites (AOTAutograd's joint graph before min-cut, each forward / backward /
inference graph before partitioning, the partitioned graph), and
``registry.rewritten(gm, stage)`` applies them.
"""
