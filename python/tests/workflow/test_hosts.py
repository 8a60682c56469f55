"""Workflows on distinct hosts: a manager on 127.0.0.1 and three "hosts" 127.0.0.2-4 (all
routed to lo on Linux, as in ``compute/test_locality.py``), each with its own provider bound
to its address and its own Dask worker; needs no root, so it never skips. Tasks on one host
register files; readers on the others fetch them through the memory, direct and swarm
modules. Checked: the bytes (sha256 computed by the reading tasks), which module ran for each
transfer, and which holders served it (the producer's host, or readers that became holders).

Also here, because it needs providers whose data directories the test knows: collection of
registered copies (deleting a registered file removes its copies, the swarm readers' ones
included, from every provider's disk)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hosts import dask_on, kill_all, start_manager, start_provider, wait_for_providers
from workflow_support import write

import tomus
from tomus import workflow
from tomus.workflow import Workflow
from tomus.workflow.modules import SwarmModule, TransferContext
from tomus.workflow.runner import file_info, run
from tomus.workflow.selection import SelectionConfig

HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
MIB = 1 << 20


class Hosts:
    """The manager and one provider per host (``addrs[i]`` on ``HOSTS[i]``, data in
    ``dirs[i]``)."""

    def __init__(self, root: Path) -> None:
        manager, self.addr = start_manager(root / "m")
        self.procs: list[subprocess.Popen[bytes]] = [manager]
        self.client = tomus.connect(self.addr)
        self.dirs = [root / f"p{i}" for i in range(len(HOSTS))]
        for host, d in zip(HOSTS, self.dirs, strict=True):
            self.procs.append(start_provider(self.addr, host, d))
        wait_for_providers(self.client, len(HOSTS))
        by_host = {p.addr.rsplit(":", 1)[0]: p.addr for p in self.client.providers()}
        self.addrs = [by_host[h] for h in HOSTS]

    def copies_bytes(self) -> int:
        """Bytes on disk of every registered copy of every provider."""
        total = 0
        for d in self.dirs:
            reg = d / "registered"
            if reg.is_dir():
                total += sum(f.stat().st_blocks * 512 for f in reg.iterdir())
        return total

    def stop(self) -> None:
        kill_all(self.procs)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    h = Hosts(tmp_path_factory.mktemp("hosts"))
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture(scope="module")
def host_dask() -> Iterator[Any]:
    with dask_on(HOSTS) as c:
        yield c


def _host(addr: str) -> str:
    return addr.split("://")[-1].rsplit(":", 1)[0]


def test_tasks_on_distinct_hosts_pass_files_by_memory_direct_and_swarm(
    hosts: Hosts, host_dask: Any, tmp_path: Path
) -> None:
    # Each Dask worker is paired with the provider of its own host.
    by_host = dict(zip(HOSTS, hosts.addrs, strict=True))
    workers = list(host_dask.scheduler_info()["workers"])
    assert {_host(w) for w in workers} == set(HOSTS)
    pairs = {w: by_host[_host(w)] for w in workers}
    wf = Workflow("hosts", "/t/hosts")
    wf.task(
        "gen",
        "head -c 1048576 /dev/urandom > small.bin && head -c 25165824 /dev/urandom > mid.bin "
        "&& head -c 41943040 /dev/urandom > wide.bin",
        outputs=["small.bin", "mid.bin", "wide.bin"],
    )
    # Three readers start together: an idle worker each, so two run on other hosts than
    # the producer. small.bin: memory (< 15 MiB); mid.bin, 2 readers: 1 holder + 2 x 0.5 <
    # 2.5, direct; wide.bin, 3 readers: 1 + 3 x 0.5 >= 2.5, swarm.
    for i, inputs in enumerate(
        [["small.bin", "mid.bin", "wide.bin"]] * 2 + [["small.bin", "wide.bin"]]
    ):
        wf.task(
            f"read{i}",
            f"sha256sum {' '.join(inputs)} > sums{i}.txt",
            inputs=inputs,
            outputs=[f"sums{i}.txt"],
        )
    config = SelectionConfig(replica_threshold=2.5)
    report = run(
        wf, hosts.client, dask_client=host_dask, config=config, providers=pairs,
        work_root=tmp_path / "work", progress=False,
    )  # fmt: skip
    gen_provider = report.tasks["gen"]["provider"]
    # The bytes every reader saw are the registered file's (fetched here and hashed).
    expected = {}
    for name in ("small.bin", "mid.bin", "wide.bin"):
        local = tmp_path / name
        workflow.fetch(hosts.client, f"/t/hosts/{name}", local)
        expected[name] = hashlib.sha256(local.read_bytes()).hexdigest()
    assert os.path.getsize(tmp_path / "wide.bin") == 40 * MIB
    for i in range(3):
        local = tmp_path / f"sums{i}.txt"
        workflow.fetch(hosts.client, f"/t/hosts/sums{i}.txt", local)
        for line in local.read_text().splitlines():
            digest, name = line.split()
            assert digest == expected[name], f"read{i} saw other bytes of {name}"
    modules = {"small.bin": "memory", "mid.bin": "direct", "wide.bin": "swarm"}
    remote = set()
    reader_providers = {report.tasks[f"read{i}"]["provider"] for i in range(3)}
    assert len(reader_providers) == 3, "the readers did not run on three hosts"
    for i in range(3):
        task = report.tasks[f"read{i}"]
        for t in task["transfers"]:
            name = t["file"].rsplit("/", 1)[1]
            assert t["module"] == modules[name], (name, t)
            assert t["bytes"] == os.path.getsize(tmp_path / name)
            servers = {addr for addr, n in t["served"] if n > 0}
            assert sum(n for _, n in t["served"]) == t["bytes"], t
            if t["module"] == "swarm":
                # The producer's host, or other readers (holders once done, or peers).
                assert servers <= {gen_provider} | reader_providers - {task["provider"]}, t
            else:
                assert servers == {gen_provider}, t
            if task["provider"] != gen_provider:
                remote.add(t["module"])
    assert remote == {"memory", "direct", "swarm"}, "some module never crossed hosts"
    # Swarm readers became holders of wide.bin.
    info = file_info(hosts.client, "/t/hosts/wide.bin")
    assert info is not None and set(info.holders) == set(hosts.addrs)


def test_deleting_a_registered_file_removes_every_copy(hosts: Hosts, tmp_path: Path) -> None:
    """A file registered on host 0 and fetched by swarm readers on hosts 1 and 2 (who
    register their copies) has three copies; deleting it gives their disk space back."""
    size = 24 * MIB + 3
    src = tmp_path / "src"
    write(src, size)
    path = "/t/hosts/gc.bin"
    workflow.register(hosts.client, src, path, provider=hosts.addrs[0])
    src.unlink()  # the provider's link is the only one left: its blocks are the copy's

    def read(i: int) -> None:
        info = file_info(hosts.client, path)
        assert info is not None
        ctx = TransferContext(info, pending_readers=2, provider=hosts.addrs[i], client=hosts.client)
        dest = tmp_path / f"r{i}"
        SwarmModule().fetch(info, dest, ctx)
        dest.unlink()  # the reader's task directory goes; its registered copy stays

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(read, [1, 2]))
    rec = workflow.registered(hosts.client, path)
    assert {h["addr"] for h in rec["holders"]} == set(hosts.addrs)
    copies = [
        d / "registered" / h["name"]
        for h in rec["holders"]
        for d, a in zip(hosts.dirs, hosts.addrs, strict=True)
        if a == h["addr"]
    ]
    assert all(c.stat().st_size == size for c in copies)
    # No partial copy of the swarm readers is left behind: only the three holders' copies.
    names = {c.name for c in copies}
    for d in hosts.dirs:
        left = {f.name for f in (d / "registered").iterdir()} - names
        assert not [n for n in left if (d / "registered" / n).stat().st_size == size], left
    before = hosts.copies_bytes()
    hosts.client.fs().rm(path)
    deadline = time.monotonic() + 20
    while any(c.exists() for c in copies):
        assert time.monotonic() < deadline, f"copies still there: {copies}"
        time.sleep(0.1)
    freed = before - hosts.copies_bytes()
    assert freed >= 3 * size, (before, freed)
    with pytest.raises(FileNotFoundError):
        hosts.client.fs().info(path)


def test_persisting_a_registered_file_removes_its_copies(hosts: Hosts, tmp_path: Path) -> None:
    """`tomus fs persist` replaces the registered entry by an ordinary file: the holder's
    copy is collected, the persisted file keeps the bytes."""
    size = 3 * MIB + 5
    data = write(tmp_path / "src", size, seed=13)
    path = "/t/hosts/persist.bin"
    rec = workflow.register(hosts.client, tmp_path / "src", path, provider=hosts.addrs[1])
    (tmp_path / "src").unlink()
    copy = hosts.dirs[1] / "registered" / rec["holders"][0]["name"]
    assert copy.stat().st_size == size
    workflow.registered(hosts.client, path)  # its checksum recorded first (persist reads it)
    env = dict(os.environ, TOMUS_ADDR=hosts.addr)
    p = subprocess.run(
        [sys.executable, "-m", "tomus", "fs", "persist", path],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    deadline = time.monotonic() + 20
    while copy.exists():
        assert time.monotonic() < deadline, "the holder's copy was not collected"
        time.sleep(0.1)
    with hosts.client.fs().open(path, "rb") as f:
        assert f.read() == data
