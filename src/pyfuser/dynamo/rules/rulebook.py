"""The registry of ATen -> ``fd.ops`` rules: ``Rule``, ``RULES`` and the helpers rules use.

A rule records its op with ``fd.ops`` calls (``fn(translator, node, args)``, the
arguments bound by schema name), may ``check`` a use and name why pyfuser cannot
express it with ATen's semantics (a rounding mode, a device-changing copy, ...),
and says whether the op computes anything (views and identities do not: a region
of them alone stays in ATen).  The rules themselves live in ``compute_rules.py``
(pointwise ops, casts, reductions) and ``layout_rules.py`` (views, copies, creation,
random numbers); ``rules.py`` imports both, so ``RULES`` is complete once it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch
from torch.fx.node import Node

from ...ir.ops import OPS

aten = torch.ops.aten
prims = torch.ops.prims


class Unsupported(Exception):
    """A node pyfuser cannot translate with ATen's semantics.  ``cause`` is short and
    stable (op name and kind of problem): the backend warns once per cause."""

    def __init__(self, cause: str, message: str):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class Rule:
    fn: Callable  # (translator, node, args namespace) -> fd value or tuple of them
    check: Callable | None = None  # (node, args namespace) -> reason it is unsupported, or None
    compute: bool = True  # False: a view / identity, which alone is not worth a fusion
    ops: tuple = ()  # the op table rows ``fn`` records (none for an identity)


RULES: dict = {}

ATEN_VIEWS = set()  # the targets of the view rules (``view_rule``, ``identity_rule``)
# The views that change a tensor's shape, not its elements' order: what the partitioner
# checks for cuts, pad_matmuls follows to the graph's outputs, sum_views sums through.
RESHAPES = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default)
# A node a graph rewrite keeps out of every region (node.meta key): a view that must
# stay a view between two regions (``pad_matmuls``: a sum reading the padded gradient).
ATEN_ONLY = "pyfuser_aten_only"


def overloads(*names):
    """OpOverloads by "packet.overload" name; names this torch lacks are skipped."""
    out = []
    for name in names:
        ns = prims if name.startswith("prims.") else aten
        packet_name, _, overload = name.removeprefix("prims.").partition(".")
        packet = getattr(ns, packet_name, None)
        if packet is not None and (overload or "default") in packet.overloads():
            out.append(getattr(packet, overload or "default"))
    return out


def rule(*names, ops, check=None, compute=True):
    def register(fn):
        for op in overloads(*names):
            RULES[op] = Rule(fn, check, compute, tuple(ops))
        return fn

    return register


def view_rule(*names, ops, check=None):
    """A rule for a view: no computing, and handed back to ATen at a region's edges."""
    def register(fn):
        for op in overloads(*names):
            RULES[op] = Rule(fn, check, compute=False, ops=tuple(ops))
            ATEN_VIEWS.add(op)
        return fn

    return register


def identity_rule(*names, aten_view):
    def fn(t, n, a):
        return a.self

    for op in overloads(*names):
        RULES[op] = Rule(fn, None, compute=False, ops=())
        if aten_view:
            ATEN_VIEWS.add(op)


def table_rows(kind):
    """The op table rows of ``kind`` that name ATen packets: their rules come from the table."""
    return [row for row in OPS.values() if row.kind is kind and row.aten]


def bind_args(target, args, kwargs) -> SimpleNamespace:
    """The node's arguments by schema name, defaults filled in."""
    out = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            raise Unsupported(f"{target}: arguments", f"{target}: no value for argument {arg.name}")
    return SimpleNamespace(**out)


def meta(node):
    return node.meta.get("val") if isinstance(node, Node) else None
