"""What a worker process keeps in memory between tasks, bounded by bytes.

Iterative jobs read or derive the same arrays pass after pass: GeneralizedReduction keeps the
chunk runs its tasks read (KMeans reads its points from tomus once, not once per pass), and
PageRank keeps the edge arrays its tasks derive from the text. Both are keyed by immutable
things (a blob version, a split, a stored object), so an entry is never stale; an entry
evicted is read or derived again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["MemoryCache"]

V = TypeVar("V")


class MemoryCache(Generic[V]):
    """A least-recently-used map of at most ``budget`` bytes of values (the newest entry is
    kept whatever its size), safe to use from several threads."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, *, take: bool = False) -> V | None:
        """The value kept under ``key`` (None if none); ``take`` also forgets it."""
        with self._lock:
            if take:
                found = self._entries.pop(key, None)
                if found is None:
                    return None
                self._bytes -= found[1]
                return found[0]
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: V, nbytes: int) -> V:
        """Keeps ``value`` (``nbytes`` long) under ``key``, evicting the least recently used
        entries beyond the budget; returns the value kept, which is the one already there if
        another thread put one first."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                return found[0]
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.budget and len(self._entries) > 1:
                _, (_, n) = self._entries.popitem(last=False)
                self._bytes -= n
            return value

    def clear(self) -> int:
        """Forgets every entry; returns how many there were."""
        with self._lock:
            n = len(self._entries)
            self._entries.clear()
            self._bytes = 0
            return n
