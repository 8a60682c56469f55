"""Appends to one blob from a background thread, coalescing what queues up meanwhile.

A job's driver keeps two logs in tomus, its job log (``joblog``) and its task records
(``tasklog``), and produces a record per finished task, often faster than a durable append
completes (a millisecond or two each). Appending them one by one made a version, a metadata
tree and a durable round trip per record, on one thread, and the driver waited for that queue
at the end of every job. Here the records given while an append is under way go together in the
next append, in the order given: one version for all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import tomus

__all__ = ["Appender"]


class Appender:
    """Appends byte records to a blob in the order given, from one thread.

    ``open_blob`` runs first on that thread; it may return ``None`` when there is no blob to
    append to (the records are then dropped). ``close`` waits for everything and returns the
    futures of the work done, so the owner decides what a failure means.
    """

    def __init__(self, name: str, open_blob: Callable[[], tomus.Blob | None]) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._blob: Future[tomus.Blob | None] = self._thread.submit(open_blob)
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._work: list[Future[Any]] = [self._blob]

    def append(self, record: bytes) -> None:
        """Appends ``record`` after every record given before it."""
        with self._lock:
            self._pending.append(record)
        self._work.append(self._thread.submit(self._flush))

    def then(self, work: Callable[..., object], *args: object) -> None:
        """Runs ``work(*args)`` on the thread once every record given before is appended."""
        self._work.append(self._thread.submit(work, *args))

    def _flush(self) -> None:
        with self._lock:
            records, self._pending = self._pending, []
        if not records:
            return  # an earlier flush took them
        blob = self._blob.result()
        if blob is not None:
            blob.append(b"".join(records))

    def close(self) -> list[Future[Any]]:
        """Waits for the appends and the work given; returns their futures, in order."""
        self._thread.shutdown(wait=True)
        work, self._work = self._work, []
        return work
