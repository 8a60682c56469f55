"""Test helpers: kill a Dask worker process once it starts a marked task."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any


class Killer(threading.Thread):
    """Watches ``marks`` for a marker ``<prefix>...-<pid>`` left by a task in a worker process
    and SIGKILLs that process (only if it is one of ``dask``'s workers) while the task runs."""

    def __init__(self, dask: Any, marks: Path, prefix: str, timeout: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.pids = set(dask.run(os.getpid).values())
        self.marks, self.prefix, self.timeout = marks, prefix, timeout
        self.killed: tuple[str, int] | None = None

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for p in self.marks.iterdir():
                if p.name.startswith(self.prefix):
                    pid = int(p.name.rsplit("-", 1)[1])
                    if pid in self.pids:
                        os.kill(pid, signal.SIGKILL)
                        self.killed = (p.name.rsplit("-", 1)[0], pid)
                        return
            time.sleep(0.01)


def attempts(marks: Path, task: str) -> set[int]:
    """The worker pids that started ``task`` (marker ``<task>-<pid>``)."""
    return {int(p.name.rsplit("-", 1)[1]) for p in marks.glob(f"{task}-*")}
