"""Runs data services on the storage nodes through Dask, and reports on them.

Dask does the scheduling and the retries; tomus grows no queue or daemon of its own. A service
is one Dask task, submitted with:

- ``resources={"storage": 1}``: only workers started on the storage nodes with that resource
  (``dask worker SCHEDULER --resources storage=1``, or ``tomus service worker``) run services,
  never the application's compute workers;
- ``workers=[storage workers on the hosts holding the input]`` with ``allow_other_workers``:
  next to the data when a worker is there, elsewhere otherwise;
- ``fire_and_forget``: the scheduler keeps it after the submitter's Dask client is gone, so the
  application (or ``tomus service submit``) hands the work over and goes on.

A worker that dies (SIGKILL, a lost node) makes the scheduler run the task again on another
worker, up to ``distributed.scheduler.allowed-failures`` times; an exception inside the service
is retried ``retries`` times (Dask's ``retries=``). Every attempt, its progress and its outcome
go to the service log (``records``), which ``status`` replays. ``status`` also asks the
scheduler named in the log about a service that has not finished: one the scheduler no longer
knows is recorded as ``lost``, one it gave up on (too many worker deaths) as ``failed``.
"""

from __future__ import annotations

import os
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import tomus
from tomus.compute.engine import host_of, worker_client
from tomus.services.records import ServiceLog, ServiceState, here, list_ids, new_id

if TYPE_CHECKING:
    from distributed import Client as DaskClient

__all__ = [
    "STORAGE_RESOURCE",
    "Service",
    "ServiceContext",
    "ServiceError",
    "data_hosts",
    "list_services",
    "status",
    "storage_workers",
    "submit",
    "wait",
]

STORAGE_RESOURCE = "storage"
# Progress events are appended at most this often (seconds); the last one always is.
_PROGRESS_EVERY = 0.5
# Files whose chunk locations ``submit`` looks up for its placement hint.
_PLACEMENT_SAMPLE = 32
# ``wait`` asks the scheduler about an unfinished service this often (seconds).
_ASK_EVERY = 5.0


class ServiceError(tomus.TomusError):
    """A service could not be submitted, or failed (its error and traceback are in the log)."""

    kind = "service"


@dataclass
class ServiceContext:
    """What a service (a built-in one or a user function) gets on the storage node."""

    id: str
    addr: str
    attempt: int
    params: dict[str, Any]
    client: tomus.Client
    log: ServiceLog
    worker: str
    host: str
    paths: list[str] = field(default_factory=list)
    _last_progress: float = 0.0

    @property
    def fs(self) -> Any:
        """The fsspec file system (``tomus.fs.TomusFileSystem``) of the cluster."""
        return self.client.fs()

    def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Records how far the service is (visible in ``tomus service status``)."""
        now = time.monotonic()
        if total is not None and done < total and now - self._last_progress < _PROGRESS_EVERY:
            return
        self._last_progress = now
        self.log.append(
            ServiceLog.event(
                "progress", attempt=self.attempt, done=done, total=total, message=message
            )
        )


# kind -> handler(ctx) -> JSON-able result. ``function`` services carry their callable instead.
Handler = Callable[[ServiceContext], Any]


def _handlers() -> dict[str, Handler]:
    # Imported here: the handlers pull in zstandard and friends only where services run.
    from tomus.services import compress, replicate, user

    return {"compress": compress.run, "replicate": replicate.run, "function": user.run_named}


def _worker_facts() -> tuple[str, dict[str, float]]:
    try:
        from distributed import get_worker

        w = get_worker()
        return str(w.address), dict(w.state.total_resources)
    except (ImportError, ValueError):  # called outside a Dask worker (a test, a debugger)
        return "local", {}


def _execute(
    spec: dict[str, Any], fn: Callable[..., Any] | None, args: Sequence[Any]
) -> dict[str, Any]:
    """The Dask task of a service: runs one attempt and records it in the service log."""
    client = worker_client(spec["addr"])
    log = ServiceLog(client, spec["id"])
    attempt = 1 + sum(1 for e in log.events() if e.get("event") == "started")
    worker, resources = _worker_facts()
    host = host_of(worker) if worker != "local" else "localhost"
    log.append(
        ServiceLog.event(
            "started",
            attempt=attempt,
            worker=worker,
            host=host,
            pid=os.getpid(),
            resources=resources,
        )
    )
    ctx = ServiceContext(
        id=spec["id"],
        addr=spec["addr"],
        attempt=attempt,
        params=spec["params"],
        client=client,
        log=log,
        worker=worker,
        host=host,
        paths=list(spec.get("paths", [])),
    )
    try:
        result = fn(ctx, *args) if fn is not None else _handlers()[spec["kind"]](ctx)
    except Exception as e:
        # Dask runs it again while retries remain: the log says whether this was the last try.
        final = attempt > int(spec.get("retries", 0))
        log.append(
            ServiceLog.event(
                "failed",
                attempt=attempt,
                error=f"{type(e).__name__}: {e}",
                traceback=traceback.format_exc(),
                final=final,
            )
        )
        raise
    log.append(ServiceLog.event("done", attempt=attempt, result=result))
    return {"id": spec["id"], "result": result}


def storage_workers(dask: DaskClient) -> list[str]:
    """The Dask workers that have the ``storage`` resource (started on storage nodes)."""
    workers = dask.scheduler_info(n_workers=-1)["workers"]
    return sorted(
        addr
        for addr, w in workers.items()
        if (w.get("resources") or {}).get(STORAGE_RESOURCE, 0) > 0
    )


def data_hosts(client: tomus.Client, paths: Sequence[str]) -> Counter[str]:
    """Bytes of ``paths`` held per storage host (from their chunks' locations).

    Looks at most ``_PLACEMENT_SAMPLE`` files, spread over the list: a hint is worth a few
    round trips, not one per file of a thousand-file input while the submitter waits."""
    ns = client.namespace()
    held: Counter[str] = Counter()
    step = max(1, len(paths) // _PLACEMENT_SAMPLE)
    for p in paths[::step]:
        try:
            _, blob = ns.open(p)
        except (tomus.NotFound, tomus.IsADirectory):
            continue
        for _, size, addrs in blob.locations():
            for a in addrs:
                held[host_of(a)] += size
    return held


def _near(dask: DaskClient, hosts: Counter[str]) -> list[str] | None:
    """Storage workers on the hosts holding most of the data; None when no hint narrows it."""
    workers = storage_workers(dask)
    if not hosts or not workers:
        return None
    best = max(hosts.values())
    chosen = [w for w in workers if hosts.get(host_of(w), 0) == best]
    return chosen if chosen and len(chosen) < len(workers) else None


@dataclass
class Service:
    """A submitted service: its id and the cluster whose namespace holds its log.

    ``future`` (the Dask future) keeps the task known to the scheduler while this handle
    lives, so a service the scheduler gives up on reads ``failed`` with Dask's reason; once no
    client holds it, the scheduler forgets an erred fire-and-forget task and ``status`` can only
    say ``lost``."""

    id: str
    client: tomus.Client
    future: Any = field(default=None, repr=False, compare=False)

    def status(self, dask: DaskClient | None = None) -> ServiceState:
        return status(self.client, self.id, dask=dask)

    def wait(self, timeout: float = 300.0, dask: DaskClient | None = None) -> ServiceState:
        return wait(self.client, self.id, timeout=timeout, dask=dask)


def submit(
    client: tomus.Client,
    dask: DaskClient,
    kind: str,
    params: dict[str, Any] | None = None,
    *,
    fn: Callable[..., Any] | None = None,
    args: Sequence[Any] = (),
    paths: Sequence[str] = (),
    name: str = "",
    retries: int = 0,
) -> Service:
    """Hands a service to the storage nodes' Dask workers and returns at once.

    ``kind``: ``compress``, ``replicate`` or ``function``; ``fn(ctx, *args)`` is the callable of
    a ``function`` service (else ``params["function"]`` names one, ``module:attribute``).
    ``paths``: the namespace files it works on (it runs next to them). ``retries``: runs again
    after an exception this many times (a dead worker is always retried by Dask).
    """
    if kind not in ("compress", "replicate", "function"):
        raise ServiceError(f"unknown service kind {kind!r} (compress, replicate or function)")
    if not storage_workers(dask):
        # Not an error (one may start later: the task waits for it), but worth saying now.
        warnings.warn(
            "no Dask worker has the 'storage' resource yet: the service waits for one "
            "(start workers on the storage nodes with --resources storage=1)",
            stacklevel=2,
        )
    from distributed import fire_and_forget

    params = dict(params or {})
    sid = new_id()
    key = f"tomus-service-{sid}"
    scheduler = str(dask.scheduler.address) if dask.scheduler is not None else None
    # Two copies of the log when the cluster has two providers: a service's record should
    # outlive the loss of one storage node, as its data does with replication.
    alive = sum(1 for p in client.providers() if p.alive and not p.draining)
    ServiceLog(client, sid).create(
        ServiceLog.event(
            "submitted",
            id=sid,
            kind=kind,
            name=name or (getattr(fn, "__qualname__", "") if fn else params.get("function", "")),
            params=params,
            paths=list(paths),
            scheduler=scheduler,
            key=key,
            retries=retries,
            by=here(),
        ),
        replication=min(2, max(1, alive)),
    )
    spec = {
        "id": sid,
        "addr": client.addr,
        "kind": kind,
        "params": params,
        "paths": list(paths),
        "retries": retries,
    }
    near = _near(dask, data_hosts(client, paths))
    options: dict[str, Any] = {"workers": near, "allow_other_workers": True} if near else {}
    future = dask.submit(
        _execute,
        spec,
        fn,
        list(args),
        key=key,
        resources={STORAGE_RESOURCE: 1},
        retries=retries,
        pure=False,
        **options,
    )
    fire_and_forget(future)
    # The submitter may close its Dask client next (the CLI exits): make sure the scheduler
    # holds the task first, so fire_and_forget has something to keep.
    deadline = time.monotonic() + 30
    while not dask.run_on_scheduler(_has_task, key=key):
        if time.monotonic() > deadline:
            raise ServiceError(f"the Dask scheduler did not take service {sid}")
        time.sleep(0.05)
    return Service(sid, client, future)


def _has_task(dask_scheduler: Any, key: str) -> bool:
    return key in dask_scheduler.tasks


def _task_state(dask_scheduler: Any, key: str) -> tuple[str | None, str | None]:
    """Runs on the scheduler: the task's state and, if it erred, why."""
    ts = dask_scheduler.tasks.get(key)
    if ts is None:
        return None, None
    text = str(ts.exception_text) if ts.exception_text else None
    if text is None and ts.exception is not None:
        # The scheduler's own verdicts (KilledWorker: every worker that ran it died) come
        # only as the pickled exception.
        try:
            from distributed.protocol import pickle

            exc = pickle.loads(ts.exception)
            text = f"{type(exc).__name__}: {exc}"
        except Exception:
            text = None
    return str(ts.state), text


def _reconcile(
    client: tomus.Client, st: ServiceState, dask: DaskClient | None
) -> tuple[ServiceState, str | None]:
    """Asks the scheduler about an unfinished service; records ``lost``/``failed`` verdicts."""
    if st.finished or not st.key:
        return st, None
    owned = None
    if dask is None:
        if not st.scheduler:
            return st, None
        from distributed import Client as DaskClientClass

        try:
            owned = DaskClientClass(st.scheduler, timeout=5, set_as_default=False)
        except OSError as e:
            return st, f"scheduler {st.scheduler} unreachable: {e}"
        dask = owned
    try:
        state, exception = dask.run_on_scheduler(_task_state, key=st.key)
    finally:
        if owned is not None:
            owned.close()
    log = ServiceLog(client, st.id)
    fresh = log.replay()  # the task may have finished while we asked
    if fresh.finished:
        return fresh, None
    if state is None:
        why = "the Dask scheduler no longer has this service and it never finished"
        if fresh.attempts and fresh.attempts[-1].outcome == "running":
            a = fresh.attempts[-1]
            why += f" (attempt {a.number} on {a.worker} never ended: that worker likely died)"
        log.append(ServiceLog.event("lost", error=why))
        return log.replay(), None
    if state == "erred":
        log.append(
            ServiceLog.event(
                "failed", attempt=len(fresh.attempts), error=exception or "erred", final=True
            )
        )
        return log.replay(), None
    if state == "no-worker":
        return fresh, "waiting for a Dask worker with the 'storage' resource"
    return fresh, None


def status(client: tomus.Client, service_id: str, dask: DaskClient | None = None) -> ServiceState:
    """The service's state from its log (and, if unfinished, from its Dask scheduler)."""
    try:
        st = ServiceLog(client, service_id).replay()
    except tomus.NotFound:
        raise tomus.NotFound(f"no service {service_id}") from None
    st, note = _reconcile(client, st, dask)
    if note:
        st.progress = {**(st.progress or {}), "note": note}
    return st


def list_services(client: tomus.Client) -> list[ServiceState]:
    """Every service's state as its log says (no scheduler queries: a cheap overview)."""
    out = []
    for sid in list_ids(client):
        try:
            out.append(ServiceLog(client, sid).replay())
        except tomus.NotFound:  # removed between the listing and the read
            continue
    return out


def wait(
    client: tomus.Client,
    service_id: str,
    timeout: float = 300.0,
    dask: DaskClient | None = None,
    poll: float = 0.2,
) -> ServiceState:
    """Waits until the service finished (done, failed or lost); TimeoutError after ``timeout``.

    Reads the log every ``poll`` seconds and asks the scheduler every ``_ASK_EVERY`` seconds
    (``status``), so a service the scheduler dropped or gave up on ends the wait too."""
    deadline = time.monotonic() + timeout
    ask = time.monotonic() + _ASK_EVERY
    while True:
        st = ServiceLog(client, service_id).replay()
        if not st.finished and time.monotonic() >= ask:
            st = status(client, service_id, dask=dask)
            ask = time.monotonic() + _ASK_EVERY
        if st.finished:
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"service {service_id} still {st.state} after {timeout}s")
        time.sleep(poll)
