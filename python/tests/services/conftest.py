"""Fixtures of the service tests: the session's tomus cluster (../conftest.py) and a real Dask
cluster shaped like a dedicated deployment: one compute worker without resources and two
"storage node" workers with the ``storage`` resource (each a Nanny-managed process)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

STORAGE_WORKERS = 2


@contextmanager
def storage_dask() -> Iterator[Any]:
    from distributed import Client, Nanny, Scheduler, SpecCluster

    def worker(resources: dict[str, float]) -> dict[str, Any]:
        return {
            "cls": Nanny,
            "options": {"nthreads": 1, "host": "127.0.0.1", "resources": resources},
        }

    cluster = SpecCluster(
        scheduler={
            "cls": Scheduler,
            "options": {"host": "127.0.0.1", "dashboard_address": ":0"},
        },
        workers={
            "compute-0": worker({}),
            **{f"storage-{i}": worker({"storage": 1}) for i in range(STORAGE_WORKERS)},
        },
        silence_logs=50,
    )
    with Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(1 + STORAGE_WORKERS, timeout=60)
        yield c
    cluster.close()


@pytest.fixture(scope="session")
def dask() -> Iterator[Any]:
    with storage_dask() as c:
        yield c


@pytest.fixture
def dask_to_kill() -> Iterator[Any]:
    """A Dask cluster of the test's own, for tests that SIGKILL a worker."""
    with storage_dask() as c:
        yield c
