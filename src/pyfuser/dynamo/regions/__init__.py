"""A partitioned graph at run time: each region translated to a FusionDefinition and run
(``translate.py``, ``region.py``), the views between regions built from their traced
strides (``views.py``), and a whole training graph replayed as one CUDA graph
(``graphs.py``, ``graph_checks.py``, ``recording.py``)."""
