"""The service log: the durable record of one data service, kept in the tomus namespace.

Each service has one file, ``/.tomus/services/<id>.log``: JSON lines, one per event, each
written by one blob append (an append lands whole and contiguously, so writers in different
processes never interleave inside a line). The submitter writes ``submitted``; the Dask task
running the service writes ``started`` at each attempt, ``progress`` as it goes, and ``done``
or ``failed``; ``tomus service status`` writes ``lost`` when the Dask scheduler no longer knows
a service that never finished (it ran out of retries, or the scheduler restarted).

Replaying the log gives the service's state. An attempt followed by another ``started`` with no
``done``/``failed`` in between died with its worker (SIGKILL, a lost node): Dask ran it again
elsewhere, and the state lists it as ``died``.

The log is the service's only state: the submitter may exit right after submitting, and a
restarted manager keeps it (the namespace and the file's blob are durable like any file).
Service ids sort by submission time (``svc-<UTC time>-<random>``), so ``list`` is in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import tomus

__all__ = [
    "SERVICES_DIR",
    "Attempt",
    "ServiceLog",
    "ServiceState",
    "list_ids",
    "new_id",
]

SERVICES_DIR = "/.tomus/services"
# Small frames: a log is a few KiB; one chunk keeps it on one provider per replica.
_LOG_CHUNK = 64 << 10


def new_id() -> str:
    """A fresh service id, sorted by submission time."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"svc-{stamp}-{secrets.token_hex(3)}"


def log_path(service_id: str) -> str:
    return f"{SERVICES_DIR}/{service_id}.log"


def list_ids(client: tomus.Client) -> list[str]:
    """The ids of every service ever submitted to this cluster, oldest first."""
    try:
        entries = client.namespace().list(SERVICES_DIR)
    except (tomus.NotFound, tomus.NotADirectory):
        return []
    names = (os.path.basename(e["name"]) for e in entries if e["type"] == "file")
    return sorted(n[: -len(".log")] for n in names if n.endswith(".log"))


@dataclass
class Attempt:
    """One run of a service on a Dask worker."""

    number: int
    worker: str
    host: str
    pid: int
    resources: dict[str, float]
    started: float
    outcome: str = "running"  # running | done | failed | died
    ended: float | None = None
    error: str | None = None


@dataclass
class ServiceState:
    """What the log says about one service."""

    id: str
    kind: str = "?"
    name: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    submitted: float = 0.0
    scheduler: str | None = None
    key: str | None = None
    state: str = "queued"  # queued | running | done | failed | lost
    attempts: list[Attempt] = field(default_factory=list)
    progress: dict[str, Any] | None = None
    result: Any = None
    error: str | None = None
    traceback: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "lost")

    @property
    def retries(self) -> int:
        """Attempts run beyond the first (after a worker died or an error was retried)."""
        return max(0, len(self.attempts) - 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "state": self.state,
            "params": self.params,
            "submitted": self.submitted,
            "scheduler": self.scheduler,
            "attempts": [vars(a) for a in self.attempts],
            "progress": self.progress,
            "result": self.result,
            "error": self.error,
            "traceback": self.traceback,
        }


def _replay(service_id: str, events: list[dict[str, Any]]) -> ServiceState:
    st = ServiceState(id=service_id, events=events)
    for ev in events:
        kind = ev.get("event")
        if kind == "submitted":
            st.kind = ev.get("kind", "?")
            st.name = ev.get("name", "")
            st.params = ev.get("params", {})
            st.submitted = ev.get("time", 0.0)
            st.scheduler = ev.get("scheduler")
            st.key = ev.get("key")
        elif kind == "started":
            for earlier in st.attempts:
                if earlier.outcome == "running":
                    earlier.outcome = "died"  # a later attempt began: its worker is gone
            st.attempts.append(
                Attempt(
                    number=int(ev.get("attempt", len(st.attempts) + 1)),
                    worker=ev.get("worker", "?"),
                    host=ev.get("host", "?"),
                    pid=int(ev.get("pid", 0)),
                    resources=dict(ev.get("resources", {})),
                    started=ev.get("time", 0.0),
                )
            )
            st.state = "running"
            st.progress = None
        elif kind == "progress":
            st.progress = {k: ev[k] for k in ("done", "total", "message") if k in ev}
        elif kind in ("done", "failed"):
            if st.attempts:
                a = st.attempts[-1]
                a.outcome, a.ended = kind, ev.get("time")
                a.error = ev.get("error")
            if kind == "done":
                st.state, st.result = "done", ev.get("result")
            elif ev.get("final", True):
                st.state, st.error, st.traceback = "failed", ev.get("error"), ev.get("traceback")
            else:
                st.state = "queued"  # Dask retries it (``retries=``)
        elif kind == "lost" and not st.finished:
            st.state, st.error = "lost", ev.get("error")
    return st


class ServiceLog:
    """Appends events to, and replays, the log of service ``service_id``."""

    def __init__(self, client: tomus.Client, service_id: str) -> None:
        self.client = client
        self.id = service_id
        self.path = log_path(service_id)

    @staticmethod
    def event(event: str, /, **fields: Any) -> dict[str, Any]:
        return {"event": event, "time": time.time(), **fields}

    def create(self, record: Mapping[str, Any], replication: int = 1) -> None:
        """Makes the log with its first record (``submitted``); AlreadyExists if it exists."""
        ns = self.client.namespace()
        with contextlib.suppress(tomus.AlreadyExists):
            ns.mkdir(SERVICES_DIR, parents=True)
        _, blob = ns.create(self.path, _LOG_CHUNK, replication, True)
        try:
            blob.append(_line(record))
        except BaseException:
            ns.abandon(self.path, blob.id)
            raise

    def append(self, record: Mapping[str, Any]) -> None:
        self.client.namespace().open(self.path)[1].append(_line(record))

    def events(self) -> list[dict[str, Any]]:
        _, blob = self.client.namespace().open(self.path)
        return list(_parse(blob.read()))

    def replay(self) -> ServiceState:
        return _replay(self.id, self.events())


def _line(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode()


def _parse(data: bytes) -> Iterator[dict[str, Any]]:
    # An append whose writer died becomes a hole of zeros: skip those bytes, and any line that
    # does not parse (never written whole), rather than refusing the whole log.
    for raw in data.split(b"\n"):
        raw = raw.strip(b"\x00 \r")
        if not raw:
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def here() -> dict[str, Any]:
    """Where the calling process runs: host name and pid (for ``submitted`` records)."""
    return {"host": socket.gethostname(), "pid": os.getpid()}
