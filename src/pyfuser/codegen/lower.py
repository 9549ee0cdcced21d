"""Lowering: the Triton expression of any IR value at any coordinates.

``Lowering.value(v, index)`` walks the IR backwards from ``v``: loads for fusion
inputs (``loads.py``), literals and arguments for scalars, an op's emission (from the
op table) for elementwise ops, coordinate mapping for layout ops (``index_maps.py``),
draws for random ops (``random.py``), and the tile's reduction code for reductions.
Results are memoised per (value, index) within the current scope, so a value used
twice at the same coordinates is computed once; a value used at other coordinates
(after a permute, a slice, a shifted cat input) is recomputed there, which is what
makes every layout op free of copies.  The dtypes an op computes in and the spelling
of constants are ``dtype_policy.py``'s; the peephole rewrites (``ir.peephole``) are
found before the walk and emitted here.

Schedulers decide the tile (which coordinates the kernel iterates over); this
module decides no sizes.  It does tell the op table which operands are uniform along
a tile axis the result varies on: a division by such a value is a product with its
reciprocal (``ops._div_uniform``), within an ulp of IEEE division.
"""
from __future__ import annotations

import contextlib

from ..errors import Unsupported
from ..ir import peephole
from ..ir.dtypes import TRITON_NAME, DataType
from ..ir.op_emit import ex2_approx, is_number
from ..ir.ops import OPS
from ..ir.values import ScalarVal, TensorVal
from .dtype_policy import bf16_constant, compute_dtype, constant_of, convert, literal, promote, scalar_cast, via_16_bit
from .index import Index
from .index_maps import IndexMaps
from .loads import Loads
from .random import integer_comparison, lower_random
from .tiles.protocol import Tile

# the dtype policy's names that tiles and schedulers import from here
__all__ = ["Lowering", "bf16_constant", "compute_dtype", "literal", "scalar_cast"]


class Lowering(IndexMaps, Loads):
    def __init__(self, w, shapes: dict, inputs_info: dict, tile: Tile, values: dict, outputs=()):
        self.w = w
        self.outputs = tuple(outputs)  # what the kernel stores (none for ``variation``'s walk)
        self.shapes = shapes  # Val -> concrete shape
        self.inputs_info = inputs_info  # TensorVal -> {"contiguous": bool}
        self.tile = tile
        self.values = values  # Segment.values: the runtime slice indices and pad widths
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
        # a uniform [0, 1) draw's value -> its 24-bit integers (``random.random_value``)
        self.random_ints: dict = {}
        # expr -> its peephole rewrite, found before the walk (``ir.peephole.find``)
        self.rewrites = peephole.find(self.outputs)

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

    def expr_value(self, v: TensorVal, idx: Index):
        e = v.definition
        kind = OPS[e.op].kind
        handler = getattr(self, f"lower_{kind}", None)
        if handler is None:
            raise Unsupported(f"no lowering for op {e.op}", "no_lowering")
        return handler(e, v, idx)

    # -- elementwise ----------------------------------------------------------------------
    def lower_unary(self, e, v, idx):
        return self.elementwise(e, v, idx)

    lower_binary = lower_ternary = lower_cast = lower_unary

    def elementwise(self, e, v, idx):
        w = self.w
        row = OPS[e.op]
        out_shape = self.shapes[v]
        if (site := self.rewrites.shifted_tanh.get(e)) is not None:
            return self.shifted_tanh(site, e, v, idx)
        args, arg_axes = [], []
        for inp in e.inputs:
            if isinstance(inp, TensorVal):
                code, ax = self.value(inp, self.bcast_index(idx, out_shape, self.shapes[inp]))
            else:
                code, ax = self.scalar(inp)
            args.append((code, inp))
            arg_axes.append(ax)
        axes = frozenset().union(*arg_axes)
        if e.op == "cast":
            code, inp = args[0]
            target = e.attrs["dtype"]
            if inp.dtype is target:
                return code, axes
            if ((target is DataType.BFloat16 and inp.dtype not in (DataType.Float, DataType.Half))
                    or (target.is_fp8 or inp.dtype.is_fp8) and DataType.Float not in (target, inp.dtype)):
                # via fp32, as torch converts (to fp8 and bf16 from a float); Triton's
                # interpreter turns ints and fp64 into bf16 bits directly (NaN and
                # garbage), and Triton converts fp8 from and to fp32 and fp16 alone
                code = convert(code, "tl.float32")
            return w.tmp(convert(code, TRITON_NAME[target])), axes
        if row.compute == "args":
            common = promote(tuple((a.dtype, min(a.rank, 1) if isinstance(a, TensorVal) else None)
                                    for _, a in args))
        else:
            common = v.dtype
        cdt = compute_dtype(common)
        conv = []
        for i, (code, inp) in enumerate(args):
            want = DataType.Bool if (e.op == "where" and i == 0) else cdt
            if want is not common and want is cdt and inp.dtype.is_int:
                conv.append(via_16_bit(code, inp, common))
            elif isinstance(inp, ScalarVal) and inp.is_constant:
                conv.append(literal(inp.value, want))
            elif inp.dtype is want:
                conv.append(code)
            elif want is DataType.Bool:
                conv.append(f"({code} != 0)")
            elif isinstance(inp, ScalarVal):
                conv.append(scalar_cast(code, want))
            else:
                conv.append(convert(code, TRITON_NAME[want]))
        w.cdtype = TRITON_NAME[cdt]
        w.fast_exp = e in self.rewrites.fast_exp
        try:
            if e.op == "clamp":
                it = iter(conv[1:])
                lo = next(it) if e.attrs["has_min"] else None
                hi = next(it) if e.attrs["has_max"] else None
                code = row.emit(w, conv[0], lo, hi)
            elif (cmp := self.draw_comparison(e, conv)) is not None:
                code = cmp
            elif (cmp := self.narrow_comparison(e, conv, arg_axes, axes)) is not None:
                code = cmp
            elif row.emit_uniform_rhs is not None and arg_axes[1] < axes:
                code = row.emit_uniform_rhs(w, *conv, constant=constant_of(e.inputs[1]))
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
            code = convert(code, TRITON_NAME[v.dtype])
        return w.tmp(code), axes

    def shifted_tanh(self, site: peephole.ShiftedTanh, e, v, idx):
        """``1 +- tanh(u)`` as ``2 / (1 + exp2(-+2 log2(e) u))`` (``peephole.shifted_tanh``);
        the tanh is not emitted."""
        t, u = site.tanh, site.u
        at_t = self.bcast_index(idx, self.shapes[v], self.shapes[t])
        code, axes = self.value(u, self.bcast_index(at_t, self.shapes[t], self.shapes[u]))
        # 1 + tanh(u) = 2 / (1 + e^(-2u)); 1 - tanh(u) = 2 / (1 + e^(2u)); 2 log2(e) = 2.885...
        factor = "-2.8853900817779268" if site.sign > 0 else "2.8853900817779268"
        return self.w.tmp(f"2.0 / (1.0 + {ex2_approx(self.w, f'{code} * {factor}')})"), axes

    def draw_comparison(self, e, conv):
        """A comparison of a uniform draw with a constant (``peephole.draw_comparisons``) as
        a test of the draw's integers, where the operand's code is a draw whose
        integers the walk noted (``random.random_value``); None otherwise."""
        site = self.rewrites.draw_comparisons.get(e)
        ints = self.random_ints.get(conv[site.operand]) if site is not None else None
        if ints is None:
            return None
        return integer_comparison(e.op, ints, site.constant, random_left=site.operand == 0)

    def narrow_comparison(self, e, conv, arg_axes, axes):
        """An int64 iota compared with an int64 tensor as 32-bit integers
        (``peephole.narrow_comparisons``), where that tensor is uniform along an axis
        the comparison varies on; None otherwise."""
        site = self.rewrites.narrow_comparisons.get(e)
        if site is None or not arg_axes[1 - site.iota] < axes:
            return None
        x = conv[1 - site.iota]
        narrow = self.w.tmp(f"tl.where(({x} >= 0) & ({x} < 2147483648), {x}, -1).to(tl.int32)")
        return f"(({conv[site.iota]}).to(tl.int32) {'==' if e.op == 'eq' else '!='} {narrow})"

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
        code = f"{convert(c.code, TRITON_NAME[cdt])} * {s1} + {s0}"
        if cdt is not v.dtype:
            code = convert(code, TRITON_NAME[v.dtype])
        return self.w.tmp(code), c.axes

    def lower_random(self, e, v, idx):
        return lower_random(self, e, v, idx)

    # -- reductions are the tile's business -------------------------------------------
    def lower_reduction(self, e, v, idx):
        return self.tile.reduction(self, e, v, idx)

    lower_var_mean = lower_reduction
