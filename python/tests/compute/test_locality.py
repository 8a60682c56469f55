"""Locality: providers and Dask workers on distinct loopback "hosts" (127.0.0.2, 127.0.0.3 all
route to lo on Linux); map tasks should run on the worker next to their chunk."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from computetext import make_text
from hosts import dask_on, kill_all, start_manager, start_provider, wait_for_providers

import tomus
from tomus.compute.apps.text import most_frequent_words, reference_top_words, word_count
from tomus.compute.engine import Placement

HOSTS = ["127.0.0.2", "127.0.0.3"]
_TMPFS = "/dev/shm" if os.path.isdir("/dev/shm") else None


class SpreadCluster:
    """A manager on 127.0.0.1 and providers started one by one on HOSTS.

    Placement sends a new chunk to the provider with the most free space; providers sharing
    one disk report almost the same, so which one wins is luck. The first provider here keeps
    its chunks on tmpfs (less free space than the disk): it gets every chunk while it is alone,
    and the disk-backed second one gets every chunk written after it joins. So the test knows
    the data ends up on both hosts.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dirs: list[str] = []
        manager, self.addr = start_manager(root / "m")
        self.procs: list[subprocess.Popen[bytes]] = [manager]
        self.client = tomus.connect(self.addr)

    def add_provider(self, host: str, data_dir: str) -> None:
        self.dirs.append(data_dir)
        self.procs.append(start_provider(self.addr, host, data_dir))
        wait_for_providers(self.client, len(self.dirs))

    def stop(self) -> None:
        kill_all(self.procs)
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def spread_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpreadCluster]:
    c = SpreadCluster(tmp_path_factory.mktemp("hosts"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def spread_dask() -> Iterator[Any]:
    with dask_on(HOSTS) as c:
        yield c


@pytest.mark.slow
def test_map_tasks_run_next_to_their_chunks(
    spread_cluster: SpreadCluster, spread_dask: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    addr = spread_cluster.addr
    client = spread_cluster.client
    hosts_of_workers = {
        w.split("://")[1].rsplit(":", 1)[0] for w in spread_dask.scheduler_info()["workers"]
    }
    assert hosts_of_workers == set(HOSTS)
    texts = [make_text(seed, 600) for seed in range(4)]
    blobs = []
    for i, t in enumerate(texts):
        if i == 0:
            spread_cluster.add_provider(HOSTS[0], tempfile.mkdtemp(dir=_TMPFS))
        if i == 2:
            # On the same file system as the first: placement fills the emptier file system
            # first, and a disk with less free space than /dev/shm would get nothing.
            spread_cluster.add_provider(HOSTS[1], tempfile.mkdtemp(dir=_TMPFS))
        b = client.create_blob(chunk_size=16 << 10)
        b.write(0, t)
        blobs.append(b.id)
    holders = {h for b in blobs for _, _, ps in client.open_blob(b).locations() for h in ps}
    assert {h.rsplit(":", 1)[0] for h in holders} == set(HOSTS)  # data on both hosts

    res = most_frequent_words(blobs, 5, spread_dask, addr, ratio=3, split_size=16 << 10)
    assert res.value == reference_top_words(b"".join(texts), 5)
    maps = [t for t in res.timeline if t.kind == "map"]
    assert all(len(t.data_hosts) == 1 for t in maps)  # one chunk per split, one replica
    fraction = res.colocated_fraction
    assert fraction is not None
    print(f"\nIterativeReduce maps co-located with their chunk: {fraction:.0%} of {len(maps)}")
    assert fraction >= 0.75

    wc = word_count(blobs, spread_dask, addr, split_size=16 << 10)
    print(f"MapReduce maps co-located with their chunk: {wc.colocated_fraction:.0%}")
    assert wc.colocated_fraction is not None and wc.colocated_fraction >= 0.75

    # Without the hints Dask places tasks by load alone: about half land next to their chunk.
    monkeypatch.setattr(Placement, "submit_options", lambda self, hosts: {})
    blind = most_frequent_words(blobs, 5, spread_dask, addr, ratio=3, split_size=16 << 10)
    print(f"... and without locality hints: {blind.colocated_fraction:.0%}")
    assert blind.value == res.value
