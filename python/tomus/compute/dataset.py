"""Chunked numeric datasets (MATE's data organization) stored in tomus.

A dataset is cut into a few *data objects* (one blob each), so concurrent tasks can spread their
reads over several objects, and each object into logical *chunks*: ranges of whole records sized
for one task's memory. An *index blob* records, per chunk, the object, blob, version, offset,
size and record count, with the dtype and shape of a record; tasks are built from it without
touching the data. A chunk is read straight into a numpy array (``Blob.read_into``: the native
client fetches the underlying storage chunks in parallel, with the GIL released).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

import tomus
from tomus.compute.engine import count_read, count_write
from tomus.compute.splits import hosts_by_range

__all__ = ["Chunk", "Dataset", "Task"]

FORMAT = "tomus.dataset/1"


@dataclass(frozen=True)
class Chunk:
    """``records`` records of ``shape`` and ``dtype`` at ``[offset, offset + size)`` of a blob."""

    object: int  # index of the data object in the dataset
    blob: int
    version: int
    offset: int
    size: int
    records: int
    first: int  # index of the chunk's first record in the whole dataset
    dtype: str
    shape: tuple[int, ...]
    hosts: tuple[str, ...] = ()

    def read(self, client: tomus.Client) -> np.ndarray:
        """The chunk as an array of ``(records, *shape)``."""
        out = np.empty((self.records, *self.shape), dtype=np.dtype(self.dtype))
        if self.size:
            # ``.data``: the array's memory as a memoryview (numpy declares arrays buffers to
            # type checkers only from Python 3.12 on).
            client.open_blob(self.blob).read_into(out.data, self.offset, version=self.version)
            count_read(self.size)
        return out


@dataclass(frozen=True)
class Task:
    """The chunks one task processes (MATE's job): consecutive chunks of one object, or
    several whole small objects (``Dataset.tasks``)."""

    chunks: tuple[Chunk, ...]

    @property
    def hosts(self) -> tuple[str, ...]:
        seen: dict[str, int] = {}
        for c in self.chunks:
            for h in c.hosts:
                seen[h] = seen.get(h, 0) + c.size
        if not seen:
            return ()
        top = max(seen.values())
        return tuple(sorted(h for h, n in seen.items() if n == top))

    @property
    def object(self) -> int:
        """The (first) object the task reads."""
        return self.chunks[0].object


def _blob_chunk_size(chunk_bytes: int) -> int:
    size = 4 << 10
    while size * 2 <= chunk_bytes and size < (4 << 20):
        size *= 2
    return size


@dataclass
class Dataset:
    """The index of a chunked dataset (``Dataset.write`` makes one, ``Dataset.open`` reads one)."""

    index: int  # the index blob
    dtype: str
    shape: tuple[int, ...]  # of one record
    objects: list[int]  # blob ids
    chunks: list[Chunk] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(c.records for c in self.chunks)

    @property
    def nbytes(self) -> int:
        return sum(c.size for c in self.chunks)

    @classmethod
    def write(
        cls,
        client: tomus.Client,
        data: np.ndarray | Sequence[np.ndarray],
        *,
        objects: int = 2,
        chunk_records: int | None = None,
        chunk_bytes: int = 1 << 20,
        replication: int = 1,
    ) -> Dataset:
        """Stores ``data`` (records along axis 0) as a chunked dataset and writes its index.

        A single array is cut into ``objects`` data objects of contiguous records; a sequence of
        arrays is one object each. Chunks hold ``chunk_records`` records (default: as many as fit
        in ``chunk_bytes``).
        """
        parts = (
            [np.ascontiguousarray(p) for p in np.array_split(data, max(1, objects))]
            if isinstance(data, np.ndarray)
            else [np.ascontiguousarray(p) for p in data]
        )
        parts = [p for p in parts if len(p)] or parts[:1]
        dtype, shape = parts[0].dtype, parts[0].shape[1:]
        if any(p.dtype != dtype or p.shape[1:] != shape for p in parts):
            raise ValueError("every object must have the same dtype and record shape")
        record_bytes = max(1, dtype.itemsize * int(np.prod(shape, dtype=np.int64)))
        per_chunk = chunk_records or max(1, chunk_bytes // record_bytes)
        blob_chunk = _blob_chunk_size(per_chunk * record_bytes)
        chunks: list[Chunk] = []
        blobs: list[int] = []
        first = 0
        for o, part in enumerate(parts):
            blob = client.create_blob(chunk_size=blob_chunk, replication=replication)
            version = blob.write(0, part.data) if part.nbytes else 0
            count_write(part.nbytes)
            blobs.append(blob.id)
            for r in range(0, len(part), per_chunk):
                n = min(per_chunk, len(part) - r)
                chunks.append(
                    Chunk(
                        o,
                        blob.id,
                        version,
                        r * record_bytes,
                        n * record_bytes,
                        n,
                        first + r,
                        dtype.str,
                        tuple(shape),
                    )
                )
            first += len(part)
        index = client.create_blob(chunk_size=64 << 10, replication=replication)
        doc = {
            "format": FORMAT,
            "dtype": dtype.str,
            "shape": list(shape),
            "objects": blobs,
            "chunks": [
                {
                    "object": c.object,
                    "blob": c.blob,
                    "version": c.version,
                    "offset": c.offset,
                    "size": c.size,
                    "records": c.records,
                    "first": c.first,
                }
                for c in chunks
            ],
        }
        index.write(0, json.dumps(doc).encode())
        return cls(index.id, dtype.str, tuple(shape), blobs, chunks).locate(client)

    @classmethod
    def open(cls, client: tomus.Client, index: int) -> Dataset:
        """Reads the index blob ``index`` (and where the chunks are stored)."""
        doc = json.loads(client.open_blob(index).read())
        if doc.get("format") != FORMAT:
            raise ValueError(f"blob {index} is not a dataset index ({doc.get('format')!r})")
        shape = tuple(doc["shape"])
        chunks = [Chunk(dtype=doc["dtype"], shape=shape, **c) for c in doc["chunks"]]
        return cls(index, doc["dtype"], shape, list(doc["objects"]), chunks).locate(client)

    def locate(self, client: tomus.Client) -> Dataset:
        """Fills in the storage hosts of every chunk (one locations request per object)."""
        located: list[Chunk] = []
        by_blob: dict[int, list[tuple[int, int, list[str]]]] = {}
        for c in self.chunks:
            if c.size == 0:
                located.append(c)
                continue
            if c.blob not in by_blob:
                blob = client.open_blob(c.blob)
                by_blob[c.blob] = blob.locations(0, blob.size(version=c.version), c.version)
            hosts = hosts_by_range(by_blob[c.blob], c.offset, c.offset + c.size)
            located.append(replace(c, hosts=hosts))
        self.chunks = located
        return self

    def read(self, client: tomus.Client) -> np.ndarray:
        """The whole dataset as one array (for small data and tests)."""
        if not self.chunks:
            return np.empty((0, *self.shape), dtype=np.dtype(self.dtype))
        return np.concatenate([c.read(client) for c in self.chunks])

    def tasks(self, chunks_per_task: int = 1) -> list[Task]:
        """Tasks of at most ``chunks_per_task`` chunks, ordered round-robin over the objects so
        the tasks running at any moment read different objects (MATE's selective assignment:
        fewer readers per object). An object with more chunks than a task takes is cut into
        tasks of consecutive chunks, as equal as they come (10 chunks at 8 per task: 5 and 5,
        not 8 and 2); smaller objects go whole, several to a task in object order, so the
        number of objects does not set the size of the tasks."""
        if chunks_per_task < 1:
            raise ValueError(f"chunks_per_task must be at least 1, got {chunks_per_task}")
        per = chunks_per_task
        queues: list[list[Task]] = []
        packed: list[Chunk] = []
        for o in sorted({c.object for c in self.chunks}):
            mine = [c for c in self.chunks if c.object == o]
            if len(mine) >= per:
                cuts = -(-len(mine) // per)
                bounds = [i * len(mine) // cuts for i in range(cuts + 1)]
                queues.append([Task(tuple(mine[a:b])) for a, b in itertools.pairwise(bounds)])
                continue
            if packed and len(packed) + len(mine) > per:
                queues.append([Task(tuple(packed))])
                packed = []
            packed.extend(mine)
        if packed:
            queues.append([Task(tuple(packed))])
        out: list[Task] = []
        for i in range(max((len(q) for q in queues), default=0)):
            out.extend(q[i] for q in queues if i < len(q))
        return out
