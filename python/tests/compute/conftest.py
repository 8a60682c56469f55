"""Fixtures of the compute tests: the session's tomus cluster (from ../conftest.py) and one real
Dask LocalCluster (2 worker processes, one thread each) shared by the tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tomus

WORKERS = 2


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
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


@pytest.fixture
def dask(dask_client: Any) -> Iterator[Any]:
    """The shared Dask client, with its full set of workers back after the test (a test may
    kill one; its nanny restarts it)."""
    dask_client.wait_for_workers(WORKERS, timeout=60)
    yield dask_client
    dask_client.wait_for_workers(WORKERS, timeout=60)


@pytest.fixture(scope="session")
def addr(cluster: tomus.LocalCluster) -> str:
    return cluster.addr


@pytest.fixture(scope="session")
def tc(cluster: tomus.LocalCluster) -> tomus.Client:
    return cluster.connect()
