"""Objects that compute tasks keep in tomus: results, broadcasts, inputs of later tasks.

Each stored object gets a blob of its own. Appending objects to one shared blob would save a
request per object (the blob's creation), but would tie unrelated tasks together: a blob's
versions publish in order, so each append waits for every append assigned before it. A writer
that fails aborts its version at once, but a worker killed mid-append cannot, and every later
store to that blob would wait for the manager to expire the version (``--writer-lease-ms``,
10 s by default) and then commit again. With a blob per object, a task's store waits on no
other task, and a retried task just writes a fresh blob. A blob of its own also gets a chunk
size fitted to the object (``_chunk_size_for``). (MapReduce's shuffle does append to shared
blobs: there, concurrent appends are the point.)

Everything here is immutable once written: a ``Ref`` names a blob at a version, so readers can
cache what they read (``cached``) without ever going stale.
"""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import tomus
from tomus.compute.engine import count_read, count_write

__all__ = ["Ref", "cached", "get_bytes", "get_object", "put_bytes", "put_object"]


@dataclass(frozen=True)
class Ref:
    """Bytes ``[offset, offset + size)`` of ``blob`` at ``version``."""

    blob: int
    version: int
    offset: int
    size: int


def _chunk_size_for(n: int) -> int:
    """A chunk size that keeps small objects in one chunk and cuts large ones for parallel I/O."""
    size = 64 << 10
    while size < n and size < (4 << 20):
        size <<= 1
    return size


def put_bytes(client: tomus.Client, data: bytes | bytearray | memoryview) -> Ref:
    """Stores ``data`` in a new blob."""
    n = memoryview(data).nbytes
    if n == 0:
        return Ref(0, 0, 0, 0)  # nothing to store; get_bytes answers b"" without a read
    blob = client.create_blob(chunk_size=_chunk_size_for(n))
    version = blob.write(0, data)
    count_write(n)
    return Ref(blob.id, version, 0, n)


def get_bytes(client: tomus.Client, ref: Ref) -> bytes:
    if ref.size == 0:
        return b""
    data = client.open_blob(ref.blob).read(ref.offset, ref.size, version=ref.version)
    count_read(len(data))
    return bytes(data)


def put_object(client: tomus.Client, obj: object) -> Ref:
    """Pickles ``obj`` (protocol 5: numpy arrays without extra copies) into a new blob."""
    return put_bytes(client, pickle.dumps(obj, protocol=5))


def get_object(client: tomus.Client, ref: Ref) -> Any:
    return pickle.loads(get_bytes(client, ref))


_cache: OrderedDict[tuple[str, Ref], Any] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_ENTRIES = 8


def cached(client: tomus.Client, ref: Ref) -> Any:
    """``get_object`` through a small per-process cache: for objects every task of a job reads
    (a broadcast, A-Brain's imaging matrix), read once per worker instead of once per task."""
    key = (client.addr, ref)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    obj = get_object(client, ref)
    with _cache_lock:
        _cache[key] = obj
        while len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)
    return obj
