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
cache what they read (``cached``) without ever going stale. Blob ids are never reused, so a
cache entry of a deleted object is never mistaken for a new one.

What a job stores only for its own later tasks (results a reduce has consumed, broadcasts of
past iterations, an application's scratch arrays) is removed with ``delete_objects`` once no
task can need it: a 10 M-edge PageRank stored about 900 MB of such objects per run, and kept
them until someone deleted the blobs by hand.
"""

from __future__ import annotations

import logging
import pickle
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import tomus
from tomus.compute.engine import count_read, count_write
from tomus.errors import NotFound, TomusError

__all__ = ["Ref", "cached", "delete_objects", "get_bytes", "get_object", "put_bytes", "put_object"]

_log = logging.getLogger("tomus.compute")


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


def delete_objects(client: tomus.Client, refs: Iterable[Ref]) -> None:
    """Deletes the blobs of stored objects no task will read again (the garbage collector
    then reclaims their chunks). An object already gone is skipped; any other failure is
    logged, not raised: the job's answer does not depend on it, and the blob is left for
    ``tomus blob delete``."""
    for ref in refs:
        if ref.size == 0:
            continue  # an empty object has no blob (see put_bytes)
        try:
            client.delete_blob(ref.blob)
        except NotFound:
            pass
        except TomusError as e:
            _log.warning("could not delete stored object (blob %d): %s", ref.blob, e)


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
#: One lock per object being read: the threads of a process that want it together (the
#: first tasks of a pass, on thread workers) wait for one read instead of each reading it.
_loading: dict[tuple[str, Ref], threading.Lock] = {}


def cached(client: tomus.Client, ref: Ref) -> Any:
    """``get_object`` through a small per-process cache: for objects every task of a job reads
    (a broadcast, A-Brain's imaging matrix), read once per worker process instead of once per
    task."""
    key = (client.addr, ref)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        loading = _loading.setdefault(key, threading.Lock())
    with loading:
        with _cache_lock:
            if key in _cache:  # another thread read it meanwhile
                _cache.move_to_end(key)
                return _cache[key]
        try:
            obj = get_object(client, ref)
        except BaseException:
            with _cache_lock:
                _loading.pop(key, None)
            raise
        with _cache_lock:
            _cache[key] = obj
            _loading.pop(key, None)
            while len(_cache) > _CACHE_ENTRIES:
                _cache.popitem(last=False)
    return obj
