"""MapReduce with its shuffle in shared, appended blobs.

Map tasks read a split (placed, through Dask hints, on a worker next to its chunks), group their
key/value pairs by partition, optionally combine each key's values, and *append* one frame per
partition to that partition's blob. All mappers append to the same R blobs at once: the
concurrent append tomus is built for replaces the R x M intermediate files of a classic shuffle.
The driver records, from each finished map, the version its appends created and the attempt
that made them; a reducer then reads its partition blob at one fixed version and keeps only the
frames of the winning attempts, so a map retried after its worker died never counts twice.

The map/reduce barrier is inherent here (a reducer needs every map's output for its keys). For
reductions to a single answer use ``IterativeReduce``; ``aggregate=`` adds the classic final
aggregator over the R reducer outputs, the shape MapIterativeReduce is compared against.

Every finished task is also appended to the job's task records (``tomus.compute.tasklog``), so
the dashboard draws its map and reduce tasks per worker (``/jobs``). A MapReduce job's id is its
first partition blob's id: unique in the cluster, like an IterativeReduce job's log blob.
"""

from __future__ import annotations

import pickle
import secrets
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import tomus
from tomus.compute import frames
from tomus.compute.engine import Session, TaskRecord, TimelineTotals, current, execute, session
from tomus.compute.splits import Input, Split, iter_lines, plan_splits, read_text
from tomus.compute.storage import Ref, get_object, put_object
from tomus.compute.tasklog import TaskLog

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client as DaskClient
    from distributed import Future

__all__ = ["MapReduce", "MapReduceResult", "default_partition", "format_line", "part_name"]

_PARTITION_CHUNK = 1 << 20

Pairs = Iterable[tuple[Any, Any]]
T = TypeVar("T")  # what a task returns


def default_partition(key: object) -> int:
    """A hash stable across processes (Python's ``hash`` of str/bytes is salted per process)."""
    if isinstance(key, bytes):
        return zlib.crc32(key)
    if isinstance(key, str):
        return zlib.crc32(key.encode())
    if isinstance(key, int):
        return key & 0x7FFFFFFF
    return zlib.crc32(pickle.dumps(key, protocol=5))


@dataclass(frozen=True)
class _Spec:
    mapper: Callable[[bytes], Pairs]
    reducer: Callable[[Any, list[Any]], Any]
    combiner: Callable[[Any, list[Any]], Any] | None
    partitions: int
    per: str
    partition: Callable[[Any], int]


@dataclass(frozen=True)
class _MapOutput:
    index: int
    attempt: int
    appended: dict[int, int]  # partition -> version created by this attempt's append
    records: int


@dataclass
class MapReduceResult(TimelineTotals):
    """The output blobs (one per partition, a pickled list of (key, value) sorted by key when
    keys are comparable), the aggregate's value if one ran, and the timeline."""

    outputs: list[Ref]
    partition_blobs: list[int]
    value: Any
    timeline: list[TaskRecord]
    elapsed: float = 0.0
    addr: str = field(default="", repr=False)
    files: list[str] = field(default_factory=list)  # the part files written with output=
    job_id: int = 0  # the dashboard's id of the job's task records (/job?id=N)

    def items(self, client: tomus.Client | None = None) -> Iterator[tuple[Any, Any]]:
        """Every (key, value) of the output, partition by partition."""
        client = client or tomus.connect(self.addr)
        for ref in self.outputs:
            yield from get_object(client, ref)

    def to_dict(self, client: tomus.Client | None = None) -> dict[Any, Any]:
        return dict(self.items(client))


# --- task bodies --------------------------------------------------------------------------------


def _pairs(spec: _Spec, text: bytes) -> Pairs:
    if spec.per == "split":
        return spec.mapper(text)
    return (kv for line in iter_lines(text) for kv in spec.mapper(line))


def _map_body(spec: _Spec, index: int, split: Split, partition_blobs: Sequence[int]) -> _MapOutput:
    ctx = current()
    text = read_text(ctx.client, split)
    groups: list[dict[Any, list[Any]]] = [{} for _ in range(spec.partitions)]
    records = 0
    for key, value in _pairs(spec, text):
        groups[spec.partition(key) % spec.partitions].setdefault(key, []).append(value)
        records += 1
    attempt = secrets.randbits(63)  # this execution of the task; a retry gets another
    appended: dict[int, int] = {}
    for p, group in enumerate(groups):
        if not group:
            continue
        if spec.combiner is not None:
            combine = spec.combiner
            items = [(k, [combine(k, vs)]) for k, vs in group.items()]
        else:
            items = list(group.items())
        frame = frames.encode(pickle.dumps(items, protocol=5), tag=index, attempt=attempt)
        version, _ = ctx.client.open_blob(partition_blobs[p]).append(frame)
        ctx.wrote(len(frame))
        appended[p] = version
    return _MapOutput(index, attempt, appended, records)


def _map_task(
    addr: str, spec: _Spec, index: int, split: Split, partition_blobs: Sequence[int]
) -> tuple[_MapOutput, TaskRecord]:
    return execute(
        "map", f"m{index}", addr, split.hosts, _map_body, spec, index, split, partition_blobs
    )


def _sorted(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    try:
        return sorted(items, key=lambda kv: kv[0])
    except TypeError:  # keys of mixed types: keep arrival order
        return items


def part_name(output: str, p: int) -> str:
    """The output file of reducer ``p``: ``<output>/part-00000`` ..."""
    return f"{output}/part-{p:05d}"


def _text(x: object) -> str:
    if isinstance(x, bytes):
        return x.decode("utf-8", errors="backslashreplace")
    return str(x)


def format_line(key: object, value: object) -> bytes:
    """One line of an output file: ``key\tvalue\n`` (bytes decoded as UTF-8, others str())."""
    return f"{_text(key)}\t{_text(value)}\n".encode()


def _write_part(client: tomus.Client, path: str, items: list[tuple[Any, Any]]) -> int:
    """Writes the part file as one new version of its whole content (a retried reducer just
    replaces it again); returns the bytes written."""
    _, blob = client.namespace().create(path, _PARTITION_CHUNK, 1, False)
    writer = blob.writer()
    n = 0
    batch: list[bytes] = []
    size = 0
    for k, v in items:
        line = format_line(k, v)
        batch.append(line)
        size += len(line)
        if size >= _PARTITION_CHUNK:
            writer.write(b"".join(batch))
            n, batch, size = n + size, [], 0
    if batch:
        writer.write(b"".join(batch))
        n += size
    if n:
        writer.commit_replace()
    else:
        blob.replace(b"")
    return n


def _reduce_body(
    spec: _Spec,
    blob_id: int,
    version: int,
    accepted: dict[int, int],
    output: str | None = None,
    p: int = 0,
) -> Ref:
    ctx = current()
    merged: dict[Any, list[Any]] = {}
    if version:
        blob = ctx.client.open_blob(blob_id)
        data = blob.read(0, blob.size(version=version), version=version)
        ctx.read(len(data))
        for f in frames.iter_frames(data):
            if accepted.get(f.tag) != f.attempt:
                continue  # a frame of a map attempt that did not win (its worker died)
            for key, values in pickle.loads(f.payload):
                merged.setdefault(key, []).extend(values)
    out = _sorted([(k, spec.reducer(k, vs)) for k, vs in merged.items()])
    if output is not None:
        ctx.wrote(_write_part(ctx.client, part_name(output, p), out))
    return put_object(ctx.client, out)


def _reduce_task(
    addr: str,
    spec: _Spec,
    p: int,
    blob_id: int,
    version: int,
    accepted: dict[int, int],
    output: str | None = None,
) -> tuple[Ref, TaskRecord]:
    return execute(
        "reduce", f"p{p}", addr, (), _reduce_body, spec, blob_id, version, accepted, output, p
    )


def _aggregate_body(fn: Callable[[list[list[tuple[Any, Any]]]], Any], outputs: list[Ref]) -> Ref:
    client = current().client
    return put_object(client, fn([get_object(client, r) for r in outputs]))


def _aggregate_task(
    addr: str, fn: Callable[[list[list[tuple[Any, Any]]]], Any], outputs: list[Ref]
) -> tuple[Ref, TaskRecord]:
    return execute("aggregate", "aggregate", addr, (), _aggregate_body, fn, outputs)


# --- the driver ---------------------------------------------------------------------------------


class MapReduce:
    """``mapper`` emits (key, value) pairs per line (``per="record"``) or per split's text
    (``per="split"``, vectorized); ``combiner(key, values) -> value`` pre-reduces in the map
    task; ``reducer(key, values) -> value``; ``partitions``: R reducers. ``aggregate(outputs)``,
    if given, runs once on the R outputs and its value becomes ``result.value``."""

    def __init__(
        self,
        mapper: Callable[[bytes], Pairs],
        reducer: Callable[[Any, list[Any]], Any],
        *,
        combiner: Callable[[Any, list[Any]], Any] | None = None,
        partitions: int = 2,
        per: Literal["record", "split"] = "record",
        partition: Callable[[Any], int] = default_partition,
        aggregate: Callable[[list[list[tuple[Any, Any]]]], Any] | None = None,
        retries: int = 1,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {partitions}")
        if per not in ("record", "split"):
            raise ValueError(f"per must be 'record' or 'split', got {per!r}")
        self.spec = _Spec(mapper, reducer, combiner, partitions, per, partition)
        self.aggregate = aggregate
        self.retries = retries

    def run(
        self,
        inputs: Input | Iterable[Input],
        client: DaskClient | None = None,
        addr: str | None = None,
        *,
        split_size: int | None = None,
        on_task: Callable[[TaskRecord], None] | None = None,
        workers: int | None = None,
        output: str | None = None,
    ) -> MapReduceResult:
        """Runs over the text blobs, files or directories (or splits) ``inputs``; engine
        arguments as for ``IterativeReduce.run``.

        ``output``: a directory of the tomus namespace that gets one text file per reducer,
        ``part-00000`` ... (one ``key\tvalue`` line per key, in key order); other ``part-*``
        files already there are removed. The in-memory result is kept either way."""
        with session(client, addr, workers=workers) as s:
            return self.run_in(s, inputs, split_size=split_size, on_task=on_task, output=output)

    def run_in(
        self,
        s: Session,
        inputs: Input | Iterable[Input],
        *,
        split_size: int | None = None,
        on_task: Callable[[TaskRecord], None] | None = None,
        output: str | None = None,
    ) -> MapReduceResult:
        started = time.time()
        if output is not None:
            output = output.removeprefix("tomus://").strip("/")
            s.tomus.namespace().mkdir(output, True)
        token = secrets.token_hex(4)
        splits = plan_splits(s.tomus, inputs, split_size)
        blobs = [
            s.tomus.create_blob(chunk_size=_PARTITION_CHUNK).id for _ in range(self.spec.partitions)
        ]
        timeline: list[TaskRecord] = []
        job_id = blobs[0]
        header = {"kind": "mapreduce", "maps": len(splits), "partitions": self.spec.partitions}
        tasks = TaskLog(s.tomus, job_id, header)

        def done(out: tuple[T, TaskRecord]) -> T:
            value, record = out
            timeline.append(record)
            tasks.task(record)
            if on_task is not None:
                on_task(record)
            return value

        try:
            outputs, value, files = self._run_tasks(s, splits, blobs, token, done, output)
        finally:
            tasks.close()
        elapsed = time.time() - started
        return MapReduceResult(outputs, blobs, value, timeline, elapsed, s.addr, files, job_id)

    def _run_tasks(
        self,
        s: Session,
        splits: list[Split],
        blobs: list[int],
        token: str,
        done: Callable[[tuple[Any, TaskRecord]], Any],
        output: str | None,
    ) -> tuple[list[Ref], Any, list[str]]:
        """The maps, then the reducers at the versions the maps' appends made, then the
        aggregate if any; every finished task goes through ``done``. Returns the reducers'
        outputs, the aggregate's value and the part files written."""
        futures = [
            s.dask.submit(
                _map_task,
                *(s.addr, self.spec, i, split, blobs),
                key=f"tomus-mr-map-{token}-{i}",
                retries=self.retries,
                **s.placement.submit_options(split.hosts),
            )
            for i, split in enumerate(splits)
        ]
        accepted: dict[int, int] = {}
        versions = [0] * self.spec.partitions
        for out in _gather(futures, done):
            accepted[out.index] = out.attempt
            for p, v in out.appended.items():
                versions[p] = max(versions[p], v)
        reducers = [
            s.dask.submit(
                _reduce_task,
                *(s.addr, self.spec, p, blobs[p], versions[p], accepted, output),
                key=f"tomus-mr-reduce-{token}-{p}",
                retries=self.retries,
            )
            for p in range(self.spec.partitions)
        ]
        outputs = list(_gather(reducers, done))
        files: list[str] = []
        if output is not None:
            files = [part_name(output, p) for p in range(self.spec.partitions)]
            _remove_stale_parts(s.tomus, output, set(files))
        value = None
        if self.aggregate is not None:
            fut = s.dask.submit(
                _aggregate_task, s.addr, self.aggregate, outputs,
                key=f"tomus-mr-aggregate-{token}", retries=self.retries,
            )  # fmt: skip
            (ref,) = _gather([fut], done)
            value = get_object(s.tomus, ref)
        return outputs, value, files


def _remove_stale_parts(client: tomus.Client, output: str, keep: set[str]) -> None:
    """Removes ``part-*`` files of an earlier run with more reducers from ``output``."""
    ns = client.namespace()
    for e in ns.list(output, False):
        name = e["name"].strip("/")
        if e["type"] == "file" and name.rsplit("/", 1)[-1].startswith("part-") and name not in keep:
            ns.delete(name, False)


def _gather(
    futures: list[Future[tuple[T, TaskRecord]]], done: Callable[[tuple[T, TaskRecord]], T]
) -> list[T]:
    """Results in submission order, recording each task as it finishes; on the first failure
    the other tasks are cancelled and the task's exception is raised."""
    from distributed import as_completed

    results: dict[Key, T] = {}
    try:
        loop = futures[0].client.loop if futures else None
        for fut in as_completed(futures, loop=loop):
            # An error raises here; a task whose worker died after it finished is computed
            # again by Dask and result() waits for it.
            results[fut.key] = done(fut.result())
    finally:
        for f in futures:
            if f.key not in results:
                f.cancel()
    return [results[f.key] for f in futures]
