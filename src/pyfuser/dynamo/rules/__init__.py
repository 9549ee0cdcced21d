"""The ATen ops pyfuser fuses: one ``Rule`` per op, and which nodes are supported.

``RULES`` is the single table both the partitioner's operator support
(``unsupported_reason``) and the translator read.  Its parts, by job:

* ``rulebook.py``: ``Rule``, ``RULES``, the registration helpers, argument binding;
* ``compute_rules.py``: pointwise ops, casts and reductions (most derived from the op
  table's ``aten`` fields), and ``reduction_kind`` for the partitioner's cuts;
* ``layout_rules.py``: views, copies, ``cat``, padding, creation, random numbers;
* ``support.py``: which nodes may join a region, and why not (``why_not``: a
  ``Reason`` with a stable code).

This module imports them all, so ``RULES`` is complete once it is imported, and
keeps the names the rest of the backend reads in one place.
"""
from __future__ import annotations

from .compute_rules import reduction_kind
from .layout_rules import LAYOUT_COPY_MIN_NUMEL, is_layout_copy
from .rulebook import (ATEN_ONLY, ATEN_VIEWS, RESHAPES, RULES, Rule, Unsupported, bind_args, meta, overloads,
                       rule, table_rows)
from .support import REASON_CODES, SUPPORTED_DTYPES, Reason, is_compute, unsupported_reason, why_not

__all__ = ["ATEN_ONLY", "ATEN_VIEWS", "LAYOUT_COPY_MIN_NUMEL", "REASON_CODES", "RESHAPES", "RULES", "Reason", "Rule",
           "SUPPORTED_DTYPES", "Unsupported", "bind_args", "is_compute", "is_layout_copy", "meta", "overloads",
           "reduction_kind", "rule", "table_rows", "unsupported_reason", "why_not"]
