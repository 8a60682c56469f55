"""The task records of a compute job, kept in tomus for the dashboard's timeline.

The driver already keeps a ``TaskRecord`` per task (the ``timeline`` of a result); this module
also appends each one, as a line of JSON, to the file ``.compute/jobs/<job_id>.jsonl`` of the
cluster's namespace, so the manager's dashboard (``/jobs``, ``/job?id=N``) can draw the tasks
per worker while the job runs and after it ended, without asking the driver or Dask. The file
holds a ``job`` line, a ``task`` line per finished task and a ``done`` line at the end.

Appends go through one background thread (the driver must not wait ~10 ms per task for
them), the records given during an append together in the next one (``appender``). The
records are for people: a failure to store them is logged and otherwise ignored, it never
fails the job.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import tomus
from tomus.compute.appender import Appender
from tomus.compute.engine import TaskRecord

__all__ = ["JOBS_DIR", "TaskLog", "path_of"]

JOBS_DIR = ".compute/jobs"
_CHUNK = 64 << 10
_log = logging.getLogger(__name__)


def path_of(job_id: int) -> str:
    """The namespace path of job ``job_id``'s task records."""
    return f"{JOBS_DIR}/{job_id}.jsonl"


class TaskLog:
    """Appends the records of job ``job_id`` to its file (created if new; a resumed job goes
    on appending to the same one)."""

    def __init__(self, client: tomus.Client, job_id: int, header: dict[str, Any]) -> None:
        self.job_id = job_id
        self.started = time.time()
        self._writer = Appender(f"tasklog-{job_id}", lambda: self._open(client))
        self._add({"type": "job", "job": job_id, "started": self.started, **header})

    @staticmethod
    def _open_blob(client: tomus.Client, job_id: int) -> tomus.Blob:
        ns = client.namespace()
        ns.mkdir(JOBS_DIR, parents=True)
        _, blob = ns.create(path_of(job_id), chunk_size=_CHUNK)
        return blob

    def _open(self, client: tomus.Client) -> tomus.Blob | None:
        try:
            return self._open_blob(client, self.job_id)
        except tomus.TomusError as e:
            _log.warning("job %s: cannot keep task records in %s: %s", self.job_id, JOBS_DIR, e)
            return None

    def _add(self, record: dict[str, Any]) -> None:
        self._writer.append((json.dumps(record, default=str) + "\n").encode())

    def task(self, record: TaskRecord) -> None:
        """Records a finished task."""
        self._add(
            {
                "type": "task",
                "kind": record.kind,
                "task": record.task,
                "start": record.start,
                "end": record.end,
                "worker": record.worker,
                "host": record.host,
                "inputs": list(record.inputs),
                "factor": record.factor,
                "bytes_read": record.bytes_read,
                "bytes_written": record.bytes_written,
            }
        )

    def close(self) -> None:
        """Records the end of the job and waits for every record to be stored."""
        self._add({"type": "done", "ended": time.time(), "elapsed": time.time() - self.started})
        for w in self._writer.close():
            if (e := w.exception()) is not None:
                _log.warning("job %s: task records were not stored: %s", self.job_id, e)
