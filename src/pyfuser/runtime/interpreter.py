"""What Triton's interpreter needs to run pyfuser's kernels unchanged, and fast.

1. libdevice: kernels call ``libdevice.tanh`` and friends (accurate and fast on the
   GPU).  The interpreter cannot call extern functions, so the CPU copy of a kernel
   module (``interpreted_module``; ``cache`` imports one per device kind) has its
   ``libdevice`` name bound to a namespace of the same functions computed by torch on
   the interpreter's numpy arrays.  The kernel text is the same on CPU and GPU; only
   the implementation of the math library differs, as between any two math
   libraries, by an ulp or so.  Triton's own ``libdevice`` module is never touched,
   so a compiled launch, in any thread, sees the originals.
2. Helper functions: a kernel may call ``@triton.jit`` functions defined next to it
   (``_pyfuser_tanh``).  The interpreter runs only a call to its own function type,
   so the CPU copy binds each helper to an interpreted copy of itself.  A helper
   that is inline PTX (``_pyfuser_ex2_approx``), which the interpreter cannot run,
   is bound to torch's equivalent, as libdevice's functions are.
3. Reductions: fast paths for pyfuser's combine functions (below).
4. Float arguments: see ``_float_argument``.
5. fp32 -> bf16 (and -> fp8) rounds to nearest even, as the GPU does; the interpreter truncated,
   an ulp off in half the values, and more after chained ops (the fuzzer found a
   17% error through two bf16 exps).  bf16 -> fp32 keeps subnormals: the
   interpreter's conversion turned them into other values or zero (so ``x > 0``,
   ``sign`` and casts to bool were wrong).  fp32 <-> fp8 converts as torch does
   (subnormals, and e4m3's saturation to 448); the interpreter flushed fp8 subnormals
   and wrapped values beyond e4m3's range.
6. A bool kernel argument (a runtime Bool scalar) is an int1, as the compiler types
   it; the interpreter typed it int1 but stored it in an int32 array, and refused it.
7. A comparison's result is an int1.  The interpreter kept its operands' type on
   the result's numpy array, so a uniform (0-d) comparison broadcast against a block
   became a float or int array, and ``&``/``|`` of it failed.
8. A loop's index is a tensor, as in a compiled kernel (``k_o.to(tl.uint64)`` in a
   row loop): the CPU copy of a kernel module has ``range`` bound to ``_tensor_range``; the
   interpreter ran the builtin, whose index is a Python int.
9. Float maximum and minimum (``tl.maximum``/``tl.minimum`` with NaN propagation)
   order -0.0 below +0.0, as the GPU's max/min instructions do; the interpreter's
   numpy ``maximum`` returned whichever zero came second.
10. ``tl.exp``, ``exp2``, ``log``, ``log2``, ``sin`` and ``cos`` on float32/float64 are
   torch's: numpy's float32 loops for exp, exp2, sin and cos are up to 2.5 ulp off
   (exp2(127) came out an ulp above 2**127), torch's within an ulp, and torch eager is
   what CPU results are checked against.

The interpreter reduces with numpy when the combine function is one of Triton's own
(sum, NaN-ignoring max/min); any other combine function runs element by element in
Python, correct but thousands of times slower.  pyfuser's kernels reduce with
the op table's combine helpers (``ir.reductions``: NaN-propagating max/min, a
product), so this teaches the interpreter the numpy equivalent each one names.  Compiled kernels are unaffected.

Threads: Triton's interpreter is not thread-safe (while a kernel runs it rebinds
``triton.language``'s builtins process-wide and keeps the program id in one global
builder), so every interpreted launch holds ``INTERPRETER_LOCK``: interpreted kernels
run one at a time per process, whatever the number of threads.  Each interpreted
function keeps its own rewritten code (Triton's class-wide cache of them would keep
every kernel alive for the life of the process).
"""
from __future__ import annotations

import inspect
import threading

import numpy as np

from ..compat import (argument_conversion, interpreted_function_base, interpreter_module, set_argument_conversion,
                      tensor_handle)
from ..errors import InterpreterWarning
from ..ir.reductions import HELPERS
from ..settings import warn_user

# The op table's combine helpers with a numpy equivalent, by the name kernels call them.
_NUMPY = {h.name: getattr(np, h.numpy) for h in HELPERS if h.numpy is not None}
_installed = False
INTERPRETER_LOCK = threading.RLock()


def _data(x):
    return x.handle.data if hasattr(x, "handle") else np.asarray(x)


def _torch_fn(fn, numpy=False):
    """A libdevice stand-in: apply the torch (or numpy) function to the interpreter's arrays."""

    def shim(*args, _semantic=None):
        import torch

        # the result takes the type of the largest tensor argument (others broadcast)
        first = max((a for a in args if hasattr(a, "handle")), key=lambda a: np.size(a.handle.data))
        datas = [_data(a) for a in args]
        dtype = _data(first).dtype
        arrays = [np.ascontiguousarray(np.asarray(d, dtype=dtype)) for d in datas]
        with np.errstate(all="ignore"):  # masked-off lanes hold anything
            out = (fn(*arrays) if numpy else fn(*map(torch.from_numpy, arrays)).numpy()).astype(dtype)
        return type(first)(tensor_handle(out, first.handle.dtype), first.type)

    return shim


def _libdevice_shims():
    import torch

    from ..ir.op_refs import erfcinv

    return {"tanh": _torch_fn(torch.tanh), "expm1": _torch_fn(torch.expm1), "log1p": _torch_fn(torch.log1p),
            "erfc": _torch_fn(torch.erfc), "atan2": _torch_fn(torch.atan2), "pow": _torch_fn(torch.pow),
            "tan": _torch_fn(torch.tan), "rint": _torch_fn(torch.round), "trunc": _torch_fn(torch.trunc),
            **{name: _torch_fn(getattr(torch, name)) for name in (
                "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "lgamma", "erfinv", "log10")},
            "erfcinv": _torch_fn(erfcinv),  # torch has none: the op table's reference
            # C's fmod, exact as libdevice's: torch's CPU fmod is a - trunc(a / b) * b in its
            # vectorized loop, NaN once a / b overflows
            "fmod": _torch_fn(np.fmod, numpy=True)}


def _asm_helpers():
    import torch

    return {"_pyfuser_ex2_approx": _torch_fn(torch.exp2), "_pyfuser_fdiv_approx": _torch_fn(torch.div)}


def _float_argument(arg, fp64: bool = False):
    """A Python float argument as the scalar a compiled launch receives: fp32, or fp64
    for a parameter annotated ``tl.float64`` (a Double scalar).  Left a number, the
    interpreter makes an fp32 constant of it where it is used, and Triton makes +0.0 of
    every constant equal to 0, so a runtime -0.0 lost its sign."""
    if not isinstance(arg, float):
        return arg
    import triton.language as tl

    ty, np_ty = (tl.float64, np.float64) if fp64 else (tl.float32, np.float32)
    return tl.tensor(tensor_handle(np.array([arg], dtype=np_ty), ty), ty)


def _fp64_parameters(fn) -> frozenset:
    """The positions of ``fn``'s parameters annotated ``tl.float64`` (the annotation is
    the text itself where the kernel's module was rewritten from source)."""
    names = list(inspect.signature(fn).parameters)
    return frozenset(i for i, n in enumerate(names) if str(fn.__annotations__.get(n)) in ("tl.float64", "fp64"))


class _Libdevice:
    """``libdevice`` for an interpreted module: the stand-ins, else Triton's own."""

    def __init__(self, shims):
        self.__dict__.update(shims)

    def __getattr__(self, name):  # once per name: the value is kept as an attribute
        if name in _TORCH_MATH:  # the builtin, which the interpreter computes with torch (10.)
            import triton.language as source
        else:
            from triton.language.extra import libdevice as source
        value = getattr(source, name)
        setattr(self, name, value)
        return value


def _interpreted_function_type():
    global _INTERPRETED
    if _INTERPRETED is None:
        class Interpreted(interpreted_function_base()):
            def rewrite(self):
                fn = self.__dict__.get("_rewritten")
                if fn is None:
                    fn = self._rewritten = self.rewriter.rewrite_ast()
                return fn

        _INTERPRETED = Interpreted
    return _INTERPRETED


_SHIMS = _ASM = None
_INTERPRETED = None


def interpreted_module(mod):
    """Make ``mod`` (a kernel module imported for CPU tensors only) the interpreter's:
    ``libdevice`` bound to the stand-ins, each ``@triton.jit`` function to an
    interpreted copy, rewritten now while the source is at hand."""
    from triton.runtime.jit import JITFunction

    global _SHIMS, _ASM
    with INTERPRETER_LOCK:
        install_fast_paths()
        if _SHIMS is None:
            _SHIMS, _ASM = _Libdevice(_libdevice_shims()), _asm_helpers()
        interpreted = _interpreted_function_type()
        g = mod.__dict__
        g["libdevice"] = _SHIMS
        g["range"] = _tensor_range
        for name, f in list(g.items()):
            if name in _ASM:
                g[name] = _ASM[name]
            elif isinstance(f, JITFunction):
                g[name] = interpreted(f.fn)
                g[name].rewrite()


CPU_WARNING = ("pyfuser runs these kernels on CPU tensors under Triton's interpreter: results are correct but "
               "much slower than eager PyTorch (for tests and debugging, not for speed); use CUDA tensors to run "
               "compiled kernels.  Warned once per process.")
_warned_cpu = [False]


def warn_cpu_once():
    """``InterpreterWarning`` the first time this process builds an interpreted kernel
    (``fd.execute`` or the torch.compile backend on CPU tensors)."""
    if not _warned_cpu[0]:
        _warned_cpu[0] = True
        warn_user(CPU_WARNING, InterpreterWarning)


class InterpretedKernel:
    """``kernel[grid](*args)`` through Triton's interpreter (``fn``: a function of a
    module prepared by ``interpreted_module``), one launch at a time per process."""

    def __init__(self, fn):
        warn_cpu_once()
        self.fn = fn
        self.fp64 = _fp64_parameters(fn.fn) if hasattr(fn, "fn") else frozenset()

    def __getitem__(self, grid):
        run, fp64 = self.fn[grid], self.fp64

        def launch(*args, **kwargs):
            with INTERPRETER_LOCK:
                try:
                    return run(*(_float_argument(a, i in fp64) for i, a in enumerate(args)), **kwargs)
                except Exception as err:
                    hint = numpy_hint()
                    if hint is None:
                        raise
                    from ..errors import ToolchainError

                    raise ToolchainError(f"{type(err).__name__}: {err}\n{hint}") from err

        return launch


def _tensor_range(*bounds):
    """``range`` whose indices are scalar tensors: int64 when a bound is, else int32."""
    import triton.language as tl

    wide = any(getattr(b, "dtype", None) in (tl.int64, tl.uint64) for b in bounds)
    ty, np_ty = (tl.int64, np.int64) if wide else (tl.int32, np.int32)
    for i in range(*(int(_data(b).reshape(-1)[0]) if hasattr(b, "handle") else int(b) for b in bounds)):
        yield tl.tensor(tensor_handle(np.array([i], dtype=np_ty), ty), ty)


def _version(text: str) -> tuple:
    return tuple(int(part) for part in text.split("+")[0].split(".")[:2] if part.isdigit())


def numpy_hint(triton_version: str | None = None, numpy_version: str | None = None) -> str | None:
    """What to install when the versions are the one known-bad pair, else None:
    Triton 3.6's interpreter turns a loop's bounds into Python ints in a way numpy
    2.4 rejects, so kernels with a loop fail (others run).  Triton 3.8 and 3.9 run
    them with numpy 2.4, so the package declares numpy without a cap and a
    failing launch names the fix instead of a TypeError deep in Triton."""
    import triton

    t_text, n_text = triton_version or triton.__version__, numpy_version or np.__version__
    if _version(t_text) < (3, 7) and _version(n_text) >= (2, 4):
        return (f"Triton {t_text}'s interpreter (CPU tensors) is known to fail on numpy >= 2.4, found numpy {n_text}: "
                f"pip install 'numpy<2.4' (or Triton 3.8 or newer)")
    return None


def used() -> bool:
    """Whether this process has prepared an interpreted kernel."""
    return _installed


def install_fast_paths():
    global _installed
    if _installed:
        return
    interpreter = interpreter_module()
    original = interpreter.ReduceOps.apply_impl

    def apply_impl(self, input):
        fn = getattr(self.combine_fn, "fn", self.combine_fn)
        op = _NUMPY.get(getattr(fn, "__name__", ""))
        if op is None:
            return original(self, input)
        x = input[0]
        data = op(x.handle.data, axis=self.axis, keepdims=self.keep_dims)
        return self.to_tensor(np.asarray(data, dtype=x.handle.data.dtype), x.dtype)

    interpreter.ReduceOps.apply_impl = apply_impl
    _install_bf16_rounding(interpreter)
    _install_bool_arguments(interpreter)
    _install_bool_results(interpreter)
    _install_ordered_zeros(interpreter)
    _install_torch_math(interpreter)
    _installed = True


def _install_bf16_rounding(interpreter):
    import torch
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    cast_impl, fp_to_fp = builder.cast_impl, builder.create_fp_to_fp

    def to_bf16(src):
        bits = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).to(torch.bfloat16)
        return interpreter.TensorHandle(bits.view(torch.int16).numpy().view(np.uint16), tl.bfloat16)

    def to_f32(src):  # exact: a bf16 is the top half of an fp32 (subnormals included)
        bits = np.ascontiguousarray(src.data).view(np.uint16).astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def is_f32_to_bf16(src, dst_type):
        return src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16

    def is_bf16_to_f32(src, dst_type):
        return src.dtype.scalar == tl.bfloat16 and dst_type.scalar == tl.float32

    fp8 = {tl.float8e4nv: torch.float8_e4m3fn, tl.float8e5: torch.float8_e5m2}

    def fp8_cast(src, dst_type):
        """fp32 <-> fp8 as torch converts, or None for other casts."""
        if src.dtype.scalar == tl.float32 and dst_type.scalar in fp8:
            bits = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).to(fp8[dst_type.scalar])
            return interpreter.TensorHandle(bits.view(torch.uint8).numpy(), dst_type.scalar)
        if src.dtype.scalar in fp8 and dst_type.scalar == tl.float32:
            bits = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.uint8))
            return interpreter.TensorHandle(bits.view(fp8[src.dtype.scalar]).float().numpy(), tl.float32)
        return None

    def cast(self, src, dst_type):
        if is_f32_to_bf16(src, dst_type):
            return to_bf16(src)
        if (out := fp8_cast(src, dst_type)) is not None:
            return out
        return to_f32(src) if is_bf16_to_f32(src, dst_type) else cast_impl(self, src, dst_type)

    def fp_cast(self, src, dst_type, rounding_mode):
        if is_f32_to_bf16(src, dst_type) and rounding_mode in (None, tl.RoundingMode.RTNE):
            return to_bf16(src)
        if (out := fp8_cast(src, dst_type)) is not None:  # kernels cast to fp8 rounding to nearest even
            return out
        return to_f32(src) if is_bf16_to_f32(src, dst_type) else fp_to_fp(self, src, dst_type, rounding_mode)

    builder.cast_impl, builder.create_fp_to_fp = cast, fp_cast


def _install_bool_arguments(interpreter):
    import triton.language as tl

    convert = argument_conversion()

    def implicit_cvt(arg):
        if isinstance(arg, bool):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.bool_), tl.int1), tl.int1)
        return convert(arg)

    set_argument_conversion(implicit_cvt)


def _install_ordered_zeros(interpreter):
    builder = interpreter.InterpreterBuilder

    def maximum(a, b):  # of two zeros, -0.0 only if both are: their sum
        return np.where((a == 0) & (b == 0), a + b, np.maximum(a, b))

    def minimum(a, b):  # of two zeros, +0.0 only if both are
        return np.where((a == 0) & (b == 0), -(-a + -b), np.minimum(a, b))

    builder.create_maximumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, maximum)
    builder.create_minimumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, minimum)


def _install_bool_results(interpreter):
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    binary_op = builder.binary_op

    def bool_binary_op(self, lhs, rhs, op):
        out = binary_op(self, lhs, rhs, op)
        if out.data.dtype == np.bool_ and out.dtype != tl.int1:
            return interpreter.TensorHandle(out.data, tl.int1)
        return out

    builder.binary_op = bool_binary_op


_TORCH_MATH = ("exp", "exp2", "log", "log2", "sin", "cos")


def _install_torch_math(interpreter):
    import torch

    builder = interpreter.InterpreterBuilder

    def torch_unary(fn, original):
        def create(self, arg):
            data = arg.data
            if data.dtype not in (np.float32, np.float64):
                return original(self, arg)
            out = fn(torch.from_numpy(np.ascontiguousarray(data))).numpy().reshape(data.shape)
            return interpreter.TensorHandle(out, arg.dtype.scalar)

        return create

    for name in _TORCH_MATH:
        attr = f"create_{name}"
        setattr(builder, attr, torch_unary(getattr(torch, name), getattr(builder, attr)))
