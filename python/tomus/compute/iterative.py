"""IterativeReduce: MapIterativeReduce (TomusBlobs paper, section 5.1) on Dask.

Reduce-intensive jobs (one final answer out of many map outputs) lose their parallelism in the
classic shape, where every map must finish before one aggregator combines everything. Here the
reducer is an associative n-ary operator and a *reduction ratio* R says how many results one
reduce task combines. The driver watches results arrive (``distributed.as_completed``; no
barrier between map and reduce phases) and submits a reduce task as soon as R results are
waiting, so reduce work overlaps the maps still running. Every result carries its *reduce
factor*, the number of map tasks it covers; the job ends when a result's factor equals the
number of map tasks. When the count is not a power of R, the last few results are combined by
one smaller reduce once nothing else is in flight, so the number of reduce tasks is always
ceil((n - 1) / (R - 1)): 5 maps with R = 3 give 2 reduces and a final factor of 5.

Every map and reduce output is stored in tomus by the task that made it (or, if small and not
the final result, carried in the task's answer: ``joblog.INLINE_BYTES``; or, in a job made with
``durable=False``, kept in memory whatever its size, as plain Dask keeps results), and the driver
appends a record of it to the job log (``joblog``). Reduce tasks get their inputs as references
to those stored objects (or the small results themselves), not as Dask futures, so when a worker
dies Dask retries just the lost task, which reads its inputs again from tomus instead of
recomputing the maps behind them; and a driver that restarts with the same ``job_id`` replays
the log and carries on from the stored results. Once a reduce's record is in the log, the
results it consumed are deleted: only results still waiting to be reduced, and the final one,
stay stored. The last reduce runs on the driver instead of a worker when its inputs are small
(inline) or held in memory (both already on the driver), or when every worker is a thread of
the driver's process: then it saves a round trip through Dask and moves no more data than a
worker would.
"""

from __future__ import annotations

import hashlib
import pickle
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import tomus
from tomus.compute.engine import (
    Session,
    TaskRecord,
    TimelineTotals,
    attach,
    current,
    execute,
    host_of,
    session,
)
from tomus.compute.joblog import NO_BLOB, Held, JobLog, StoredResult, create_job, keep
from tomus.compute.storage import Ref
from tomus.compute.tasklog import TaskLog

if TYPE_CHECKING:
    from distributed import Client as DaskClient
    from distributed import Future

__all__ = ["IterativeReduce", "IterativeResult", "reduce_tasks_needed"]

Shape = Literal["tree", "classic"]
Assignment = Literal["pull", "static"]


def reduce_tasks_needed(maps: int, ratio: int) -> int:
    """Reduce tasks of a full tree: each R-way reduce removes R - 1 results, a last smaller one
    the rest."""
    return 0 if maps <= 1 else -(-(maps - 1) // (ratio - 1))


@dataclass
class IterativeResult(TimelineTotals):
    """What ran and what came out of an IterativeReduce job."""

    value: Any
    reduce_factor: int  # map tasks covered by the final result (== number of inputs)
    map_tasks: int  # map tasks run by this driver (fewer than the inputs after a resume)
    reduce_tasks: int  # reduce tasks run by this driver
    timeline: list[TaskRecord]
    job_id: int
    covers: tuple[int, ...]  # the map indexes the final result covers, sorted
    resumed: int = 0  # stored results found in the job log and reused
    shape: Shape = "tree"
    elapsed: float = 0.0
    final: StoredResult | None = field(default=None, repr=False)

    @property
    def tree(self) -> list[tuple[str, tuple[str, ...], int]]:
        """The reduce tasks that ran: (result id, inputs, reduce factor)."""
        return [(t.task, t.inputs, t.factor) for t in self.timeline if t.kind == "reduce"]


# --- task bodies (run on workers) -------------------------------------------------------------


def _stored(client: tomus.Client, ref: Ref) -> tuple[str, ...]:
    """The storage hosts holding a freshly stored object (locality hints for its reducer)."""
    if ref.size == 0:
        return ()
    locs = client.open_blob(ref.blob).locations(ref.offset, ref.size, version=ref.version)
    return tuple(sorted({host_of(p) for _, _, ps in locs for p in ps}))


def _kept(
    client: tomus.Client, value: Any, final: bool, durable: bool
) -> tuple[Ref, bytes | None, Held | None]:
    """A task's result as the job keeps it: stored, inline or (``durable=False``) held."""
    if not durable:
        return NO_BLOB, None, Held(value)
    ref, inline = keep(client, value, final=final)
    return ref, inline, None


def _map_body(
    mapper: Callable[[Any], Any],
    index: int,
    item: Any,
    locate: bool,
    final: bool,
    durable: bool,
) -> StoredResult:
    client = current().client
    ref, inline, held = _kept(client, mapper(item), final, durable)
    hosts = _stored(client, ref) if locate else ()
    return StoredResult(f"m{index}", 1, ref, (), (index,), hosts, inline, held)


def _map_task(
    addr: str,
    mapper: Callable[[Any], Any],
    index: int,
    item: Any,
    hosts: tuple[str, ...],
    locate: bool = True,
    final: bool = False,
    durable: bool = True,
) -> tuple[StoredResult, TaskRecord]:
    return execute(
        "map", f"m{index}", addr, hosts, _map_body, mapper, index, item, locate, final, durable
    )


def _read_all(client: tomus.Client, results: Sequence[StoredResult]) -> list[Any]:
    stored = [r for r in results if r.stored]
    if len(stored) <= 1:
        return [r.load(client) for r in results]
    ctx = current()

    def load(r: StoredResult) -> Any:
        attach(ctx)  # count the bytes against this task from the reader threads too
        return r.load(client)

    with ThreadPoolExecutor(min(8, len(stored))) as pool:  # the GIL is released during reads
        return list(pool.map(load, results))


def _reduce_value(
    reducer: Callable[[list[Any]], Any],
    rid: str,
    inputs: Sequence[StoredResult],
    locate: bool,
    final: bool,
    durable: bool,
) -> tuple[StoredResult, Any]:
    """A reduce's result as kept (stored, inline or held), and its value."""
    client = current().client
    value = reducer(_read_all(client, inputs))
    ref, inline, held = _kept(client, value, final, durable)
    covers = tuple(sorted(c for r in inputs for c in r.covers))
    factor = sum(r.factor for r in inputs)
    hosts = _stored(client, ref) if locate else ()
    ids = tuple(r.id for r in inputs)
    return StoredResult(rid, factor, ref, ids, covers, hosts, inline, held), value


def _reduce_body(
    reducer: Callable[[list[Any]], Any],
    rid: str,
    inputs: Sequence[StoredResult],
    locate: bool,
    final: bool,
    durable: bool,
) -> StoredResult:
    return _reduce_value(reducer, rid, inputs, locate, final, durable)[0]


def _reduce_task(
    addr: str,
    reducer: Callable[[list[Any]], Any],
    rid: str,
    inputs: Sequence[StoredResult],
    hosts: tuple[str, ...],
    locate: bool = True,
    final: bool = False,
    durable: bool = True,
) -> tuple[StoredResult, TaskRecord]:
    out, record = execute(
        "reduce", rid, addr, hosts, _reduce_body, reducer, rid, inputs, locate, final, durable
    )
    record.inputs = out.inputs
    record.factor = out.factor
    return out, record


# --- the driver ---------------------------------------------------------------------------------


def _fingerprint(items: Sequence[object]) -> str | None:
    try:
        return hashlib.sha256(pickle.dumps(list(items), protocol=5)).hexdigest()
    except Exception:  # unpicklable by the standard pickler: no check on resume
        return None


class IterativeReduce:
    """Map each input, then reduce results R at a time as they arrive, into one result.

    ``mapper(item) -> value`` runs once per input; ``reducer([value, ...]) -> value`` must be
    associative (and, since results arrive in any order, commutative); ``finalize(value)`` runs
    on the driver on the final value. ``retries``: extra attempts Dask makes for a task that
    raised (a worker that died is handled by Dask regardless).

    ``durable=False`` keeps every result in memory instead of in tomus, as plain Dask keeps
    results: carried in the task's answer to the driver, which runs the reduces of such results
    itself (they are there already). A task lost with its worker is computed again from its
    input; the job cannot be resumed from its log (it records that each task ran, not what it
    made), and the final result has no stored ``ref``. For the passes of an iterative algorithm
    whose inputs are stored and whose results the next pass alone needs: storing an 8 MB vector
    and reading it back cost ~35 ms, a tenth of a PageRank iteration on 10 M edges.
    """

    def __init__(
        self,
        mapper: Callable[[Any], Any],
        reducer: Callable[[list[Any]], Any],
        ratio: int = 2,
        *,
        finalize: Callable[[Any], Any] | None = None,
        retries: int = 1,
        durable: bool = True,
    ) -> None:
        if ratio < 2:
            raise ValueError(f"ratio must be at least 2, got {ratio}")
        self.mapper = mapper
        self.reducer = reducer
        self.ratio = ratio
        self.finalize = finalize
        self.retries = retries
        self.durable = durable

    def run(
        self,
        inputs: Iterable[Any],
        client: DaskClient | None = None,
        addr: str | None = None,
        *,
        job_id: int | None = None,
        shape: Shape = "tree",
        hosts: Callable[[Any], Sequence[str]] | None = None,
        on_task: Callable[[TaskRecord], None] | None = None,
        workers: int | None = None,
    ) -> IterativeResult:
        """Runs the job on ``client`` (default: a LocalCluster for this job) against the tomus
        cluster ``addr`` (default ``$TOMUS_ADDR``, else an embedded cluster).

        ``job_id``: a job log (``tomus.compute.create_job``); if it already holds results, they
        are reused. ``shape="classic"``: all maps, then one reduce of everything (for
        comparison). ``hosts(item)``: storage hosts holding an input (default: its ``hosts``
        attribute, as splits and dataset chunks have). ``on_task``: called on the driver with
        each finished task's record (progress bars).
        """
        items = list(inputs)
        with session(client, addr, workers=workers) as s:
            return self.run_in(s, items, job_id=job_id, shape=shape, hosts=hosts, on_task=on_task)

    def run_in(
        self,
        s: Session,
        items: Sequence[Any],
        *,
        job_id: int | None = None,
        shape: Shape = "tree",
        hosts: Callable[[Any], Sequence[str]] | None = None,
        on_task: Callable[[TaskRecord], None] | None = None,
        assignment: Assignment = "pull",
        affinity: Sequence[str | None] | None = None,
    ) -> IterativeResult:
        """``run`` inside an existing session (several jobs on one cluster).

        ``assignment="static"`` pins map task i to worker i mod W up front (for comparison with
        the default, where idle workers take the next queued task: MATE's pull-based
        assignment, which keeps a slow worker from holding up the job). ``affinity[i]``: a
        worker that map i should preferably run on (it holds i's input in memory)."""
        if not items:
            raise ValueError("IterativeReduce needs at least one input")
        if shape not in ("tree", "classic"):
            raise ValueError(f"shape must be 'tree' or 'classic', got {shape!r}")
        if assignment not in ("pull", "static"):
            raise ValueError(f"assignment must be 'pull' or 'static', got {assignment!r}")
        driver = _Driver(self, s, items, job_id, shape, hosts, on_task)
        driver.static = assignment == "static"
        driver.affinity = affinity
        return driver.run()


class _Driver:
    """One run of a job: submits tasks, reacts to results, keeps the log."""

    def __init__(
        self,
        job: IterativeReduce,
        s: Session,
        items: Sequence[Any],
        job_id: int | None,
        shape: Shape,
        hosts: Callable[[Any], Sequence[str]] | None,
        on_task: Callable[[TaskRecord], None] | None,
    ) -> None:
        self.job, self.s, self.items, self.shape, self.on_task = job, s, items, shape, on_task
        self.hosts = hosts or (lambda item: tuple(getattr(item, "hosts", ()) or ()))
        self.n = len(items)
        self.fresh = job_id is None
        self.job_id = create_job(s.tomus) if job_id is None else job_id
        self.log = JobLog(s.tomus, self.job_id)
        self.token = secrets.token_hex(4)
        self.pool: deque[StoredResult] = deque()
        self.covered: set[int] = set()
        self.pending: dict[Future[tuple[StoredResult, TaskRecord]], str] = {}
        # Reduces the driver ran itself (``_submit_reduce``), waiting to be recorded, and
        # their values.
        self.ran_here: deque[tuple[StoredResult, TaskRecord]] = deque()
        self.values_here: dict[str, Any] = {}
        # Every Dask worker is a thread of this process (``session(processes=False)``).
        self.beside_workers = s.placement.in_process
        # The stored inputs of each reduce submitted: deleted once its own result is logged.
        self.consuming: dict[str, list[Ref]] = {}
        self.timeline: list[TaskRecord] = []
        self.maps_run = 0
        self.reduces_run = 0
        self.next_reduce = 0
        self.static = False
        self.affinity: Sequence[str | None] | None = None
        # Where a result is stored only matters as a placement hint, and hints cannot narrow
        # anything when every worker is on one host: then tasks skip the locations request.
        self.locate = len(s.placement.by_host) > 1

    def _restore(self) -> int:
        """Replays the job log; returns the number of stored results reused."""
        header = {
            "type": "job",
            "maps": self.n,
            "ratio": self.job.ratio,
            "shape": self.shape,
            "fingerprint": _fingerprint(self.items),
        }
        if self.fresh:  # a log made for this run: nothing to replay
            self.log.append_later(header)
            return 0
        state = self.log.replay()
        if state.header is None:
            self.log.append_later(header)
            return 0
        old = state.header
        fp_old, fp_new = old["fingerprint"], header["fingerprint"]
        if old["maps"] != self.n or (fp_old and fp_new and fp_old != fp_new):
            raise ValueError(
                f"job {self.job_id} was started with {old['maps']} different inputs; "
                "resume it with the same inputs or start a new job"
            )
        self.pool.extend(state.available.values())
        self.covered = state.covered
        self.next_reduce = state.next_reduce
        return len(state.available)

    def run(self) -> IterativeResult:
        from distributed import as_completed

        started = time.time()
        resumed = self._restore()
        # Every finished task also goes to the job's task records in tomus (the dashboard's
        # timeline of tasks per worker).
        header = {"kind": "iterative", "maps": self.n, "ratio": self.job.ratio}
        self.tasks = TaskLog(self.s.tomus, self.job_id, header)
        final = next((r for r in self.pool if r.factor == self.n), None)
        # The job's own client's loop: it is not the process-wide default client. With results:
        # the iterator gathers each result on the client's loop as the task ends, so the
        # driver does not pay one more blocking round trip into that loop per task (7 ms
        # each on a busy machine, a fifth of a small job's time).
        self.ac = as_completed(loop=self.s.dask.loop, with_results=True, raise_errors=False)
        try:
            # Inside the try: a resumed job with every map done starts with its last merge,
            # which the driver may run itself (and which may raise); the logs still close.
            if final is None:
                for i, item in enumerate(self.items):
                    if i not in self.covered:
                        self._submit_map(i, item)
                self._schedule_reduces()
            while final is None:
                if self.ran_here:
                    out, record = self.ran_here.popleft()
                else:
                    out, record = self._next_from_dask()
                self._record(out, record)
                if out.factor == self.n:
                    final = out
                else:
                    self.pool.append(out)
                    self._schedule_reduces()
        finally:
            self._cancel()
            self.log.close()
            self.tasks.close()
        value = (
            self.values_here[final.id] if final.id in self.values_here else final.load(self.s.tomus)
        )
        if self.job.finalize is not None:
            value = self.job.finalize(value)
        return IterativeResult(
            value=value,
            reduce_factor=final.factor,
            map_tasks=self.maps_run,
            reduce_tasks=self.reduces_run,
            timeline=self.timeline,
            job_id=self.job_id,
            covers=final.covers,
            resumed=resumed,
            shape=self.shape,
            elapsed=time.time() - started,
            final=final,
        )

    def _next_from_dask(self) -> tuple[StoredResult, TaskRecord]:
        if not self.pending:
            raise RuntimeError(f"job {self.job_id} stalled: nothing in flight, no result")
        fut, got = next(self.ac)
        self.pending.pop(fut, None)
        if fut.status in ("error", "cancelled"):
            self._cancel()
            fut.result()  # raises the task's exception
        # Otherwise finished (got is the result); or lost again if its worker died since
        # (then Dask computes it once more and result() waits for that).
        out, record = got if fut.status == "finished" else fut.result()
        return out, record

    def _record(self, out: StoredResult, record: TaskRecord) -> None:
        entry: dict[str, object]
        if out.inputs:
            entry = {"type": "reduce", "id": out.id, "inputs": list(out.inputs)}
        else:
            entry = {"type": "map", "index": out.covers[0]}
        small: dict[str, object] = {}
        if out.inline is not None:
            small = {"inline": out.inline}
        elif out.held is not None:
            small = {"held": True}
        self.log.append_later({**entry, "ref": out.ref, "hosts": out.hosts, **small})
        if out.inputs:
            self.log.delete_later(self.consuming.pop(out.id, []))
        self.timeline.append(record)
        self.tasks.task(record)
        if self.on_task is not None:
            self.on_task(record)

    def _submit_map(self, index: int, item: Any) -> None:
        hosts = tuple(self.hosts(item))
        options: dict[str, Any] = dict(self.s.placement.submit_options(hosts))
        ws = self.s.placement.workers
        if self.static:
            options = {"workers": [ws[index % len(ws)]], "allow_other_workers": False}
        elif self.affinity is not None and self.affinity[index] in ws:
            options = {"workers": [self.affinity[index]], "allow_other_workers": True}
        fut = self.s.dask.submit(
            _map_task, self.s.addr, self.job.mapper, index, item, hosts, self.locate,
            self.n == 1, self.job.durable, key=f"tomus-map-{self.token}-{index}",
            retries=self.job.retries,
            **options,
        )  # fmt: skip
        self.pending[fut] = f"m{index}"
        self.ac.add(fut)
        self.maps_run += 1

    def _submit_reduce(self, inputs: list[StoredResult]) -> None:
        rid = f"r{self.next_reduce}"
        self.next_reduce += 1
        hosts = tuple(sorted({h for r in inputs for h in r.hosts}))
        self.consuming[rid] = [r.ref for r in inputs if r.stored]
        final = sum(r.factor for r in inputs) == self.n
        self.reduces_run += 1
        held = any(r.held is not None for r in inputs)
        if held or (final and (self.beside_workers or not any(r.stored for r in inputs))):
            # Held inputs came with the tasks' answers: merged here, they move nowhere (as a
            # Dask task, every one would be pickled into its arguments). The last merge also
            # runs here when its inputs are small (at most INLINE_BYTES each, in the answers
            # too), or when every worker is a thread of this process (reading the inputs
            # costs the driver what it costs a worker). As a Dask task it cost a round trip
            # through the scheduler and a worker on the critical path of every job, and the
            # driver then read the result back. Kept and logged as any reduce; as Spark's
            # treeAggregate merges on its driver. Big stored results of remote workers still
            # meet on a worker near them: the driver is not made the aggregator the tree
            # exists to avoid.
            self.ran_here.append(self._reduce_here(rid, inputs, hosts, final))
            return
        fut = self.s.dask.submit(
            _reduce_task, self.s.addr, self.job.reducer, rid, inputs, hosts, self.locate, final,
            self.job.durable, key=f"tomus-reduce-{self.token}-{rid}", retries=self.job.retries,
            priority=1,  # before maps still queued: reduce work should not wait for them
            **self.s.placement.submit_options(hosts),
        )  # fmt: skip
        self.pending[fut] = rid
        self.ac.add(fut)

    def _reduce_here(
        self, rid: str, inputs: list[StoredResult], hosts: tuple[str, ...], final: bool
    ) -> tuple[StoredResult, TaskRecord]:
        """A reduce run by the driver, with the attempts a Dask task would get; the final
        one's value is kept for the result (not read back)."""
        for attempt in range(self.job.retries + 1):
            try:
                (out, value), record = execute(
                    "reduce", rid, self.s.addr, hosts, _reduce_value, self.job.reducer, rid,
                    inputs, self.locate, final, self.job.durable, client=self.s.tomus,
                )  # fmt: skip
            except Exception:
                if attempt == self.job.retries:
                    raise
                continue
            record.inputs = out.inputs
            record.factor = out.factor
            if final:
                self.values_here[out.id] = value
            return out, record
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _schedule_reduces(self) -> None:
        if self.shape == "tree":
            while len(self.pool) >= self.job.ratio:
                self._submit_reduce([self.pool.popleft() for _ in range(self.job.ratio)])
        if not self.pending and len(self.pool) >= 2:
            # Nothing else will arrive: combine the leftovers (fewer than R) in one last reduce,
            # or, in the classic shape, everything at once.
            self._submit_reduce(list(self.pool))
            self.pool.clear()

    def _cancel(self) -> None:
        if self.pending:
            self.s.dask.cancel(list(self.pending))
            self.pending.clear()
