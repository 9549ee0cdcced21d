"""Source text of one Triton kernel: statements, temporaries, and the arguments it uses.

The lowering asks the writer for names (``tmp``) and for runtime arguments (``arg``);
the writer records which arguments the body referenced, so the kernel's signature
and the launcher's argument list are derived from the body, never kept in sync by hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.dtypes import DataType
from ..ir.reductions import HELPERS


@dataclass
class KernelArg:
    name: str
    kind: str  # "ptr" | "size" | "stride" | "scalar" | "rng" | "divmagic" | "flag" | ...
    source: tuple  # what the launcher reads: ("tensor", val) / ("size", val, dim) / ...


def _annotation(a: KernelArg) -> str:
    """A parameter's annotation: "flag" arguments are compile-time constants; a Double
    scalar is typed ``tl.float64``, since Triton passes a Python float as fp32 (the
    interpreter honours the same annotation: ``runtime.interpreter``)."""
    if a.kind == "flag":
        return "tl.constexpr"
    if a.kind == "scalar" and getattr(a.source[1], "dtype", None) is DataType.Double:
        return "tl.float64"
    return ""


@dataclass
class KernelWriter:
    name: str
    lines: list = field(default_factory=list)
    args: dict = field(default_factory=dict)  # name -> KernelArg, in first-use order
    constexprs: dict = field(default_factory=dict)  # name -> value (block sizes)
    indent: int = 1
    _n: int = 0
    cdtype: str = "tl.float32"  # compute dtype of the op being emitted (read by op emitters)
    fast_exp: bool = False  # the op being emitted may take the fast exp (ir.peephole.fast_exp)
    last: str = ""
    _cse: dict = field(default_factory=dict)
    helpers: dict = field(default_factory=dict)  # name -> source of a @triton.jit function the body calls

    def line(self, text: str):
        self.lines.append("    " * self.indent + text)

    def comment(self, text: str):
        self.line(f"# {text}")

    def tmp(self, expr: str, prefix: str = "t") -> str:
        """Bind ``expr`` to a fresh temporary; returns its name (also kept in ``last``)."""
        if expr.isidentifier():
            self.last = expr
            return expr
        key = (expr, self.indent)
        if key in self._cse:
            self.last = self._cse[key]
            return self.last
        self._n += 1
        name = f"{prefix}{self._n}"
        self.line(f"{name} = {expr}")
        self._cse[key] = name
        self.last = name
        return name

    def forget_scope(self, indent: int):
        """Drop CSE entries bound at ``indent`` or deeper (leaving a loop body)."""
        self._cse = {k: v for k, v in self._cse.items() if k[1] < indent}

    def helper(self, name: str, source: str) -> str:
        """Define the ``@triton.jit`` function ``source`` (named ``name``) next to the
        kernel; returns the name to call it by.  Only the helpers a body calls are
        defined: an unused one is source to parse and cache for nothing."""
        self.helpers.setdefault(name, source)
        return name

    def _helper_sources(self) -> list[str]:
        # the op table's reduction helpers first, in the table's order, then the others as
        # first used: a kernel's text does not depend on which reduction it emitted first
        table = [h.source for h in HELPERS if h.name in self.helpers]
        return table + [text for name, text in self.helpers.items() if name not in {h.name for h in HELPERS}]

    def arg(self, name: str, kind: str, source: tuple) -> str:
        if name not in self.args:
            self.args[name] = KernelArg(name, kind, source)
        return name

    def _decorator(self) -> str:
        # Values that change every launch (random state, user scalars) must not be
        # specialised on, or each new value could compile a new kernel; nor division
        # constants, which change with every extent.
        volatile = [a.name for a in self.args.values() if a.kind in ("rng", "scalar", "divmagic")]
        return f"@triton.jit(do_not_specialize={volatile!r})" if volatile else "@triton.jit"

    def source(self, header_comment: list[str]) -> str:
        # "flag" arguments are compile-time constants the launcher computes per launch
        # (Triton compiles one kernel per value): a tile that divides its extent evenly.
        params = [f"{n}: {_annotation(a)}" if _annotation(a) else n for n, a in self.args.items()]
        params += [f"{k}: tl.constexpr" for k in self.constexprs]
        head = [f"# {c}" for c in header_comment]
        sig = ",\n    ".join(params)
        return "\n".join([
            "import triton",
            "import triton.language as tl",
            "from triton.language.extra import libdevice",
            "",
            *head,
            "",
            "",
            *(line for text in self._helper_sources() for line in (text, "", "")),
            self._decorator(),
            f"def {self.name}(\n    {sig},\n):",
            *self.lines,
            "",
        ])
