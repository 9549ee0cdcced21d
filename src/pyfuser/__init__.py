"""pyfuser: nvFuser-compatible fusion definitions, compiled to Triton kernels.

    from pyfuser import FusionDefinition, DataType

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        y = fd.ops.cast(x, DataType.Float)
        m = fd.ops.max(y, dims=[1])
        fd.add_output(fd.ops.sub(y, fd.ops.broadcast_in_dim(m, shape=[-1, 1], broadcast_dims=[0])))
    out, = fd.execute([torch.randn(8, 30522, dtype=torch.float16, device="cuda")])

``pyfuser.config`` holds every setting (docs/SETTINGS.md); ``python -m pyfuser`` prints
the versions, the device and every setting.  See README.md for the tour and src/pyfuser/README.md for the code's layout.
"""
from ._version import __version__
from .errors import (AccuracyError, CacheDirError, CompileError, DefinitionError, DefinitionTypeError, DependencyError,
                     InputError, InputTypeError, InternalError, InterpreterWarning, PyfuserError, SettingError,
                     ToolchainError, ValidationError)
from .frontend import Fusion, FusionDefinition
from .frontend.descriptor import compute_tensor_descriptor
from .ir.dtypes import DataType
from .ir.values import TensorVal as TensorView
from .frontend.lru import LRUCache, LruFusionCache
from .nvfuser_direct_version import version
from .runtime.profiler import PythonProfiler
from .settings import config


def cache_info() -> dict:
    """Kernel cache counters: ``kernels_compiled``, ``hits``, ``misses``, ``launches``,
    ``modules_loaded`` (kernel modules imported now)."""
    from .runtime.cache import cache_info as _info

    return _info()


__all__ = ["__version__", "config", "FusionDefinition", "Fusion", "DataType", "cache_info", "compute_tensor_descriptor",
           "PyfuserError", "TensorView", "LRUCache", "LruFusionCache", "PythonProfiler", "version", "DefinitionError",
           "DefinitionTypeError", "InputError", "InputTypeError", "CompileError", "ValidationError",
           "CacheDirError", "InternalError", "SettingError", "ToolchainError", "AccuracyError", "DependencyError",
           "InterpreterWarning"]
