"""``fd.ops`` builders of nvFuser's ops on the slow path (``ir.host_rows``), and ``welford``.

Scans, sorts, scatter, complex numbers, attention and grouped matmuls record host
exprs (torch between kernels); ``welford`` records a reduction that the var_mean
machinery computes in a generated kernel.  Arguments follow nvFuser's bindings
(``python_direct/ops.cpp``): a Python int or a constant scalar where nvFuser takes an
int, a scalar (constant or runtime) where it takes a Val.  ``Operators`` derives from
``HostOps``.
"""
from __future__ import annotations

from ..errors import DefinitionError, DefinitionTypeError
from ..ir import shapes as S
from ..ir.dtypes import DataType
from ..ir.host_rows import UNSUPPORTED
from ..ir.values import ScalarVal, TensorVal, Val

_COMPLEX_OF = {DataType.Float: DataType.ComplexFloat, DataType.Double: DataType.ComplexDouble}
_REAL_OF = {v: k for k, v in _COMPLEX_OF.items()}


def _spell(x) -> str:
    if isinstance(x, Val):
        return x.name
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_spell(v) for v in x) + "]"
    return repr(x)


def _int(op, arg, x) -> int:
    if isinstance(x, ScalarVal) and x.is_constant:
        x = x.value
    if not isinstance(x, int) or isinstance(x, bool):
        raise DefinitionTypeError(f"{op}: {arg} must be an int, got {x!r}")
    return x


def _flag(op, arg, x) -> bool:
    if isinstance(x, ScalarVal) and x.is_constant:
        x = x.value
    if not isinstance(x, bool):
        raise DefinitionTypeError(f"{op}: {arg} must be a bool, got {x!r}")
    return x


class HostOps:
    """nvFuser's ops that pyfuser runs in torch (and ``welford``)."""

    def _host_multi(self, op, tensors, names, attrs, dtypes, spelling):
        vals = [self._b.check_val(op, n, t, tensor=True) for t, n in zip(tensors, names)]
        return self._record(op, vals, attrs, dtypes, spelling)

    def _record_host(self, op, tensors, attrs, dtypes, spelling):
        """Record a host expr; the runtime scalars among ``attrs`` are read as inputs too
        (the reference takes their values from there)."""
        runtime = [x for x in attrs.values() if isinstance(x, ScalarVal) and not x.is_constant]
        return self._record(op, list(tensors) + runtime, attrs, dtypes, spelling)

    def _scalar_attr(self, op, arg, x):
        """A Val argument as an attribute: None, a Python number or a scalar of this fusion."""
        if x is None:
            return None
        return self._b.check_val(op, arg, x, tensor=False)

    # -- welford: a reduction in a generated kernel ------------------------------------
    def welford(self, arg, dims, keepdim=False):
        """(avg, var_sum, n) over ``dims``: the mean, the sum of squared deviations and
        the count (Int), as nvFuser's WelfordRaw returns them; avg and var_sum keep the
        input's dtype.  ``keepdim`` is pyfuser's extension (nvFuser has none)."""
        b = self._b
        t = b.check_val("welford", "arg", arg, tensor=True)
        if not t.dtype.is_float:
            raise DefinitionError(f"welford: arg must have a floating dtype, got {t.dtype}")
        if t.rank == 0 or not isinstance(dims, (list, tuple)) or not dims:
            raise DefinitionError(f"welford: needs a tensor of rank >= 1 and a non-empty list of dims, got rank "
                                  f"{t.rank} and dims {dims!r}")
        d = tuple(sorted(S.norm_dims("welford", "dims", dims, t.rank)))
        attrs = {"dims": d, "correction": 0, "keepdim": _flag("welford", "keepdim", keepdim)}
        sp = f"{t.name}, dims={_spell(list(d))}" + (", keepdim=True" if attrs["keepdim"] else "")
        avg, var_sum, n = self._record("welford", [t], attrs, [t.dtype, t.dtype, DataType.Int], sp)
        return avg, var_sum, n

    # -- scans and sorts ---------------------------------------------------------------
    def _scan(self, op, arg, dim, init):
        t = self._b.check_val(op, "arg", arg, tensor=True)
        if init is not None:
            raise DefinitionError(f"{op}: init is not supported (the scan starts at its op's identity)")
        d = _int(op, "dim", dim)
        if t.rank == 0:
            raise DefinitionError(f"{op}: dim {d} is out of range for {t.name}, a tensor of rank 0")
        d = S.norm_dim(op, "dim", d, t.rank)
        (out,) = self._host_multi(op, [t], ["arg"], {"dim": d}, [t.dtype], f"{t.name}, dim={d}")
        return out

    def cumsum(self, arg, dim, init=None):
        return self._scan("cumsum", arg, dim, init)

    def cumprod(self, arg, dim, init=None):
        return self._scan("cumprod", arg, dim, init)

    def cummax(self, arg, dim, init=None):
        return self._scan("cummax", arg, dim, init)

    def cummin(self, arg, dim, init=None):
        return self._scan("cummin", arg, dim, init)

    def argsort(self, arg, dim, descending=False, stable=False):
        op = "argsort"
        t = self._b.check_val(op, "arg", arg, tensor=True)
        d = S.norm_dim(op, "dim", _int(op, "dim", dim), t.rank)
        attrs = {"dim": d, "descending": _flag(op, "descending", descending), "stable": _flag(op, "stable", stable)}
        sp = f"{t.name}, dim={d}, descending={attrs['descending']}, stable={attrs['stable']}"
        (out,) = self._host_multi(op, [t], ["arg"], attrs, [DataType.Int], sp)
        return out

    def topk(self, arg, k, dim=-1, largest=True, sorted=False):
        """(values, indices) of the ``k`` largest (or smallest) along ``dim``; ``k`` an int
        or an Int scalar, a runtime one too (the output's extent along ``dim``)."""
        op = "topk"
        t = self._b.check_val(op, "arg", arg, tensor=True)
        kv = self._b.check_val(op, "k", k, tensor=False)
        if kv.dtype is not DataType.Int:
            raise DefinitionTypeError(f"{op}: k must be an Int scalar, got {kv.dtype}")
        if kv.is_constant and kv.value < 0:
            raise DefinitionError(f"{op}: k must be >= 0, got {kv.value}")
        d = _int(op, "dim", dim)
        d = S.norm_dim(op, "dim", d, t.rank)
        attrs = {"k": kv.value if kv.is_constant else kv, "dim": d, "largest": _flag(op, "largest", largest),
                 "sorted": _flag(op, "sorted", sorted)}
        sp = f"{t.name}, {_spell(kv)}, dim={d}, largest={attrs['largest']}, sorted={attrs['sorted']}"
        values, indices = self._record_host(op, [t], attrs, [t.dtype, DataType.Int], sp)
        return values, indices

    def scatter(self, arg, index, src, dim):
        op = "scatter"
        b = self._b
        t = b.check_val(op, "arg", arg, tensor=True)
        i = b.check_val(op, "index", index, tensor=True)
        if i.dtype not in (DataType.Int, DataType.Int32):
            raise DefinitionTypeError(f"{op}: index must be an Int or Int32 tensor, got {i.dtype}")
        s = b.check_val(op, "src", src)
        d = S.norm_dim(op, "dim", _int(op, "dim", dim), t.rank)
        if isinstance(s, TensorVal):
            if s.dtype is not t.dtype:
                raise DefinitionTypeError(f"{op}: src must have arg's dtype {t.dtype}, got {s.dtype}")
            (out,) = self._record(op, [t, i, s], {"dim": d}, [t.dtype], f"{t.name}, {i.name}, {s.name}, dim={d}")
            return out
        (out,) = self._record(op, [t, i, s], {"dim": d}, [t.dtype], f"{t.name}, {i.name}, {_spell(s)}, dim={d}")
        return out

    # -- complex numbers ---------------------------------------------------------------
    def complex(self, real, imag):
        b = self._b
        r = b.check_val("complex", "real", real, tensor=True)
        i = b.check_val("complex", "imag", imag, tensor=True)
        if r.dtype is not i.dtype or r.dtype not in _COMPLEX_OF:
            raise DefinitionTypeError(f"complex: real and imag must both be Float or both Double, got {r.dtype} "
                                      f"and {i.dtype}")
        (out,) = self._record("complex", [r, i], {}, [_COMPLEX_OF[r.dtype]], f"{r.name}, {i.name}")
        return out

    def _part(self, op, arg):
        t = self._b.check_val(op, "arg", arg, tensor=True)
        if not t.dtype.is_complex and op == "imag":
            raise DefinitionTypeError(f"imag: arg must be complex, got {t.dtype}")
        dt = _REAL_OF.get(t.dtype, t.dtype)
        (out,) = self._record(op, [t], {}, [dt], t.name)
        return out

    def real(self, arg):
        return self._part("real", arg)

    def imag(self, arg):
        return self._part("imag", arg)

    # -- attention and grouped matmuls -------------------------------------------------
    def sdpfa_fwd(self, query, key, value, bias=None, mask=None, dropout_p=None, is_causal=None, scale=None):
        """(output, logsumexp, philox_seed, philox_offset), see ``ir.attention``."""
        op = "sdpfa_fwd"
        b = self._b
        q, k, v = (b.check_val(op, n, x, tensor=True) for n, x in (("query", query), ("key", key), ("value", value)))
        if not (q.dtype is k.dtype is v.dtype) or not q.dtype.is_float:
            raise DefinitionTypeError(f"{op}: query, key and value must have one floating dtype, got {q.dtype}, "
                                      f"{k.dtype} and {v.dtype}")
        extra = [(n, b.check_val(op, n, x, tensor=True)) for n, x in (("bias", bias), ("mask", mask)) if x is not None]
        attrs = {n: self._scalar_attr(op, n, x) for n, x in
                 (("dropout_p", dropout_p), ("is_causal", is_causal), ("scale", scale))}
        sp = ", ".join([q.name, k.name, v.name] + [f"{n}={t.name}" for n, t in extra]
                       + [f"{n}={_spell(x)}" for n, x in attrs.items() if x is not None])
        ins = [q, k, v] + [t for _, t in extra]
        attrs["bias_mask"] = tuple(n for n, _ in extra)
        return tuple(self._record_host(op, ins, attrs, [q.dtype, DataType.Float, DataType.UInt64, DataType.UInt64], sp))

    def sdpfa_bwd(self, grad_output, query, key, value, output, logsumexp, dropout_p, is_causal, philox_seed,
                  philox_offset, scale):
        op = "sdpfa_bwd"
        names = ("grad_output", "query", "key", "value", "output", "logsumexp", "philox_seed", "philox_offset")
        ts = [self._b.check_val(op, n, x, tensor=True) for n, x in zip(names, (
            grad_output, query, key, value, output, logsumexp, philox_seed, philox_offset))]
        attrs = {n: self._scalar_attr(op, n, x) for n, x in
                 (("dropout_p", dropout_p), ("is_causal", is_causal), ("scale", scale))}
        sp = ", ".join([t.name for t in ts[:6]] + [_spell(attrs["dropout_p"]), _spell(attrs["is_causal"])]
                       + [t.name for t in ts[6:]] + [_spell(attrs["scale"])])
        return tuple(self._record_host(op, ts, attrs, [ts[1].dtype, ts[2].dtype, ts[3].dtype], sp))

    def grouped_mm(self, mat1, mat2, offsets, *scaled):
        op = "grouped_mm"
        if scaled:
            raise DefinitionError(f"{op}: the scaled form (scales, alpha, bias, beta, dtype) is not supported: it "
                                  f"multiplies float8 matrices, and pyfuser has no float8 matmul (fp8 tensors are cast only)")
        b = self._b
        a, m, off = (b.check_val(op, n, x, tensor=True) for n, x in (("mat1", mat1), ("mat2", mat2),
                                                                     ("offsets", offsets)))
        if off.dtype not in (DataType.Int32, DataType.Int):
            raise DefinitionTypeError(f"{op}: offsets must be an Int32 tensor, got {off.dtype}")
        (out,) = self._record(op, [a, m, off], {}, [a.dtype], f"{a.name}, {m.name}, {off.name}")
        return out

    def scaled_mm(self, *args, **kwargs):
        raise DefinitionError(f"scaled_mm is not supported: {UNSUPPORTED['scaled_mm']}")

    def nv_block_quantize(self, *args, **kwargs):
        raise DefinitionError(f"nv_block_quantize is not supported: {UNSUPPORTED['nv_block_quantize']}")
