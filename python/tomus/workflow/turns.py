"""Holder turns for the swarm: when a file's readers outnumber its holders, each holder serves
one reader at a time, and every reader that finishes becomes a holder before giving its turn
back, so the sources double at each round (a binomial broadcast tree).

Why: a swarm fetch spreads its pieces over the holders it sees when it starts. Readers of a
broadcast start together and see the one holder that wrote the file, so without turns all of
them share that holder's link and finish together: no reader becomes a holder early enough to
help, and the swarm is no faster than ``direct`` (measured on separate hosts,
``bench/workflow/multihost.py``). With turns the first reader gets the holder's whole link,
then two readers get one holder each, then four, ...: with R readers the broadcast takes
about log2(R + 1) whole-file times instead of R.

A turn is a lock named after (file, holder). Inside a Dask task the locks are Dask's
(``distributed.Lock``, shared by every worker of the cluster); elsewhere they are locks of this
process (threads reading one file, as in the tests).
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Turns", "turns"]


class Turns:
    """Non-blocking named locks: :meth:`take` a turn, :meth:`give` it back."""

    def __init__(self) -> None:
        self._held: dict[str, Any] = {}
        self._guard = threading.Lock()

    def _lock(self, key: str) -> Any:
        with self._guard:
            return self._held.setdefault(key, threading.Lock())

    def take(self, key: str) -> bool:
        return bool(self._lock(key).acquire(blocking=False))

    def give(self, key: str) -> None:
        self._lock(key).release()


class DaskTurns(Turns):
    """Turns shared by the whole Dask cluster (the scheduler keeps the locks)."""

    def _lock(self, key: str) -> Any:
        from distributed import Lock

        with self._guard:
            if key not in self._held:
                self._held[key] = Lock(key)
            return self._held[key]

    def take(self, key: str) -> bool:
        return bool(self._lock(key).acquire(blocking=False))

    def give(self, key: str) -> None:
        with self._guard:
            lock = self._held.pop(key)
        lock.release()


_LOCAL = Turns()


def turns() -> Turns:
    """Dask's turns inside a Dask task, this process's otherwise."""
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return _LOCAL
    return DaskTurns()
