"""Shared fixtures: one real embedded cluster (``tomus up`` with 4 providers) per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from blob_support import CHUNK
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

import tomus

# Keep hypothesis' example database inside python/ (git-ignored), wherever pytest runs from.
settings.register_profile(
    "tomus", database=DirectoryBasedExampleDatabase(Path(__file__).parent.parent / ".hypothesis")
)
settings.load_profile("tomus")


@pytest.fixture(scope="session")
def cluster() -> Iterator[tomus.LocalCluster]:
    with tomus.local_cluster(providers=4, fsync=False) as c:
        yield c


@pytest.fixture(scope="session")
def client(cluster: tomus.LocalCluster) -> tomus.Client:
    return cluster.connect()


@pytest.fixture
def blob(client: tomus.Client) -> tomus.Blob:
    """A fresh blob with small (64 KiB) chunks, so small data spans many chunks."""
    return client.create_blob(chunk_size=CHUNK)
