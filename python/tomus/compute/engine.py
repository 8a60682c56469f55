"""The glue between tomus and Dask distributed: who runs tasks, where, and what they record.

Dask does the scheduling, the retries when a worker dies and the elasticity; tomus must not grow
a scheduler, worker pool or task queue of its own. What this module adds:

- ``session``: the Dask client and the tomus cluster a job runs against. Without a Dask client
  it starts a ``distributed.LocalCluster`` (worker processes, one thread each, since the tasks
  are CPU-bound Python; or, with ``processes=False``, workers that are threads of this process,
  for numpy jobs) and closes it when the job ends; without a tomus address (argument or
  ``TOMUS_ADDR``) it starts an embedded ``tomus.local_cluster`` for the job, alongside Dask.
- ``Placement``: data locality. Providers report ``host:port``; Dask workers ``tcp://host:port``.
  A task is submitted with ``workers=[the workers on the hosts holding its chunks]`` and
  ``allow_other_workers=True``, so Dask prefers those workers but may run (or steal) it
  elsewhere when they are busy or gone.
- ``execute``: the wrapper every task runs in on a worker. It opens (once per worker process
  and cluster address) the tomus client the task reads and writes through, counts the bytes it
  moves and returns a ``TaskRecord`` (start, end, worker, host) with the task's result so the
  driver can build a timeline without asking Dask for it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import tomus

if TYPE_CHECKING:
    # distributed is an optional dependency (imported when a job runs); typing has
    # TypeVarTuple only from 3.11 and typing_extensions is no dependency either, but annotations
    # are never evaluated at run time (``from __future__ import annotations``).
    from distributed import Client as DaskClient
    from typing_extensions import TypeVarTuple, Unpack

    Args = TypeVarTuple("Args")

__all__ = [
    "Placement",
    "Session",
    "TaskContext",
    "TaskRecord",
    "attach",
    "count_read",
    "count_write",
    "current",
    "execute",
    "host_of",
    "session",
    "set_secret",
    "tomus_client",
    "use_session",
    "worker_client",
]

T = TypeVar("T")


def host_of(addr: str) -> str:
    """The host part of ``tcp://h:p``, ``h:p`` or ``[v6]:p``."""
    if "://" in addr:
        addr = addr.split("://", 1)[1]
    if addr.startswith("["):
        return addr[1 : addr.index("]")]
    return addr.rsplit(":", 1)[0] if ":" in addr else addr


# --- the tomus client of a worker process -------------------------------------------------------

_clients: dict[str, tomus.Client] = {}
_clients_lock = threading.Lock()
_secrets: dict[str, bytes] = {}


def set_secret(addr: str, secret: bytes | None) -> None:
    """The secret this process presents to the cluster at ``addr`` (default:
    ``$TOMUS_CLUSTER_SECRET``). Jobs spanning several clusters (``tomus.sites``) need one per
    cluster; a client made for ``addr`` with another secret is dropped."""
    with _clients_lock:
        if _secrets.get(addr) == secret:
            return
        if secret is None:
            _secrets.pop(addr, None)
        else:
            _secrets[addr] = secret
        _clients.pop(addr, None)


def worker_client(addr: str) -> tomus.Client:
    """The tomus client of this process for the cluster at ``addr``, made once and reused.

    Connecting costs a round trip and each client keeps its own connection pool and metadata
    cache, so tasks that run one after another in a worker share one.
    """
    c = _clients.get(addr)
    if c is None:
        with _clients_lock:
            c = _clients.get(addr)
            if c is None:
                c = tomus.connect(addr, secret=_secrets.get(addr))
                _clients[addr] = c
    return c


# --- what a task records ------------------------------------------------------------------------


@dataclass
class TaskRecord:
    """One task as it ran: the timeline entry that results expose."""

    kind: str  # "map", "reduce", "aggregate", ...
    task: str
    start: float  # time.time() on the worker
    end: float
    worker: str  # the Dask worker address ("local" outside Dask)
    host: str
    data_hosts: tuple[str, ...] = ()  # storage hosts holding the task's input
    inputs: tuple[str, ...] = ()  # for reduce tasks: the results they combined
    factor: int = 1  # map tasks covered by the task's output
    bytes_read: int = 0
    bytes_written: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def colocated(self) -> bool | None:
        """Whether the task ran on a host holding its input (None: no location known)."""
        if not self.data_hosts:
            return None
        return self.host in self.data_hosts


class TimelineTotals:
    """Totals over a job result's ``timeline`` of tasks (shared by the result classes)."""

    timeline: list[TaskRecord]

    @property
    def bytes_read(self) -> int:
        return sum(t.bytes_read for t in self.timeline)

    @property
    def bytes_written(self) -> int:
        return sum(t.bytes_written for t in self.timeline)

    @property
    def colocated_fraction(self) -> float | None:
        """Of the map tasks whose input location was known, the fraction run where it is stored."""
        known = [t.colocated for t in self.timeline if t.kind == "map" and t.colocated is not None]
        return sum(known) / len(known) if known else None


@dataclass
class TaskContext:
    """The running task's tomus client and byte counters (one per task, per thread)."""

    addr: str
    client: tomus.Client
    bytes_read: int = 0
    bytes_written: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def read(self, n: int) -> None:
        with self._lock:  # a task may read from several threads
            self.bytes_read += n

    def wrote(self, n: int) -> None:
        with self._lock:
            self.bytes_written += n


_local = threading.local()


def current() -> TaskContext:
    """The context of the task running in this thread (RuntimeError outside a task)."""
    ctx: TaskContext | None = getattr(_local, "ctx", None)
    if ctx is None:
        raise RuntimeError("not inside a tomus.compute task")
    return ctx


def attach(ctx: TaskContext | None) -> None:
    """Makes ``ctx`` the current task of this thread (helper threads of a task)."""
    _local.ctx = ctx


def count_read(n: int) -> None:
    """Adds ``n`` bytes read from tomus to the running task's record (no-op outside a task)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is not None:
        ctx.read(n)


def count_write(n: int) -> None:
    """Adds ``n`` bytes written to tomus to the running task's record (no-op outside a task)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is not None:
        ctx.wrote(n)


def tomus_client() -> tomus.Client:
    """Inside a task: the tomus client of the job's cluster (for mappers that read blobs)."""
    return current().client


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except ValueError:  # not in a Dask worker (tests calling a task body directly)
        return "local"


def execute(
    kind: str,
    task: str,
    addr: str,
    data_hosts: Sequence[str],
    fn: Callable[[Unpack[Args]], T],
    *args: Unpack[Args],
    client: tomus.Client | None = None,
) -> tuple[T, TaskRecord]:
    """Runs ``fn(*args)`` as a task of the job on cluster ``addr`` and records how it went.
    ``client``: the tomus client to use (default: this process's ``worker_client``; the
    driver passes its session's, which holds the cluster secret)."""
    start = time.time()
    ctx = TaskContext(addr, client or worker_client(addr))
    previous = getattr(_local, "ctx", None)
    _local.ctx = ctx
    try:
        out = fn(*args)
    finally:
        _local.ctx = previous
    worker = _worker_address()
    record = TaskRecord(
        kind=kind,
        task=task,
        start=start,
        end=time.time(),
        worker=worker,
        host=host_of(worker) if worker != "local" else "localhost",
        data_hosts=tuple(data_hosts),
        bytes_read=ctx.bytes_read,
        bytes_written=ctx.bytes_written,
    )
    return out, record


# --- locality ----------------------------------------------------------------------------------


class Placement:
    """Maps the storage hosts of a task's input to the Dask workers on those hosts."""

    def __init__(self, client: DaskClient) -> None:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        self.workers: list[str] = sorted(workers)
        self.by_host: dict[str, list[str]] = {}
        for w in self.workers:
            self.by_host.setdefault(host_of(w), []).append(w)

    def workers_for(self, hosts: Iterable[str]) -> list[str] | None:
        """The workers to hint for data on ``hosts``; None when a hint would not narrow anything
        (no worker there, or every worker is there, as on one machine)."""
        chosen = sorted({w for h in hosts for w in self.by_host.get(h, ())})
        if not chosen or len(chosen) == len(self.workers):
            return None
        return chosen

    def submit_options(self, hosts: Iterable[str]) -> dict[str, list[str] | bool]:
        ws = self.workers_for(hosts)
        return {} if ws is None else {"workers": ws, "allow_other_workers": True}

    @property
    def in_process(self) -> bool:
        """Whether every worker is a thread of this process (``session(processes=False)``)."""
        return bool(self.workers) and all(w.startswith("inproc://") for w in self.workers)


# --- where a job runs ---------------------------------------------------------------------------


@dataclass
class Session:
    """The Dask client and the tomus cluster of a job (see ``session``)."""

    dask: DaskClient
    addr: str
    tomus: tomus.Client
    placement: Placement

    def refresh_placement(self) -> None:
        self.placement = Placement(self.dask)


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def session(
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    workers: int | None = None,
    providers: int = 2,
    processes: bool = True,
    fsync: bool = True,
) -> Iterator[Session]:
    """The Dask client and tomus cluster a job runs on, started (and stopped) when not given.

    ``client``: a ``distributed.Client``, used as is and left open. ``addr``: the tomus
    manager (default ``$TOMUS_ADDR``; if unset, an embedded cluster with ``providers`` providers
    lives for the job). ``workers``: workers of the default LocalCluster (default: one per
    core). ``processes=False``: the LocalCluster's workers are threads of this process instead
    of worker processes: it starts in a fraction of a second instead of seconds and tasks'
    inputs and outputs are not pickled between processes, which suits numpy-bound jobs (their
    kernels release the GIL); pure-Python jobs (the text apps) want processes. The embedded
    tomus cluster and the LocalCluster start side by side; ``fsync=False`` lets its providers
    acknowledge writes from the page cache (benchmarks).
    """
    with contextlib.ExitStack() as stack:
        if addr is None:
            addr = os.environ.get("TOMUS_ADDR") or None
        dask_cm = None
        dask_started: Future[DaskClient] | None = None
        if client is None:
            # Start Dask's workers while the embedded cluster comes up (each takes about as
            # long as the other; in turn they took twice as long).
            dask_cm = _local_dask(workers or default_workers(), processes)
            starter = ThreadPoolExecutor(1, thread_name_prefix="dask-start")
            dask_started = starter.submit(dask_cm.__enter__)
            starter.shutdown(wait=False)
        try:
            if addr is None:
                cluster = stack.enter_context(tomus.local_cluster(providers=providers, fsync=fsync))
                addr = cluster.addr
        finally:
            if dask_cm is not None and dask_started is not None:
                client = dask_started.result()  # raises what starting Dask raised
                stack.push(dask_cm.__exit__)
        assert client is not None
        yield Session(client, addr, tomus.connect(addr), Placement(client))


@contextlib.contextmanager
def use_session(
    s: Session | None,
    client: DaskClient | None = None,
    addr: str | None = None,
    workers: int | None = None,
) -> Iterator[Session]:
    """``s`` if given (several jobs sharing one engine), else a ``session`` for one job."""
    if s is not None:
        yield s
    else:
        with session(client, addr, workers=workers) as new:
            yield new


#: Dask settings of the LocalCluster a session starts. Dask's statistical profiler samples
#: every worker thread's stack every 10 ms, holding the GIL, and its system monitor polls
#: /proc twice a second for a dashboard these clusters do not serve; with thread workers
#: both run on the driver's event loop beside the tasks. Off (the profiler) and every 2 s
#: (the monitor), 10 KMeans passes over 5 M points with thread workers took 2.92-2.96 s
#: instead of 3.10-3.14 s (two alternated pairs, this engine alone in its process). tomus'
#: task records keep the timeline of every task; pass your own Dask client for Dask's
#: profiles.
QUIET_DASK = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.interval": "2s",
}


@contextlib.contextmanager
def _local_dask(workers: int, processes: bool = True) -> Iterator[DaskClient]:
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set(QUIET_DASK):  # read when the scheduler and the workers start
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
            # The scheduler serves HTTP (health checks) even without a dashboard, by default
            # on 8787; a random port lets several jobs and test runs share a machine without
            # warnings.
            scheduler_kwargs={"dashboard_address": ":0"},
            silence_logs=40,  # logging.ERROR: a killed worker is expected, not news
        )
    try:
        # Not the process-wide default: user code calling dask.compute() keeps its own.
        with Client(cluster, set_as_default=False) as c:
            yield c
    finally:
        cluster.close()
