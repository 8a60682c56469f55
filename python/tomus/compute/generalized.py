"""GeneralizedReduction: MATE's reduction-object API over chunked datasets.

Instead of emitting (key, value) pairs that are then sorted, grouped and shuffled, a task folds
each chunk straight into a *reduction object* (``local``), and the objects of all tasks are
combined with ``merge``: no intermediate pairs, no shuffle. Here:

- tasks are MATE's jobs: consecutive chunks of one data object (or several whole objects
  smaller than a task), ordered round-robin over the objects so concurrent tasks read
  different objects (``Dataset.tasks``), and placed by Dask
  next to their chunks. How many chunks a task takes is adaptive: enough that a task runs about
  ``task_seconds`` at the throughput earlier passes of the same reduction measured (tens of MB
  before any was measured), so numpy kernels, not per-task costs, dominate, and each task
  combines its chunks on the worker before the tree sees them; but at least two tasks per
  worker when the dataset allows, so no worker idles at the end of a pass;
- within a task, runs of chunks adjacent in their blob are read with one ``read_into`` into a
  preallocated array (the native client fetches the storage chunks in parallel, GIL released),
  the next run while the current one is reduced. Each worker keeps the runs it read in a
  bounded cache (blob versions are immutable, so it is never stale), and the next pass over
  the same dataset asks for the worker that ran each task before: an iterative algorithm reads
  its data from storage once, not once per pass;
- the global merge is an IterativeReduce tree (``ratio`` objects per merge task), so merging
  starts while chunks are still being processed and its results are stored in tomus;
- the reduction itself (an instance of a subclass, or of this class built from functions)
  travels with the tasks when small, else it is stored in tomus once per pass and loaded once
  per worker: that is how an iterative algorithm broadcasts the previous pass's result
  (KMeans' centers) to every task.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy as np

import tomus
from tomus.compute.dataset import Chunk, Dataset, Task
from tomus.compute.engine import Session, TaskRecord, attach, count_read, current, use_session
from tomus.compute.iterative import IterativeReduce, IterativeResult
from tomus.compute.joblog import INLINE_BYTES
from tomus.compute.memcache import MemoryCache
from tomus.compute.storage import Ref, cached, delete_objects, put_bytes

if TYPE_CHECKING:
    from distributed import Client as DaskClient

__all__ = ["GeneralizedReduction", "iterate"]


class GeneralizedReduction:
    """Subclass and define ``init``, ``local``, ``merge`` (and optionally ``finalize``), or pass
    them as functions. ``local(obj, chunk)`` gets a numpy array of records (one chunk, or several
    chunks adjacent in storage read at once; read-only, as workers cache it for later passes)
    and must not depend on how records are grouped into calls or the order they come in;
    ``merge(a, b)`` combines two objects."""

    ratio: int = 4
    #: Chunks per task; None: adaptive (see ``task_seconds``).
    chunks_per_task: int | None = None
    #: The target duration of one task when ``chunks_per_task`` is None.
    task_seconds: float = 1.0

    def __init__(
        self,
        init: Callable[[], Any] | None = None,
        local: Callable[[Any, Any], Any] | None = None,
        merge: Callable[[Any, Any], Any] | None = None,
        finalize: Callable[[Any], Any] | None = None,
        *,
        ratio: int | None = None,
        chunks_per_task: int | None = None,
    ) -> None:
        self._init, self._local, self._merge, self._finalize = init, local, merge, finalize
        if ratio is not None:
            self.ratio = ratio
        if chunks_per_task is not None:
            self.chunks_per_task = chunks_per_task

    def init(self) -> Any:
        if self._init is None:
            raise NotImplementedError("define init() or pass init=")
        return self._init()

    def local(self, obj: Any, chunk: Any) -> Any:
        if self._local is None:
            raise NotImplementedError("define local() or pass local=")
        return self._local(obj, chunk)

    def merge(self, a: Any, b: Any) -> Any:
        if self._merge is None:
            raise NotImplementedError("define merge() or pass merge=")
        return self._merge(a, b)

    def finalize(self, obj: Any) -> Any:
        return obj if self._finalize is None else self._finalize(obj)

    def run(
        self,
        dataset: Dataset,
        client: DaskClient | None = None,
        addr: str | None = None,
        *,
        session: Session | None = None,
        on_task: Callable[[TaskRecord], None] | None = None,
        job_id: int | None = None,
    ) -> IterativeResult:
        """One pass over ``dataset``; ``.value`` is ``finalize(merge of every local object)``."""
        with use_session(session, client, addr) as s:
            spec = _Spec.of(s.tomus, self)
            workers = len(s.placement.workers)
            per_task = self.chunks_per_task or _adaptive_chunks(
                type(self).__qualname__, dataset, workers, self.task_seconds
            )
            tasks = dataset.tasks(per_task)
            job = IterativeReduce(
                _Local(spec),
                _Merge(spec),
                ratio=self.ratio
                if self.chunks_per_task
                else _merge_ratio(self.ratio, len(tasks), workers),
                finalize=self.finalize,
            )
            # The worker that ran each task last time over these chunks holds them in its
            # cache: ask for it again (Dask may still move a task to an idle worker).
            placed = _placed.setdefault((s.addr, dataset.index, per_task), {})
            affinity = [placed.get(i) for i in range(len(tasks))]
            try:
                res = job.run_in(s, tasks, on_task=on_task, job_id=job_id, affinity=affinity)
            finally:
                if spec.stored is not None:
                    delete_objects(s.tomus, [spec.stored])  # each pass stores its own
            for t in res.timeline:
                if t.kind == "map" and t.worker != "local":
                    placed[int(t.task[1:])] = t.worker
            _learn(type(self).__qualname__, res, tasks)
            return res


# --- task granularity ---------------------------------------------------------------------------

#: Bytes a task takes before any pass of its reduction was measured.
FIRST_TASK_BYTES = 32 << 20
#: The fewest bytes a task takes whatever was measured (a slow, busy machine measures a low
#: throughput; smaller tasks would only add per-task costs to it).
MIN_TASK_BYTES = 16 << 20
#: Measured map throughput (bytes per second of task time) per reduction class, in this driver.
_throughput: dict[str, float] = {}
#: Per (cluster, dataset, chunks per task): the worker each task last ran on.
_placed: dict[tuple[str, int, int], dict[int, str]] = {}


def _adaptive_chunks(kind: str, dataset: Dataset, workers: int, task_seconds: float) -> int:
    """Chunks per task so a task runs about ``task_seconds``, with at least two tasks per
    worker when there are enough chunks."""
    if not dataset.chunks:
        return 1
    chunk_bytes = max(1, dataset.nbytes // len(dataset.chunks))
    rate = _throughput.get(kind)
    want = FIRST_TASK_BYTES if rate is None else max(MIN_TASK_BYTES, rate * task_seconds)
    per_task = max(1, int(want // chunk_bytes))
    balanced = max(1, -(-len(dataset.chunks) // (2 * max(1, workers))))
    return max(1, min(per_task, balanced))


def _merge_ratio(ratio: int, tasks: int, workers: int) -> int:
    """The tree's ratio for a pass of ``tasks`` tasks. With a few tasks per worker (adaptive
    tasks are sized so), the maps end about together and a tree only adds levels of reduce
    tasks, each a Dask round trip and stored objects, to merging a handful of small reduction
    objects: then one reduce merges them all."""
    return max(ratio, tasks) if tasks <= 4 * max(1, workers) else ratio


def _learn(kind: str, res: IterativeResult, tasks: Sequence[Task]) -> None:
    """The map throughput of this pass: the bytes of input the map tasks took, whether read
    from tomus or from a worker's cache, per second of their run. (Counting the bytes read
    alone, a pass whose chunks were partly cached measured a fraction of its speed, and the
    next pass was cut into 3x as many tasks as it wanted.)"""
    maps = [t for t in res.timeline if t.kind == "map"]
    busy = sum(t.duration for t in maps)
    took = sum(sum(c.size for c in tasks[int(t.task[1:])].chunks) for t in maps)
    if busy > 0 and took > 0:
        _throughput[kind] = took / busy


# --- task bodies: the reduction is loaded from tomus once per worker and pass -------------------


@dataclass(frozen=True)
class _Spec:
    """The reduction of a pass, as its tasks get it: a small one (KMeans' centers: its
    cloudpickle) inside the task itself, a bigger one (A-Brain's imaging matrix) stored once
    and read once per worker (``cached``)."""

    data: bytes | Ref

    @staticmethod
    def of(client: tomus.Client, red: GeneralizedReduction) -> _Spec:
        data = cloudpickle.dumps(red)
        return _Spec(data if len(data) <= INLINE_BYTES else put_bytes(client, data))

    @property
    def stored(self) -> Ref | None:
        return self.data if isinstance(self.data, Ref) else None

    def load(self, client: tomus.Client) -> GeneralizedReduction:
        red: GeneralizedReduction = (
            cached(client, self.data)
            if isinstance(self.data, Ref)
            else cloudpickle.loads(self.data)
        )
        return red


class _Local:
    def __init__(self, spec: _Spec) -> None:
        self.spec = spec

    def __call__(self, task: Task) -> Any:
        ctx = current()
        red = self.spec.load(ctx.client)
        obj = red.init()
        runs = _runs(task.chunks)
        kept = [_kept_run(ctx.client, run) for run in runs]
        if all(data is not None for data in kept):
            # Every run is in this worker's cache (a later pass): nothing to read ahead, and
            # handing each run over from a reader thread cost a few ms of GIL hand-offs.
            for data in kept:
                obj = red.local(obj, data)
            return obj

        def fetch(i: int) -> np.ndarray:
            attach(ctx)
            held = kept[i]  # looked up above: not again
            return held if held is not None else _cached_run(ctx.client, runs[i])

        with ThreadPoolExecutor(1) as reader:  # fetch run i + 1 while run i is reduced
            nxt = reader.submit(fetch, 0)
            for i in range(len(runs)):
                data = nxt.result()
                if i + 1 < len(runs):
                    nxt = reader.submit(fetch, i + 1)
                obj = red.local(obj, data)
        return obj


#: The most bytes one ``read_into`` of adjacent chunks fetches (two such buffers per task).
RUN_BYTES = 16 << 20


def _runs(chunks: tuple[Chunk, ...]) -> list[list[Chunk]]:
    """The chunks cut into runs adjacent in one blob version, of at most ``RUN_BYTES`` each
    (a single larger chunk is a run of its own)."""
    runs: list[list[Chunk]] = []
    for c in chunks:
        last = runs[-1] if runs else None
        if (
            last is not None
            and last[-1].blob == c.blob
            and last[-1].version == c.version
            and last[-1].offset + last[-1].size == c.offset
            and sum(x.size for x in last) + c.size <= RUN_BYTES
        ):
            last.append(c)
        else:
            runs.append([c])
    return runs


#: Bytes of chunks a worker process keeps between passes (``_cached_run``).
CACHE_BYTES = 1 << 30
_runs_kept: MemoryCache[np.ndarray] = MemoryCache(CACHE_BYTES)


def _run_key(client: tomus.Client, run: list[Chunk]) -> tuple[str, int, int, int, int]:
    first = run[0]
    return (client.addr, first.blob, first.version, first.offset, sum(c.size for c in run))


def _kept_run(client: tomus.Client, run: list[Chunk]) -> np.ndarray | None:
    """The records of ``run`` if this process's cache holds them (else None, nothing read)."""
    return _runs_kept.get(_run_key(client, run))


def _cached_run(client: tomus.Client, run: list[Chunk]) -> np.ndarray:
    """``_read_run`` through a per-process LRU cache of at most ``CACHE_BYTES``: an iterative
    algorithm (KMeans) reads the same chunks every pass, and a blob version never changes, so a
    cached copy is never stale. The arrays are read-only (``local`` must not modify its input)."""
    key = _run_key(client, run)
    hit = _runs_kept.get(key)
    if hit is not None:
        return hit
    data = _read_run(client, run)
    size = key[-1]
    if size > CACHE_BYTES // 4:
        return data
    data.flags.writeable = False
    return _runs_kept.put(key, data, size)


def _read_run(client: tomus.Client, run: list[Chunk]) -> np.ndarray:
    """The records of adjacent chunks, read with one ``read_into`` into one new array."""
    if len(run) == 1:
        return run[0].read(client)
    first = run[0]
    records = sum(c.records for c in run)
    out = np.empty((records, *first.shape), dtype=np.dtype(first.dtype))
    size = sum(c.size for c in run)
    client.open_blob(first.blob).read_into(out.data, first.offset, version=first.version)
    count_read(size)
    return out


class _Merge:
    def __init__(self, spec: _Spec) -> None:
        self.spec = spec

    def __call__(self, objs: list[Any]) -> Any:
        red = self.spec.load(current().client)
        return functools.reduce(red.merge, objs)


def iterate(
    first: GeneralizedReduction,
    step: Callable[[Any, int], GeneralizedReduction | None],
    dataset: Dataset,
    passes: int,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    session: Session | None = None,
    on_pass: Callable[[int, IterativeResult], None] | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
) -> list[IterativeResult]:
    """Runs ``first``, then ``step(previous value, pass number)`` for the next pass, up to
    ``passes`` passes or until ``step`` returns None; every pass uses the same Dask and tomus
    session. Returns the result of every pass."""
    results: list[IterativeResult] = []
    with use_session(session, client, addr) as s:
        red: GeneralizedReduction | None = first
        for i in range(passes):
            if red is None:
                break
            res = red.run(dataset, session=s, on_task=on_task)
            results.append(res)
            if on_pass is not None:
                on_pass(i, res)
            red = step(res.value, i + 1) if i + 1 < passes else None
    return results
