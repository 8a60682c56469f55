"""Fixtures of the compute tests: the session's tomus cluster (from ../conftest.py) and one real
Dask LocalCluster (2 worker processes, one thread each) shared by the tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import tomus

WORKERS = 2


@contextmanager
def _local_dask() -> Iterator[Any]:
    """A client of a new Dask LocalCluster (2 worker processes, one thread each)."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": ":0"},
        silence_logs=50,
    )
    with Client(cluster, set_as_default=False) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
    with _local_dask() as c:
        yield c


@pytest.fixture
def dask(dask_client: Any) -> Iterator[Any]:
    """The shared Dask client with its full set of workers."""
    dask_client.wait_for_workers(WORKERS, timeout=60)
    yield dask_client


@pytest.fixture
def dask_to_kill() -> Iterator[Any]:
    """A Dask cluster of the test's own, for tests that SIGKILL a worker: whether and when
    its nanny brings the worker back is no concern of the tests that follow."""
    with _local_dask() as c:
        yield c


@pytest.fixture(scope="session")
def addr(cluster: tomus.LocalCluster) -> str:
    return cluster.addr


@pytest.fixture(scope="session")
def tc(cluster: tomus.LocalCluster) -> tomus.Client:
    return cluster.connect()
