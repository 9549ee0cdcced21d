"""What the backend did, for people: the reports of a compiled graph (``reports.py``),
``TORCH_LOGS="pyfuser"`` (``logs.py``), ``explain(model, *inputs)`` (``explanation.py``)
and the accuracy mode's checks against ATen (``accuracy.py``)."""
