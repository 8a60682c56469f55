"""The job log: what a driver needs to resume an IterativeReduce job after it restarts.

A small blob of frames, appended by the driver only (one writer, so its order is the order in
which results became known): a header naming the job, then one record per result of a task
(where the task stored it in tomus, or the small result itself). Replaying the log rebuilds the
set of results still waiting to be reduced, so a new driver given the same ``job_id`` runs only
the map tasks no logged result covers and goes on reducing from there instead of starting
over.

A job that keeps its results in memory (``IterativeReduce(durable=False)``) logs that a task
ran but not its result (``held``): a replay skips those records, so a resumed job computes
them again.

The job id is the log blob's id. ``create_job`` makes one up front, so a caller can note it
before the first task runs.

The driver appends through ``append_later``: one writer thread per log appends the records in
the order given while the driver goes on reacting to results (a synchronous append cost the
driver ~15 ms per task, more than a small task itself), the records given during an append
together in the next one (``appender``); ``close`` waits for them. A driver that dies loses at
most the records not yet written, whose tasks a resumed driver simply runs again.

The same thread deletes the results a reduce consumed (``delete_later``), after the reduce's
record: a replay never needs a consumed result, and until that record is written a resumed
driver would still reduce them.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tomus
from tomus.compute import frames
from tomus.compute.appender import Appender
from tomus.compute.storage import Ref, delete_objects, get_object, put_bytes

__all__ = ["INLINE_BYTES", "Held", "JobLog", "Replay", "StoredResult", "create_job", "keep"]

_LOG_CHUNK = 64 << 10


#: A result whose pickle is at most this many bytes, and that is not the job's final one,
#: travels inside its record (the task's answer, the reducer's arguments, the log) instead of
#: in a blob of its own: for KMeans' sums or a word count's top 10, creating, writing, reading
#: and deleting a blob cost more than the result. The final result is always stored.
INLINE_BYTES = 64 << 10

#: The ``ref`` of a result kept inline: no blob.
NO_BLOB = Ref(0, 0, 0, 0)


@dataclass(frozen=True)
class Held:
    """A result kept in memory, as it was made: carried in the task's answer to the driver and
    in a reduce's arguments (``IterativeReduce(durable=False)``)."""

    value: Any


@dataclass(frozen=True)
class StoredResult:
    """A map or reduce output, as the driver and the log know it: stored in tomus (``ref``),
    small and carried in the record itself (``inline``, its pickle), or kept in memory
    (``held``); ``ref`` is NO_BLOB for the last two."""

    id: str  # "m<index>" for map task <index>, "r<seq>" for reduce tasks
    factor: int  # map tasks covered (the paper's reduce factor)
    ref: Ref
    inputs: tuple[str, ...] = ()  # for reduce results: the results combined
    covers: tuple[int, ...] = ()  # map indexes covered (driver side; not logged)
    hosts: tuple[str, ...] = ()  # storage hosts holding the stored bytes
    inline: bytes | None = field(default=None, repr=False)
    held: Held | None = field(default=None, repr=False)

    @property
    def stored(self) -> bool:
        """Whether the result is in a blob of its own (deleted once a reduce consumed it)."""
        return self.inline is None and self.held is None

    def load(self, client: tomus.Client) -> Any:
        """The result's value."""
        if self.held is not None:
            return self.held.value
        if self.inline is not None:
            return pickle.loads(self.inline)
        return get_object(client, self.ref)


def keep(client: tomus.Client, value: object, *, final: bool) -> tuple[Ref, bytes | None]:
    """Stores ``value`` in a blob of its own, or for a small one that is not the job's final
    result, keeps its pickle inline: (ref, None) or (NO_BLOB, pickle)."""
    data = pickle.dumps(value, protocol=5)
    if not final and len(data) <= INLINE_BYTES:
        return NO_BLOB, data
    return put_bytes(client, data), None


def create_job(client: tomus.Client) -> int:
    """A new, empty job log; pass its id as ``job_id=`` to run (and to resume) a job."""
    return int(client.create_blob(chunk_size=_LOG_CHUNK).id)


@dataclass
class Replay:
    """The state a log describes: results accepted and those not yet consumed by a reduce."""

    header: dict[str, Any] | None = None
    accepted: dict[str, StoredResult] = field(default_factory=dict)
    available: dict[str, StoredResult] = field(default_factory=dict)
    covered: set[int] = field(default_factory=set)
    next_reduce: int = 0


class JobLog:
    """Appends records to, and replays, the log blob ``job_id``."""

    def __init__(self, client: tomus.Client, job_id: int) -> None:
        self.job_id = job_id
        self.client = client
        self.blob = client.open_blob(job_id)
        self._writer: Appender | None = None

    def append(self, record: Mapping[str, object]) -> None:
        self.blob.append(frames.encode(pickle.dumps(record, protocol=5)))

    def _background(self) -> Appender:
        if self._writer is None:
            blob = self.blob
            self._writer = Appender(f"joblog-{self.job_id}", lambda: blob)
        return self._writer

    def append_later(self, record: Mapping[str, object]) -> None:
        """Appends ``record`` in the background, after every record given before it."""
        self._background().append(frames.encode(pickle.dumps(record, protocol=5)))

    def delete_later(self, refs: Sequence[Ref]) -> None:
        """Deletes the stored objects ``refs`` in the background, once every record given
        before has been appended (failures are logged by ``delete_objects``)."""
        if refs:
            self._background().then(delete_objects, self.client, list(refs))

    def close(self) -> None:
        """Waits for the background appends; raises the first one's error, if any failed."""
        if self._writer is None:
            return
        writes = self._writer.close()
        self._writer = None
        for w in writes:
            w.result()

    def records(self) -> Iterator[dict[str, Any]]:
        size = self.blob.size()
        if size == 0:
            return
        for f in frames.iter_frames(self.blob.read(0, size)):
            yield pickle.loads(f.payload)

    def replay(self) -> Replay:
        """Rebuilds the job state: a map result counts once per map index, a reduce result only
        if every input is still unconsumed (so a log can never make a result count twice)."""
        state = Replay()
        for rec in self.records():
            kind = rec.get("type")
            if kind == "job":
                state.header = rec
            elif rec.get("held"):
                # Kept in memory by the run that logged it: gone with that run. Its reduce id
                # stays taken, so a new reduce never reuses it.
                if kind == "reduce":
                    state.next_reduce = max(state.next_reduce, int(rec["id"][1:]) + 1)
            elif kind == "map":
                index = rec["index"]
                if index in state.covered:
                    continue
                r = StoredResult(
                    f"m{index}", 1, rec["ref"], (), (index,), rec.get("hosts", ()),
                    rec.get("inline"),
                )  # fmt: skip
                state.covered.add(index)
                state.accepted[r.id] = r
                state.available[r.id] = r
            elif kind == "reduce":
                inputs = tuple(rec["inputs"])
                seq = int(rec["id"][1:])
                state.next_reduce = max(state.next_reduce, seq + 1)
                if rec["id"] in state.accepted or not all(i in state.available for i in inputs):
                    continue
                parts = [state.available.pop(i) for i in inputs]
                covers = tuple(sorted(c for p in parts for c in p.covers))
                r = StoredResult(
                    rec["id"], sum(p.factor for p in parts), rec["ref"], inputs, covers,
                    rec.get("hosts", ()), rec.get("inline"),
                )  # fmt: skip
                state.accepted[r.id] = r
                state.available[r.id] = r
        return state
