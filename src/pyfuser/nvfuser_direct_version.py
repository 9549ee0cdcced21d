"""``pyfuser.version()`` and ``Version``, as nvFuser's ``nvfuser_direct_version`` has them.

``version()`` is the package's version as a string that compares as a version:
``version() > "0.0.0"`` and ``version() > Version("0.0.0")`` compare release numbers,
not text (``"0.10.0" > "0.9.0"``).  A local part after ``+`` is ignored, as nvFuser
ignores its git hash.
"""
from __future__ import annotations

import functools
import re

from . import _version

__all__ = ["Version", "PyfuserVersion", "__version__"]

_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)\s*$")


@functools.total_ordering
class Version:
    """A release version ``N(.N)*``; trailing zeros do not count (``1.0 == 1.0.0``)."""

    def __init__(self, text: str):
        m = _RELEASE.match(str(text).split("+")[0])
        if m is None:
            raise ValueError(f"Version: expected release numbers like '1.2.3', got {text!r}")
        parts = [int(p) for p in m.group(1).split(".")]
        while len(parts) > 1 and parts[-1] == 0:
            parts.pop()
        self.release = tuple(parts)
        self.text = str(text)

    def __eq__(self, other):
        other = _as_version(other)
        return NotImplemented if other is None else self.release == other.release

    def __lt__(self, other):
        other = _as_version(other)
        return NotImplemented if other is None else self.release < other.release

    def __hash__(self):
        return hash(self.release)

    def __repr__(self):
        return f"Version({self.text!r})"


def _as_version(x) -> Version | None:
    if isinstance(x, Version):
        return x
    if isinstance(x, str):
        return Version(x)
    return None


class PyfuserVersion(str):
    """The version text, compared as a ``Version``."""

    def _cmp(self, other, op):
        theirs = _as_version(other)
        if theirs is None:
            raise TypeError(f"cannot compare version {str(self)!r} with {type(other).__name__} {other!r}")
        return op(Version(str(self)), theirs)

    def __eq__(self, other):
        return self._cmp(other, lambda a, b: a == b)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __lt__(self, other):
        return self._cmp(other, lambda a, b: a < b)

    def __le__(self, other):
        return self._cmp(other, lambda a, b: a <= b)

    def __gt__(self, other):
        return self._cmp(other, lambda a, b: a > b)

    def __ge__(self, other):
        return self._cmp(other, lambda a, b: a >= b)

    def __hash__(self):
        return hash(Version(str(self)))


__version__ = PyfuserVersion(_version.__version__)


def version() -> PyfuserVersion:
    """pyfuser's version, comparable with strings and ``Version`` (``version() > "0.1"``)."""
    return __version__
