"""Lowering: the Triton expression of any IR value at any coordinates.

``Lowering.value(v, index)`` walks the IR backwards from ``v``: loads for fusion
inputs, literals and arguments for scalars, an op's emission (from the op table)
for elementwise ops, coordinate mapping for layout ops, and the tile's reduction
code for reductions.  Results are memoised per (value, index) within the current
scope, so a value used twice at the same coordinates is computed once; a value used
at other coordinates (after a permute, a slice, a shifted cat input) is recomputed
there, which is what makes every layout op free of copies.

Schedulers decide the tile (which coordinates the kernel iterates over); this
module decides no sizes.  It does tell the op table which operands are uniform along
a tile axis the result varies on: a division by such a value is a product with its
reciprocal (``ops._div_uniform``), within an ulp of IEEE division.
"""
from __future__ import annotations

import contextlib
import math
from functools import lru_cache

import torch

from ..errors import Unsupported
from ..ir.dtypes import TRITON_NAME, DataType
from ..ir.ops import OPS
from ..ir.shapes import reshape_groups, slice_shape
from ..ir.values import ScalarVal, TensorVal
from .index import ZERO, Coord, Index, plain_div, ravel, unravel
from .random import distribution, integer_comparison, random_quads, random_value
from .tiles.protocol import Tile


_SAMPLE = {DataType.Bool: True, DataType.Int: 1, DataType.Int32: 1}


@lru_cache(maxsize=None)
def _promote(args: tuple) -> DataType:
    """PyTorch's promotion of (dtype, rank) operands (rank None: a scalar): a scalar operand (a Python
    number to torch) does not raise a tensor's dtype within its category, so
    ``fp32_tensor > 0.1`` compares in fp32, as eager does."""
    from ..ir.dtypes import from_torch

    vals = [torch.empty((1,) * is_t if is_t else (), dtype=d.torch, device="meta") if is_t is not None
            else _SAMPLE.get(d, 1.5) for d, is_t in args]
    if len(vals) == 1:
        return args[0][0]
    r = torch.result_type(vals[0], vals[1])
    for v in vals[2:]:
        r = torch.result_type(torch.empty((1,), dtype=r, device="meta"), v)
    return from_torch(r)


def scalar_cast(code: str, dt: DataType) -> str:
    """Convert a scalar kernel argument: ``tl.cast`` takes a compiled kernel's scalar
    tensor and the interpreter's plain Python number alike (``.to`` only the former)."""
    return f"tl.cast({code}, {TRITON_NAME[dt]})"


def compute_dtype(dt: DataType) -> DataType:
    return DataType.Float if dt in (DataType.Half, DataType.BFloat16) else dt


def _via_16_bit(code: str, inp, common: DataType) -> str:
    """An integer operand of an op whose common dtype is fp16/bf16 (computed in fp32):
    rounded to the common dtype first, as nvFuser's promoteValues and torch cast it
    (70000 is inf in fp16), through fp32 as torch converts.  Float scalars are not
    rounded (nvFuser's optionalCast leaves them), nor bools (0 and 1 are exact)."""
    if isinstance(inp, ScalarVal) and inp.is_constant:
        v = inp.value
        x = torch.tensor(v) if -2**63 <= v < 2**63 else torch.tensor(float(v))
        return literal(x.to(common.torch).item(), DataType.Float)
    if isinstance(inp, ScalarVal):
        return scalar_cast(scalar_cast(scalar_cast(code, DataType.Float), common), DataType.Float)
    return f"({code}).to(tl.float32).to({TRITON_NAME[common]}).to(tl.float32)"


def literal(value, dt: DataType) -> str:
    """A constant in dtype ``dt`` (fp64 constants keep their full precision)."""
    if dt is DataType.Bool:
        return "True" if value else "False"
    if dt.is_int:  # wrapped into the dtype's range, as torch converts a number for an int tensor
        info = torch.iinfo(dt.torch)
        return repr((int(value) - info.min) % (info.max - info.min + 1) + info.min)
    v = float(value)
    if v == 0 and math.copysign(1.0, v) < 0:
        # Triton turns every constant equal to 0 into +0.0 (its null value), compiled and
        # interpreted alike: spell -0.0 as its bits
        bits, width = ("-9223372036854775808", 64) if dt is DataType.Double else ("-2147483648", 32)
        return f"tl.full([], {bits}, tl.int{width}).to(tl.float{width}, bitcast=True)"
    text = repr(v) if v == v and abs(v) != float("inf") else f"float('{v}')"
    if dt is DataType.Double:
        return f"tl.full([], {text}, tl.float64)"
    return text


def bf16_constant(text: str) -> str:
    """A bf16 constant, rounded from fp32: Triton's interpreter has no bf16 constants."""
    return f"tl.full([], {text}, tl.float32).to(tl.bfloat16)"


def _constant_of(v):
    return float(v.value) if isinstance(v, ScalarVal) and v.is_constant else None


class Lowering:
    def __init__(self, w, shapes: dict, inputs_info: dict, tile: Tile, facts: dict, outputs=()):
        self.w = w
        self.outputs = tuple(outputs)  # what the kernel stores (none for a probe walk)
        self._uses = None  # value -> how many times the kernel reads or stores it
        self.shapes = shapes  # Val -> concrete shape
        self.inputs_info = inputs_info  # TensorVal -> {"contiguous": bool}
        self.tile = tile
        self.facts = facts  # per-expr static facts baked into the kernel (normalised slices)
        self.scopes: list[dict] = [{}]
        # Val -> the Index an output met on the walk is stored at: the first reach outside
        # any window (``note_reached``), else the first reach
        self.reached: dict = {}
        self._reached_outside: set = set()
        # Values met below a slice that drops elements (or a cropping pad) cover only a
        # window of themselves: ``windowed`` unless also met outside any (``covered``).
        self.window_depth = 0
        self.windowed: set = set()
        self.covered: set = set()
        # elementwise expr -> the tile axes its results vary along, over all its uses
        # (read through a ``tiles.flat.ProbeTile`` by the pointwise scheduler)
        self.expr_axes: dict = {}
        # fusion input -> per dim, the tile axes its coordinate varied along (the probe's)
        self.load_axes: dict = {}
        # a uniform [0, 1) draw's value -> its 24-bit integers (``random.random_value``)
        self.random_ints: dict = {}

    # -- scopes (loop bodies) -------------------------------------------------------
    def push(self):
        self.scopes.append({})

    def pop(self):
        """Leave a loop body; call before dedenting."""
        self.scopes.pop()
        self.w.forget_scope(self.w.indent)

    @contextlib.contextmanager
    def apart(self):
        """A block whose values are all computed in it, none taken from the walk around
        it (``emit._store_own_rows``: other rows than the walk's)."""
        saved, self.scopes = self.scopes, [{}]
        try:
            yield
        finally:
            self.scopes = saved
            self.w.forget_scope(self.w.indent)

    def remember(self, v, idx: Index, res):
        self.scopes[-1][(v.index, idx.key())] = res

    def lookup(self, v, idx: Index):
        key = (v.index, idx.key())
        for s in reversed(self.scopes):
            if key in s:
                return s[key]
        return None

    # -- extents, indices -------------------------------------------------------------
    def ext(self, v: TensorVal, d: int) -> str:
        if self.shapes[v][d] == 1:
            return "1"
        return self.w.arg(f"{v.name}_s{d}", "size", ("size", v, d))

    def extents(self, v) -> list[str]:
        return [self.ext(v, d) for d in range(len(self.shapes[v]))]

    def divider(self, axes):
        """``index.unravel``'s division for an int32 index varying along ``axes``
        (``divide``); None for int64 indices (Triton's ``//`` and ``%``)."""
        if self.tile.int64:
            return None
        on_vector_axis = not self.tile.divides_fast(axes)
        return lambda code, divisors: self.divide(code, divisors, on_vector_axis)

    def divide(self, code: str, divisors: list[str], on_vector_axis: bool = False) -> str:
        """``code // prod(divisors)`` for a non-negative int32 index and extents that are
        size arguments: ``(code * M) >> P`` with ``index.div_magic``'s constants, which
        the launcher computes once per shape.  Along the tile's contiguous axis
        (``tile.divides_fast``) only when the divisor is not a multiple of 16 at the
        shapes planned for: there Triton's alignment analysis reads ``x // s`` and
        ``x % s`` for sizes it knows to be multiples of 16 and keeps loads vectorized
        (a bias + GELU's bias index ``x % 4096`` was slower with the multiply:
        docs/TUNING.md#index-math); other divisors allow no vector access anyway.  Any divisor gives
        correct results either way: the choice is only speed."""
        sources = [self.w.args[d].source if d in self.w.args else None for d in divisors]
        if any(s is None or s[0] != "size" for s in sources):
            return plain_div(code, divisors)
        if on_vector_axis and math.prod(self.shapes[s[1]][s[2]] for s in sources) % 16 == 0:
            return plain_div(code, divisors)
        dims = tuple((s[1], s[2]) for s in sources)
        key = "_".join(divisors)
        m = self.w.arg(f"{key}_dm", "divmagic", ("divmagic", dims, 0))
        p = self.w.arg(f"{key}_dp", "divmagic", ("divmagic", dims, 1))
        return f"((({code}).to(tl.uint64) * {m}) >> {p}).to(tl.int32)"

    def normalize(self, v, idx: Index) -> Index:
        shape = self.shapes[v]
        coords = tuple(ZERO if shape[d] == 1 else c for d, c in enumerate(idx.coords))
        return Index(coords, idx.linear, idx.pred, idx.pred_each, idx.dropped)

    def linear_of(self, v, idx: Index) -> Coord:
        if idx.linear is not None:
            return idx.linear
        lin = ravel(idx.coords, self.extents(v))
        return Coord(self.w.tmp(lin.code, "i"), lin.axes) if not lin.code.isidentifier() and lin.code != "0" else lin

    def with_coords(self, idx: Index, coords, linear=None, dropped=()) -> Index:
        return Index(tuple(coords), linear, idx.pred, idx.pred_each, idx.dropped + tuple(dropped))

    # -- the walk -----------------------------------------------------------------------
    def value(self, v, idx: Index | None):
        """(Triton expression, tile axes it varies along) of ``v`` at ``idx``."""
        if isinstance(v, ScalarVal):
            return self.scalar(v)
        idx = self.normalize(v, idx)
        (self.windowed if self.window_depth else self.covered).add(v)
        self.note_reached(v, idx)
        hit = self.lookup(v, idx)
        if hit is not None:
            return hit
        if v.definition is None:
            res = self.load(v, idx)
        else:
            res = self.expr_value(v, idx)
        self.remember(v, idx, res)
        return res

    def note_reached(self, v, idx: Index):
        """Remember where ``v`` was met, for storing it if it is an output.  A reach
        below a window (a slice or cropping pad of a cat, say) covers only part of ``v``
        and its predicates may hold nowhere: a value met both inside and outside one is
        stored at its first reach outside (a fuzzed fusion stored exp(x) under the
        never-true predicate of the cat half its first reach came through)."""
        if v in self._reached_outside:
            return
        if not self.window_depth:
            self.reached[v] = idx
            self._reached_outside.add(v)
        else:
            self.reached.setdefault(v, idx)

    def clear_reached(self):
        """Forget the reaches (a new chunk's walk starts)."""
        self.reached.clear()
        self._reached_outside.clear()

    def scalar(self, v: ScalarVal):
        if v.is_constant:
            return literal(v.value, v.dtype), frozenset()
        return self.w.arg(v.name, "scalar", ("scalar", v)), frozenset()

    def load(self, v: TensorVal, idx: Index):
        w = self.w
        seen = self.load_axes.get(v)
        here = tuple(c.axes for c in idx.coords)
        self.load_axes[v] = here if seen is None else tuple(a | b for a, b in zip(seen, here))
        ptr = w.arg(f"{v.name}_ptr", "ptr", ("tensor", v))
        info = self.inputs_info[v]
        if info["contiguous"]:
            off = idx.linear if idx.linear is not None else ravel(idx.coords, self.extents(v))
        else:
            terms, axes = [], frozenset()
            for d, c in enumerate(idx.coords):
                if c.code == "0":
                    continue
                st = w.arg(f"{v.name}_st{d}", "stride", ("stride", v, d))
                terms.append(f"{c.code} * {st}")
                axes |= c.axes
            off = Coord(" + ".join(terms) if terms else "0", axes)
        if not off.axes:  # one element for every lane (a 0-d or all-broadcast tensor): always in bounds
            return w.tmp(f"tl.load({ptr} + {off.code})", "x"), frozenset()
        # A predicate guards one coordinate (a pad's, a cat's, a gather's index) and the
        # value read where it fails is replaced (tl.where) above the load.  If the
        # offset does not vary along the predicate's axes, it does not use that
        # coordinate and the address is valid without it: a per-row value under a pad
        # of the columns is read once per row, not once per element.
        preds = tuple(p for p, a in zip(idx.pred, idx.pred_each, strict=True) if a <= off.axes)
        mask = self.tile.mask(off.axes, preds)
        # A row loaded one iteration ahead (``tiles.rows``, prefetch) is a loop-carried value.
        carried = getattr(self.tile, "carried_load", None)
        held = carried(w, ptr, off.code, mask, v.dtype) if carried is not None else None
        if held is not None:
            return held, off.axes
        m = f", mask={mask}" if mask else ""
        return w.tmp(f"tl.load({ptr} + {off.code}{m}{self.tile.load_hint(off.axes)})", "x"), off.axes

    def expr_value(self, v: TensorVal, idx: Index):
        e = v.definition
        kind = OPS[e.op].kind
        handler = getattr(self, f"lower_{kind}", None)
        if handler is None:
            raise Unsupported(f"no lowering for op {e.op}", "no_lowering")
        return handler(e, v, idx)

    # -- elementwise ----------------------------------------------------------------------
    def bcast_index(self, idx: Index, out_shape, in_shape) -> Index:
        off = len(out_shape) - len(in_shape)
        coords, dropped = [], []
        for d in range(len(out_shape)):
            c = idx.coords[d]
            if d < off:
                if out_shape[d] != 1:
                    dropped.append(c)
                continue
            if in_shape[d - off] == 1:
                coords.append(ZERO)
                if out_shape[d] != 1:
                    dropped.append(c)
            else:
                coords.append(c)
        same = tuple(out_shape) == tuple(in_shape)
        return self.with_coords(idx, coords, idx.linear if same else None, dropped)

    def lower_unary(self, e, v, idx):
        return self.elementwise(e, v, idx)

    lower_binary = lower_ternary = lower_cast = lower_unary

    def elementwise(self, e, v, idx):
        w = self.w
        row = OPS[e.op]
        out_shape = self.shapes[v]
        if (shifted := self._shifted_tanh(e, v, idx)) is not None:
            return shifted
        args, arg_axes = [], []
        for inp in e.inputs:
            if isinstance(inp, TensorVal):
                code, ax = self.value(inp, self.bcast_index(idx, out_shape, self.shapes[inp]))
            else:
                code, ax = self.scalar(inp)
            args.append((code, inp))
            arg_axes.append(ax)
        axes = frozenset().union(*arg_axes)
        self.expr_axes[e] = self.expr_axes.get(e, frozenset()) | axes
        if e.op == "cast":
            code, inp = args[0]
            target = e.attrs["dtype"]
            if inp.dtype is target:
                return code, axes
            if target is DataType.BFloat16 and inp.dtype not in (DataType.Float, DataType.Half):
                # via fp32, as torch converts; Triton's interpreter turns ints and fp64 into
                # bf16 bits directly (NaN and garbage)
                code = f"({code}).to(tl.float32)"
            return w.tmp(f"({code}).to({TRITON_NAME[target]})"), axes
        if row.compute == "args":
            common = _promote(tuple((a.dtype, min(a.rank, 1) if isinstance(a, TensorVal) else None)
                                    for _, a in args))
        else:
            common = v.dtype
        cdt = compute_dtype(common)
        conv = []
        for i, (code, inp) in enumerate(args):
            want = DataType.Bool if (e.op == "where" and i == 0) else cdt
            if want is not common and want is cdt and inp.dtype.is_int:
                conv.append(_via_16_bit(code, inp, common))
            elif isinstance(inp, ScalarVal) and inp.is_constant:
                conv.append(literal(inp.value, want))
            elif inp.dtype is want:
                conv.append(code)
            elif want is DataType.Bool:
                conv.append(f"({code} != 0)")
            elif isinstance(inp, ScalarVal):
                conv.append(scalar_cast(code, want))
            else:
                conv.append(f"({code}).to({TRITON_NAME[want]})")
        w.cdtype = TRITON_NAME[cdt]
        try:
            if e.op == "clamp":
                it = iter(conv[1:])
                lo = next(it) if e.attrs["has_min"] else None
                hi = next(it) if e.attrs["has_max"] else None
                code = row.emit(w, conv[0], lo, hi)
            elif (e.op in ("gt", "ge", "lt", "le") and (cmp := self._random_comparison(e, conv)) is not None):
                code = cmp
            elif row.emit_uniform_rhs is not None and arg_axes[1] < axes:
                code = row.emit_uniform_rhs(w, *conv, constant=_constant_of(e.inputs[1]))
            else:
                code = row.emit(w, *conv)
        except NotImplementedError as err:
            raise Unsupported(f"{e.op}: {err}", "op_form") from None
        result_cdt = DataType.Bool if row.compute == "args" else cdt
        if e.op in ("where",):
            result_cdt = cdt
        values = e.inputs[1:] if e.op == "where" else e.inputs
        if v.dtype is not result_cdt or (v.dtype.is_int and v.dtype is not DataType.Int32
                                         and all(isinstance(a, ScalarVal) and a.is_constant for a in values)):
            # (a result made of constants alone has the constants' type, int32)
            code = f"({code}).to({TRITON_NAME[v.dtype]})"
        return w.tmp(code), axes

    def uses(self, v) -> int:
        """How many exprs of the kernel read ``v``, plus one if it stores ``v``."""
        if self._uses is None:
            self._uses = {}
            if self.outputs:
                for x in self.outputs[0].fusion.live_exprs(list(self.outputs)):
                    for i in x.inputs:
                        self._uses[i] = self._uses.get(i, 0) + 1
                for o in self.outputs:
                    self._uses[o] = self._uses.get(o, 0) + 1
        return self._uses.get(v, 0)

    def _shifted_tanh(self, e, v, idx):
        """``1 + tanh(u)`` as ``2 / (1 + e^-2u)`` and ``1 - tanh(u)`` as ``2 / (1 +
        e^2u)``, in fp32, where the kernel uses that tanh nowhere else (GELU-tanh's
        ``0.5 x (1 + tanh(u))``); None otherwise.  One exponential and one division
        instead of a tanh and an add, about as fast as the kernel with the tanh deleted
        (docs/TUNING.md#shifted-tanh).  It is also the more accurate form: where tanh(u) nears -1, ``1 + tanh(u)`` keeps
        few of its bits.  The tanh is not emitted."""
        if e.op not in ("add", "sub") or v.dtype is not DataType.Float:
            return None
        orders = ((e.inputs[0], e.inputs[1]), (e.inputs[1], e.inputs[0]))
        for one, t in orders if e.op == "add" else orders[:1]:  # tanh(u) - 1 is not one of them
            if not (isinstance(one, ScalarVal) and one.is_constant and type(one.value) in (int, float)
                    and one.value == 1 and isinstance(t, TensorVal) and t.definition is not None
                    and t.definition.op == "tanh" and t.dtype is DataType.Float):
                continue
            u = t.definition.inputs[0]
            if not isinstance(u, TensorVal) or u.dtype is not DataType.Float or self.uses(t) != 1:
                return None
            at_t = self.bcast_index(idx, self.shapes[v], self.shapes[t])
            code, axes = self.value(u, self.bcast_index(at_t, self.shapes[t], self.shapes[u]))
            # 1 + tanh(u) = 2 / (1 + e^(-2u)); 1 - tanh(u) = 2 / (1 + e^(2u)); 2 log2(e) = 2.885...
            factor = "-2.8853900817779268" if e.op == "add" else "2.8853900817779268"
            self.expr_axes[e] = self.expr_axes.get(e, frozenset()) | axes
            return self.w.tmp(f"2.0 / (1.0 + tl.exp2({code} * {factor}))"), axes
        return None

    def _random_comparison(self, e, conv):
        """A uniform draw compared with a finite constant, as a test of the draw's
        integers (``random.integer_comparison``); None otherwise."""
        for i in (0, 1):
            ints = self.random_ints.get(conv[i])
            other = e.inputs[1 - i]
            if ints is not None and isinstance(other, ScalarVal) and other.is_constant \
                    and isinstance(other.value, (int, float)) and not isinstance(other.value, bool) \
                    and math.isfinite(other.value) and abs(other.value) < 2.0**100:
                return integer_comparison(e.op, ints, float(other.value), random_left=i == 0)
        return None

    # -- layout ops -------------------------------------------------------------------------
    def lower_broadcast_in_dim(self, e, v, idx):
        x = e.inputs[0]
        in_shape, out_shape = self.shapes[x], self.shapes[v]
        bdims = e.attrs["broadcast_dims"]
        coords = []
        for i, d in enumerate(bdims):
            coords.append(ZERO if in_shape[i] == 1 else idx.coords[d])
        kept = {d for i, d in enumerate(bdims) if in_shape[i] != 1}
        dropped = [idx.coords[d] for d in range(len(out_shape)) if d not in kept and out_shape[d] != 1]
        same = self._numel(in_shape) == self._numel(out_shape)
        return self.value(x, self.with_coords(idx, coords, idx.linear if same else None, dropped))

    @staticmethod
    def _numel(shape):
        n = 1
        for s in shape:
            n *= s
        return n

    def lower_reshape(self, e, v, idx):
        """Each group of dims the reshape merges or splits (``shapes.reshape_groups``) is
        re-ravelled on its own: [B, S, 768] -> [B, S, 12, 64] costs ``c // 64`` and
        ``c % 64`` of the last coordinate only, which varies along one tile axis, where
        going through the linear index divides it, at every element, by B*S*768 and
        S*768 too (BERT's Q/K/V bias gradients: 38% of copy bandwidth)."""
        x = e.inputs[0]
        groups = reshape_groups(self.shapes[x], self.shapes[v])
        if groups is None:  # an empty tensor: the linear index, as it comes
            lin = self.linear_of(v, idx)
            return self.value(x, self.with_coords(idx, unravel(lin, self.extents(x), self.divider), lin))
        x_ext, v_ext = self.extents(x), self.extents(v)
        coords = [ZERO] * len(x_ext)
        for ins, outs in groups:
            if len(outs) == 1:
                lin = idx.coords[outs[0]]
            else:
                lin = ravel([idx.coords[o] for o in outs], [v_ext[o] for o in outs])
                if not lin.code.isidentifier():
                    lin = Coord(self.w.tmp(lin.code, "i"), lin.axes)
            parts = [lin] if len(ins) == 1 else unravel(lin, [x_ext[i] for i in ins], self.divider)
            for d, c in zip(ins, parts):
                coords[d] = c
        return self.value(x, self.with_coords(idx, coords, idx.linear))

    def lower_permute(self, e, v, idx):
        x = e.inputs[0]
        dims = e.attrs["dims"]
        coords = [None] * len(dims)
        for k, d in enumerate(dims):
            coords[d] = idx.coords[k]
        ident = list(dims) == sorted(dims)
        return self.value(x, self.with_coords(idx, coords, idx.linear if ident else None))

    def lower_squeeze(self, e, v, idx):
        x = e.inputs[0]
        it = iter(idx.coords)
        coords = [ZERO if d in e.attrs["dims"] else next(it) for d in range(len(self.shapes[x]))]
        return self.value(x, self.with_coords(idx, coords, idx.linear))

    def lower_slice(self, e, v, idx):
        x = e.inputs[0]
        _, norm = slice_shape(e.op, self.shapes[x], e.attrs["starts"], e.attrs["ends"], e.attrs["steps"])
        coords = []
        for c, (a, _, s) in zip(idx.coords, norm):
            code = c.code if s == 1 else f"{c.code} * {s}"
            code = code if a == 0 else f"({code} + {a})"
            coords.append(Coord(code, c.axes) if c.code != "0" or a else ZERO)
        return self.in_window(self.shapes[v] != self.shapes[x], x, self.with_coords(idx, coords))

    def in_window(self, windowed: bool, x, idx):
        """``self.value(x, idx)``, counted as a partial walk of ``x`` when ``windowed``."""
        self.window_depth += windowed
        try:
            return self.value(x, idx)
        finally:
            self.window_depth -= windowed

    def lower_pad(self, e, v, idx):
        x, pad_value = e.inputs
        widths = e.attrs["pad_widths"]
        rank = len(self.shapes[x])
        coords, preds, axes = list(idx.coords), [], frozenset()
        guarded = idx
        for k in range(len(widths) // 2):
            d = rank - 1 - k
            lo = widths[2 * k]
            c = idx.coords[d]
            shifted = Coord(c.code if lo == 0 else f"({c.code} - {lo})", c.axes)
            coords[d] = shifted
            preds.append(f"({shifted.code} >= 0) & ({shifted.code} < {self.ext(x, d)})")
            guarded = guarded.guarded(preds[-1], c.axes)
            axes |= c.axes
        inner = self.with_coords(guarded, coords)
        val, vax = self.in_window(any(wd < 0 for wd in widths), x, inner)
        pv, _ = self.scalar(pad_value)
        cond = self.w.tmp(" & ".join(f"({p})" for p in preds), "m") if preds else "True"
        pv = literal(pad_value.value, v.dtype) if pad_value.is_constant else scalar_cast(pv, v.dtype)
        if pad_value.is_constant and v.dtype is DataType.BFloat16:
            pv = bf16_constant(pv)
        return self.w.tmp(f"tl.where({cond}, {val}, {pv})"), vax | axes

    def lower_cat(self, e, v, idx):
        dim = e.attrs["dim"]
        c = idx.coords[dim]
        start = "0"
        parts = []
        for x in e.inputs:
            ext = self.ext(x, dim)
            lo, hi = start, (ext if start == "0" else f"({start} + {ext})")
            pred = self.w.tmp(f"({c.code} >= {lo}) & ({c.code} < {hi})", "m")
            coords = list(idx.coords)
            coords[dim] = Coord(c.code if start == "0" else f"({c.code} - {start})", c.axes)
            inner = self.with_coords(idx.guarded(pred, c.axes), coords)
            val, ax = self.value(x, inner)
            if x.dtype is not v.dtype:
                val = f"({val}).to({TRITON_NAME[v.dtype]})"
            parts.append((pred, val, ax))
            start = hi
        code = parts[-1][1]
        axes = c.axes
        for pred, val, ax in reversed(parts[:-1]):
            code = f"tl.where({pred}, {val}, {code})"
            axes |= ax
        return self.w.tmp(code), axes | parts[-1][2]

    def lower_gather(self, e, v, idx):
        """``x`` read where the index says along ``dim``: the output's coordinates with
        that dim's replaced by the index value (index_select: the index at the
        output's coordinate in ``dim``).  Out-of-range indices read nothing: NaN."""
        x, index = e.inputs
        if not x.dtype.is_float:
            raise Unsupported(f"{e.op} of a {x.dtype} tensor runs in torch", "dtype_in_torch")
        rank = len(self.shapes[x])
        d = e.attrs["dim"] % max(rank, 1)
        if e.op == "index_select":
            at = Index((idx.coords[d],) if len(self.shapes[index]) == 1 else (), None, idx.pred, idx.pred_each)
        else:
            at = Index(idx.coords, idx.linear if self.shapes[index] == self.shapes[v] else None, idx.pred,
                       idx.pred_each)
        ival, iax = self.value(index, self.normalize(index, at))
        w = self.w
        valid = w.tmp(f"({ival} >= 0) & ({ival} < {self.ext(x, d)})", "m")
        itype = "tl.int64" if self.tile.int64 else "tl.int32"
        safe = w.tmp(f"tl.where({valid}, {ival}, 0).to({itype})", "i")
        coords = list(idx.coords)
        coords[d] = Coord(safe, iax)
        inner = self.with_coords(idx.guarded(valid, iax), coords)
        val, vax = self.value(x, inner)
        nan = bf16_constant("float('nan')") if x.dtype is DataType.BFloat16 else "float('nan')"
        return w.tmp(f"tl.where({valid}, {val}, {nan})"), vax | iax

    # -- creation -----------------------------------------------------------------------------
    def lower_full(self, e, v, idx):
        fill = e.inputs[0]
        dt = TRITON_NAME[v.dtype]
        if fill.is_constant:
            value = fill.value
            text = repr(bool(value)) if v.dtype is DataType.Bool else (repr(int(value)) if v.dtype.is_int else
                                                                        literal(float(value), DataType.Float))
            if v.dtype is DataType.BFloat16:
                return bf16_constant(text), frozenset()
            return f"tl.full([], {text}, {dt})", frozenset()
        code, _ = self.scalar(fill)
        return self.w.tmp(f"tl.full([], 0, {dt}) + {scalar_cast(code, v.dtype)}"), frozenset()

    def lower_iota(self, e, v, idx):
        start, step = e.inputs
        c = idx.coords[0]
        cdt = compute_dtype(v.dtype)
        s0 = literal(start.value, cdt) if start.is_constant else scalar_cast(self.scalar(start)[0], cdt)
        s1 = literal(step.value, cdt) if step.is_constant else scalar_cast(self.scalar(step)[0], cdt)
        code = f"({c.code}).to({TRITON_NAME[cdt]}) * {s1} + {s0}"
        if cdt is not v.dtype:
            code = f"({code}).to({TRITON_NAME[v.dtype]})"
        return self.w.tmp(code), c.axes

    def lower_random(self, e, v, idx):
        w = self.w
        a = e.attrs
        lin = self.linear_of(v, idx)
        rest = e.inputs[1:] if a.get("like") else e.inputs[2:]
        if a.get("like"):
            p0, p1 = 0.0, 1.0
        else:
            p0, p1 = (float(p.value) if p.is_constant else self.scalar(p)[0] for p in e.inputs[:2])
        if a["has_seed"]:
            seed, off = (self.scalar(s)[0] for s in rest)
            seed, off = scalar_cast(seed, DataType.Int), scalar_cast(off, DataType.Int)
            seed_lo = w.tmp(f"{seed} & 0xFFFFFFFF", "s")
            seed_hi = w.tmp(f"({seed} >> 32) & 0xFFFFFFFF", "s")
            off_lo = w.tmp(f"{off} & 0xFFFFFFFF", "s")
            off_hi = w.tmp(f"({off} >> 32) & 0xFFFFFFFF", "s")
        else:
            # Seed and offset arrive as eight 16-bit pieces: Triton types a Python int
            # argument by its range, so full 32-bit words would change the signature
            # (and recompile) as the generator's state moves.
            p = [w.arg(f"rng{v.index}_{i}", "rng", ("rng", e, i)) for i in range(8)]
            seed_lo, seed_hi, off_lo, off_hi = (
                w.tmp(f"({p[2 * i]}.to(tl.uint32) << 16) | {p[2 * i + 1]}.to(tl.uint32)", "s") for i in range(4))
        quads = self.tile.quads(lin)
        if quads is not None:
            sub, shape = quads
            z = random_quads(w, a["dist"], sub, shape, seed_lo, seed_hi, off_lo, off_hi, self.random_ints)
        else:
            z = random_value(w, a["dist"], lin.code, seed_lo, seed_hi, off_lo, off_hi, self.random_ints)
        return distribution(w, a["dist"], z, p0, p1, v.dtype), lin.axes

    # -- reductions are the tile's business -------------------------------------------
    def lower_reduction(self, e, v, idx):
        return self.tile.reduction(self, e, v, idx)

    lower_var_mean = lower_reduction
