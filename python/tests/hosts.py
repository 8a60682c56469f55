"""Clusters spread over loopback addresses, each 127.0.0.x standing for a separate host: the
manager and provider processes (a provider bound to its host's address), and a Dask cluster
with one worker per host, for the tests of locality and of transfers between hosts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def spawn(*args: str, **kw: Any) -> subprocess.Popen[bytes]:
    """``python -m tomus ARGS`` in its own session (so a test can kill its whole group)."""
    return subprocess.Popen([sys.executable, "-m", "tomus", *args], start_new_session=True, **kw)


def start_manager(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A manager on 127.0.0.1 keeping its state in ``data``: the process and its address."""
    manager = spawn("manager", "--addr", "127.0.0.1:0", "--data", str(data),
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    assert manager.stdout is not None
    line = manager.stdout.readline().decode()
    m = re.search(r"listening on (\S+)", line)
    assert m, f"unexpected manager output {line!r}"
    return manager, m.group(1)


def start_provider(manager: str, host: str, data: str | Path) -> subprocess.Popen[bytes]:
    """A provider of ``manager`` listening on ``host`` (a port the kernel picks)."""
    args = ["--manager", manager, "--addr", f"{host}:0", "--no-fsync", "--data", str(data)]
    return spawn("provider", *args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for_providers(client: Any, count: int) -> None:
    """Waits (30 s at most) until ``count`` providers are alive in ``client``'s cluster."""
    deadline = time.monotonic() + 30
    while sum(p.alive for p in client.providers()) < count:
        assert time.monotonic() < deadline, f"{count} providers did not register"
        time.sleep(0.05)


def kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kills each process's whole group (started by :func:`spawn`) and reaps it."""
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@contextmanager
def dask_on(hosts: list[str]) -> Iterator[Any]:
    """A Dask client of a cluster with one single-threaded worker on each of ``hosts``."""
    from distributed import Client, Nanny, Scheduler, SpecCluster

    workers = {
        f"w{i}": {"cls": Nanny, "options": {"host": h, "nthreads": 1, "silence_logs": 50}}
        for i, h in enumerate(hosts)
    }
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": ":0"}}
    cluster = SpecCluster(workers=workers, scheduler=scheduler, silence_logs=50)
    with Client(cluster) as c:
        c.wait_for_workers(len(hosts), timeout=60)
        yield c
    cluster.close()
