"""One exception hierarchy for everything pyfuser raises on bad input.

Each class also derives from the builtin a user would expect (``ValueError`` for a
wrong value, ``TypeError`` for a wrong kind of object), so ``except ValueError``
works.  The base is a ``RuntimeError`` as well: nvFuser raises RuntimeError for
invalid definitions and inputs, so ``except RuntimeError`` in code written against
nvFuser catches ours too.  Messages name the op or argument, what was expected and
what was given.
"""


class PyfuserError(RuntimeError):
    """Base class of every error pyfuser raises on purpose (a RuntimeError, as nvFuser's)."""


class DefinitionError(PyfuserError, ValueError):
    """A FusionDefinition is malformed (bad shapes, axes, dtypes, ...)."""


class EmptyFusionError(DefinitionError, NotImplementedError):
    """``execute`` of a FusionDefinition never defined, or defined with no outputs
    (nvFuser raises NotImplementedError for both)."""


class DefinitionTypeError(PyfuserError, TypeError):
    """An op got an object of the wrong kind (a list where a tensor was expected, ...)."""


class InputError(PyfuserError, ValueError):
    """The inputs given to ``execute`` contradict the definition."""


class InputTypeError(PyfuserError, TypeError):
    """An input given to ``execute`` is of the wrong kind (a number for a tensor, ...)."""


class CompileError(PyfuserError, RuntimeError):
    """Generating or compiling a kernel failed; the message says where a repro was written."""


class DependencyError(PyfuserError, ImportError):
    """A package that running kernels needs (triton; numpy for CPU tensors) is not installed."""


class ValidationError(PyfuserError, AssertionError):
    """``fd.validate``: the fusion's outputs disagree with the reference executor's."""


class CacheDirError(PyfuserError, PermissionError):
    """The kernel cache or repro directory is not private to the user (someone else's,
    writable by others, or a symbolic link): pyfuser imports code from there."""


class SettingError(PyfuserError, ValueError):
    """A ``PYFUSER_*`` environment setting has a value pyfuser cannot use."""


class ToolchainError(PyfuserError, RuntimeError):
    """The installed packages cannot run pyfuser's kernels (a known-bad pair of
    versions); the message says which to install."""


class AccuracyError(PyfuserError, AssertionError):
    """The torch.compile backend's accuracy mode (``PYFUSER_CHECK=1``): a fused region,
    a fast-path view or a rewritten graph disagrees with ATen on the same inputs.
    ``where`` names it, ``output`` is the output's position, ``index`` the first
    mismatching element, ``got`` / ``want`` pyfuser's and ATen's values there."""

    def __init__(self, message, where=None, output=None, index=None, got=None, want=None):
        super().__init__(message)
        self.where, self.output, self.index, self.got, self.want = where, output, index, got, want


class InternalError(PyfuserError, RuntimeError):
    """pyfuser failed on a fusion it accepted: a bug in pyfuser, not in the definition.
    The message names the fusion's step and ops that were being planned and the
    original exception (chained as ``__cause__``); ``fd.repro_script(inputs)`` makes the
    report."""


class Unsupported(PyfuserError):
    """A tile cannot express this segment with these parameters.  Raised while a
    kernel is generated; a scheduler's run-time check (``can_schedule_runtime``) turns
    it into a rejection with ``code``, so the planner splits the segment or tries the
    next scheduler, and ``emit`` of an accepted segment never raises it."""

    def __init__(self, message: str, code: str = "unsupported"):
        super().__init__(message)
        self.code = code


class EagerFallbackWarning(UserWarning):
    """A segment runs as torch ops (the reference executor) because no scheduler
    accepted it; ``fd.explain(inputs)`` lists every scheduler's rejection.  Warned once
    per cause (the schedulers' rejection codes)."""


class InterpreterWarning(UserWarning):
    """Kernels run on CPU tensors, under Triton's interpreter: correct results, far
    slower than eager PyTorch (for tests and debugging).  Warned once per process."""


class ChoicesError(PyfuserError, ValueError):
    """A ``schedulers.Choices`` names a params field or a scheduler that does not exist,
    or a params combination no kernel can take (``Params.validate``)."""
