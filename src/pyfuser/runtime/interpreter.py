"""What Triton's interpreter needs to run pyfuser's kernels unchanged, and fast.

1. libdevice: kernels call ``libdevice.tanh`` and friends (accurate and fast on the
   GPU).  The interpreter cannot call extern functions, so while an interpreted
   kernel runs, those names are bound to the same functions computed by torch on
   the interpreter's numpy arrays (``InterpretedKernel``).  The kernel text is the
   same on CPU and GPU; only the implementation of the math library differs, as
   between any two math libraries, by an ulp or so.
2. Helper functions: a kernel may call ``@triton.jit`` functions defined next to it
   (``_pyfuser_tanh``).  The interpreter runs only a call to its own function type,
   so while an interpreted kernel runs, the module's helpers are bound to
   interpreted copies of themselves (a compiled launch of the same module still
   sees the originals).
3. Reductions: fast paths for pyfuser's combine functions (below).
4. Python float arguments (runtime scalars) arrive as fp32 scalars, as a compiled
   kernel takes them (``_float_arg``).
5. fp32 -> bf16 rounds to nearest even, as the GPU does; the interpreter truncated,
   an ulp off in half the values, and more after chained ops (the fuzzer found a
   17% error through two bf16 exps).

The interpreter reduces with numpy when the combine function is one of Triton's own
(sum, NaN-ignoring max/min); any other combine function runs element by element in
Python, correct but thousands of times slower.  pyfuser's kernels reduce with
NaN-propagating max/min and with a product, so this teaches the interpreter the
numpy equivalents of those three.  Compiled kernels are unaffected.
"""
from __future__ import annotations

import numpy as np

_NUMPY = {"_pyfuser_max_nan": np.max, "_pyfuser_min_nan": np.min, "_pyfuser_prod": np.prod}
_installed = False


def _data(x):
    return x.handle.data if hasattr(x, "handle") else np.asarray(x)


def _torch_fn(fn, numpy=False):
    """A libdevice stand-in: apply the torch (or numpy) function to the interpreter's arrays."""

    def shim(*args, _semantic=None):
        import torch
        from triton.runtime.interpreter import TensorHandle

        # the result takes the type of the largest tensor argument (others broadcast)
        first = max((a for a in args if hasattr(a, "handle")), key=lambda a: np.size(a.handle.data))
        datas = [_data(a) for a in args]
        dtype = _data(first).dtype
        arrays = [np.ascontiguousarray(np.asarray(d, dtype=dtype)) for d in datas]
        with np.errstate(all="ignore"):  # masked-off lanes hold anything
            out = (fn(*arrays) if numpy else fn(*map(torch.from_numpy, arrays)).numpy()).astype(dtype)
        return type(first)(TensorHandle(out, first.handle.dtype), first.type)

    return shim


def _libdevice_shims():
    import torch

    return {"tanh": _torch_fn(torch.tanh), "expm1": _torch_fn(torch.expm1), "log1p": _torch_fn(torch.log1p),
            "erfc": _torch_fn(torch.erfc), "atan2": _torch_fn(torch.atan2), "pow": _torch_fn(torch.pow),
            "tan": _torch_fn(torch.tan), "rint": _torch_fn(torch.round), "trunc": _torch_fn(torch.trunc),
            "fast_dividef": _torch_fn(torch.div),
            # C's fmod, exact as libdevice's: torch's CPU fmod is a - trunc(a / b) * b in its
            # vectorized loop, NaN once a / b overflows
            "fmod": _torch_fn(np.fmod, numpy=True)}


def _float_arg(x):
    """A Python float argument as the fp32 scalar a compiled kernel receives (Triton
    passes Python floats as fp32).  Left a float, the interpreter makes it a constant,
    and Triton's constants of value 0 are +0.0: a runtime -0.0 lost its sign."""
    if type(x) is not float:
        return x
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    return tl.tensor(TensorHandle(np.array([x], dtype=np.float32), tl.float32), tl.float32)


class InterpretedKernel:
    """``kernel[grid](*args)`` through Triton's interpreter, libdevice bound to torch."""

    _shims = None

    def __init__(self, jit_fn):
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        install_fast_paths()
        self.fn = InterpretedFunction(jit_fn.fn)
        self.module = jit_fn.fn.__globals__
        self.helpers = {name: InterpretedFunction(f.fn) for name, f in self.module.items()
                        if isinstance(f, JITFunction) and f is not jit_fn}

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            from triton.language.extra import libdevice

            if InterpretedKernel._shims is None:
                InterpretedKernel._shims = _libdevice_shims()
            saved = {name: getattr(libdevice, name) for name in self._shims}
            compiled = {name: self.module[name] for name in self.helpers}
            try:
                for name, shim in self._shims.items():
                    setattr(libdevice, name, shim)
                self.module.update(self.helpers)
                return self.fn[grid](*map(_float_arg, args), **kwargs)
            finally:
                for name, orig in saved.items():
                    setattr(libdevice, name, orig)
                self.module.update(compiled)

        return launch


def install_fast_paths():
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter

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
    _installed = True


def _install_bf16_rounding(interpreter):
    import torch
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    cast_impl, fp_to_fp = builder.cast_impl, builder.create_fp_to_fp

    def to_bf16(src):
        bits = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).to(torch.bfloat16)
        return interpreter.TensorHandle(bits.view(torch.int16).numpy().view(np.uint16), tl.bfloat16)

    def is_f32_to_bf16(src, dst_type):
        return src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16

    builder.cast_impl = lambda self, src, dst_type: (to_bf16(src) if is_f32_to_bf16(src, dst_type)
                                                      else cast_impl(self, src, dst_type))
    builder.create_fp_to_fp = lambda self, src, dst_type, rounding_mode: (
        to_bf16(src) if is_f32_to_bf16(src, dst_type) and rounding_mode in (None, tl.RoundingMode.RTNE)
        else fp_to_fp(self, src, dst_type, rounding_mode))
