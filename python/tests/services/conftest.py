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
def storage_dask(allowed_failures: int | None = None) -> Iterator[Any]:
    """``allowed_failures``: worker deaths the scheduler tolerates per task (Dask: 3)."""
    import dask.config
    from distributed import Client, Nanny

    def worker(resources: dict[str, float]) -> dict[str, Any]:
        return {
            "cls": Nanny,
            "options": {"nthreads": 1, "host": "127.0.0.1", "resources": resources},
        }

    config = (
        {}
        if allowed_failures is None
        else {"distributed.scheduler.allowed-failures": allowed_failures}
    )
    with dask.config.set(config):  # read by the scheduler when it starts
        cluster = _spec_cluster(worker)
    with Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(1 + STORAGE_WORKERS, timeout=60)
        yield c
    cluster.close()


def _spec_cluster(worker: Any) -> Any:
    from distributed import Scheduler, SpecCluster

    return SpecCluster(
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


@pytest.fixture(scope="session")
def dask() -> Iterator[Any]:
    with storage_dask() as c:
        yield c


@pytest.fixture
def dask_to_kill() -> Iterator[Any]:
    """A Dask cluster of the test's own, for tests that SIGKILL a worker."""
    with storage_dask() as c:
        yield c


@pytest.fixture
def dask_no_second_chance() -> Iterator[Any]:
    """A Dask cluster of the test's own whose scheduler gives a task up at its first worker
    death (``allowed-failures`` 0)."""
    with storage_dask(allowed_failures=0) as c:
        yield c
