"""Fast paths for pyfuser's reduction combine functions in Triton's interpreter.

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
    _installed = True
