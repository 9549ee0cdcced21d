"""nvFuser's fusion caches over definitions: ``LRUCache`` and its decorator ``LruFusionCache``.

A definition built again from the same code is a new ``FusionDefinition`` whose kernels
would be built again.  ``LRUCache.cache_compile(fd.fusion)`` looks the definition up by
what it computes (two fusions are the same when they print the same ``repr``: the same
inputs in the same order, the same ops, constants and outputs) and returns the
``FusionExecutorCache`` of the first definition seen; ``fd.fec = cache.cache_compile(...)``
makes ``fd.execute`` run there, so every copy shares one set of kernels and plans.  The
cache keeps at most ``max_fusions`` entries and evicts the least recently used.

``@LruFusionCache(max_fusions=n)`` wraps a function that returns a defined
``FusionDefinition`` and attaches the shared executor to each definition it returns;
the wrapper's ``stats()`` and ``num_fusions()`` report the cache, in nvFuser's words.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict

from ..errors import DefinitionError, DefinitionTypeError


class FusionExecutorCache:
    """What ``LRUCache.cache_compile`` returns: the executor of one definition."""

    def __init__(self, fusion):
        self._fusion = fusion
        self._fd = fusion._definition

    def fusion(self):
        return self._fusion

    def execute(self, inputs, device=None, **kwargs):
        return self._fd.execute(inputs, device=device, **kwargs)


class LRUCache:
    def __init__(self, max_fusions: int):
        if not isinstance(max_fusions, int) or isinstance(max_fusions, bool) or max_fusions <= 0:
            raise DefinitionError(f"LRUCache: max_fusions must be an int > 0, got {max_fusions!r}")
        self.max_fusions = max_fusions
        # key -> [executor, visits]; the front is the most recently used
        self._items: OrderedDict = OrderedDict()
        self._lookups = 0
        self._hits = 0
        self._lock = threading.Lock()

    def cache_compile(self, fusion) -> FusionExecutorCache:
        """The executor of the cached fusion equal to ``fusion`` (which becomes the most
        recently used), or of ``fusion`` itself, cached now (evicting the least recently
        used when full)."""
        definition = getattr(fusion, "_definition", None)
        if definition is None:
            raise DefinitionTypeError(f"LRUCache.cache_compile: expected a defined fusion (fd.fusion), got {fusion!r}")
        key = repr(definition)
        with self._lock:
            self._lookups += 1
            item = self._items.get(key)
            if item is not None:
                self._hits += 1
                item[1] += 1
                self._items.move_to_end(key, last=False)
                return item[0]
            if len(self._items) == self.max_fusions:
                self._items.popitem(last=True)
            self._items[key] = [FusionExecutorCache(fusion), 0]
            self._items.move_to_end(key, last=False)
            return self._items[key][0]

    def num_fusions(self) -> int:
        with self._lock:
            return len(self._items)

    def stats(self) -> str:
        with self._lock:
            lines = [f"Max Fusions Allowed: {self.max_fusions}"]
            if not self._items:
                return "\n".join(lines + ["The fusion cache is empty.", ""])
            lines += [f"Total Fusions in Cache: {len(self._items)}",
                      f"Total Unique Fusions Compiled: {self._lookups - self._hits}",
                      "Cache Hits by LRU ordering:"]
            lines += [f"\t{i} -> {visits} hits" for i, (_, visits) in enumerate(self._items.values())]
            rate = self._hits / self._lookups * 100 if self._lookups else 0.0
            lines += [f"Cache Lookups: {self._lookups}", f"Cache Hits: {self._hits}", f"Hit Rate: {rate:g}%", ""]
            return "\n".join(lines)


class LruFusionCache:
    """``@LruFusionCache(max_fusions=16384)`` on a function returning a defined
    ``FusionDefinition``: equal definitions share one executor (``LRUCache``)."""

    def __init__(self, max_fusions: int = 16384):
        self.cache = LRUCache(max_fusions)

    def __call__(self, create_fusion_definition):
        cache = self.cache

        @functools.wraps(create_fusion_definition)
        def wrapper(*args, **kwargs):
            fd = create_fusion_definition(*args, **kwargs)
            if getattr(fd, "fec", None) is None:
                fd.fec = cache.cache_compile(fd.fusion)
            return fd

        wrapper.stats = cache.stats
        wrapper.num_fusions = cache.num_fusions
        return wrapper
