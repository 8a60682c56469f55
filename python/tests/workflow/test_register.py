"""Registering a file: O(1) in its size, no copy (same inode in the provider's directory),
immutable afterwards; reading it back from its holders."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
from workflow_support import write

import tomus
from tomus import workflow


def _register_time(client: tomus.Client, local: Path, path: str) -> float:
    t0 = time.perf_counter()
    workflow.register(client, local, path)
    return time.perf_counter() - t0


def _copies(root: Path, ino: int) -> list[Path]:
    return [p for p in root.rglob("registered/*") if p.stat().st_ino == ino]


def test_register_time_does_not_depend_on_size(
    client: tomus.Client, cluster: tomus.LocalCluster, tmp_path: Path
) -> None:
    small = tmp_path / "small"
    big = tmp_path / "big"
    write(small, 1 << 20)
    # 1 GiB written once (not random: the content does not matter, its size does).
    with open(big, "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(1024):
            f.write(block)
    # Alternated, so both sizes meet the same background load (each registration's checksum
    # is computed by the provider after it returns).
    smalls, bigs = [], []
    for i in range(5):
        smalls.append(_register_time(client, small, f"/t/reg/small{i}"))
        bigs.append(_register_time(client, big, f"/t/reg/big{i}"))
    small_t, big_t = sorted(smalls)[2], sorted(bigs)[2]
    # Medians: at most twice the time of 1 MiB (plus 10 ms of scheduling noise on a shared
    # machine).
    assert big_t <= 2 * small_t + 0.010, (smalls, bigs)
    # No copy: the provider holds the very same inode, once per registration.
    ino = big.stat().st_ino
    assert big.stat().st_nlink == 1 + 5
    assert len(_copies(cluster.data_dir, ino)) == 5
    # Disk usage: the 1 GiB of blocks exist once, shared by every name (the free space of a
    # file system shared with other processes is too noisy to compare).
    blocks = {(p.stat().st_ino, p.stat().st_blocks) for p in _copies(cluster.data_dir, ino)}
    assert blocks == {(ino, big.stat().st_blocks)} and big.stat().st_blocks * 512 >= 1 << 30
    rec = workflow.registered(client, "/t/reg/big0")
    assert rec["size"] == 1 << 30 and len(rec["holders"]) == 1


@pytest.mark.parametrize("size", [0, 1, (15 << 20) - 1, 15 << 20, (15 << 20) + 1])
@pytest.mark.parametrize("mode", ["memory", "direct", "swarm"])
def test_fetch_is_byte_exact(
    client: tomus.Client, providers: list[str], tmp_path: Path, size: int, mode: str
) -> None:
    src = tmp_path / "src"
    data = write(src, size)
    path = f"/t/fetch/{mode}-{size}"
    workflow.register(client, src, path, provider=providers[0])
    # A second holder (a copy on another provider) for the swarm to spread over.
    other = tmp_path / "copy"
    other.write_bytes(data)
    workflow.register(client, other, path, provider=providers[1])
    dest = tmp_path / "dest"
    report = workflow.fetch(client, path, dest, mode=mode)
    assert dest.read_bytes() == data
    assert report["bytes"] == size
    rec = workflow.registered(client, path)
    assert rec["checksum"] is not None and len(rec["holders"]) == 2


def test_registered_files_are_immutable_and_listed(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    a = tmp_path / "a"
    write(a, 1000)
    workflow.register(client, a, "/t/imm/a", provider=providers[0])
    b = tmp_path / "b"
    write(b, 999)
    with pytest.raises(tomus.AlreadyExists):
        workflow.register(client, b, "/t/imm/a")
    assert os.stat(a).st_mode & 0o222 == 0, "a registered file stays writable"
    entries = client.fs().ls("/t/imm", detail=False)
    assert any(e.endswith("/t/imm/a") or e.endswith("t/imm/a") for e in entries)


def test_corrupt_holder_is_detected_and_another_used(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    # Above the in-memory size, so the damaged bytes on disk are what is served.
    size = (16 << 20) + 5
    good = write(tmp_path / "a", size)
    (tmp_path / "b").write_bytes(good)
    path = "/t/corrupt/f"
    workflow.register(client, tmp_path / "a", path, provider=providers[0])
    workflow.register(client, tmp_path / "b", path, provider=providers[1])
    workflow.registered(client, path)
    deadline = time.time() + 10
    while workflow.registered(client, path)["checksum"] is None and time.time() < deadline:
        time.sleep(0.02)
    # Damage the first holder's copy (the same inode as the local file it registered).
    os.chmod(tmp_path / "a", 0o644)
    with open(tmp_path / "a", "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff\xfe")
    dest = tmp_path / "dest"
    report = workflow.fetch(client, path, dest, holders=[providers[0], providers[1]])
    assert dest.read_bytes() == good
    assert [f[0] for f in report["failures"]] == [providers[0]]
    assert report["served"] == [(providers[1], size)]
    holders = [h["addr"] for h in workflow.registered(client, path)["holders"]]
    assert holders == [providers[1]], "the damaged holder is still named"


def test_register_refuses_another_file_system(client: tomus.Client) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    p = Path("/dev/shm") / f"tomus-reg-{os.getpid()}"
    p.write_bytes(b"x")
    try:
        if os.stat(p).st_dev == os.stat("/tmp").st_dev:
            pytest.skip("/dev/shm is on the providers' file system here")
        with pytest.raises(tomus.InvalidArgument, match="another file system"):
            workflow.register(client, p, "/t/xfs/x")
    finally:
        p.unlink()


def test_fsspec_lists_and_reads_registered_files(client: tomus.Client, tmp_path: Path) -> None:
    data = write(tmp_path / "r", 3000)
    workflow.register(client, tmp_path / "r", "/t/fsspec/r.bin")
    fs = client.fs()
    info = fs.info("/t/fsspec/r.bin")
    assert info["type"] == "file" and info["registered"] and info["size"] == 3000
    (entry,) = fs.ls("/t/fsspec")
    assert entry["size"] == 3000
    assert fs.cat("/t/fsspec/r.bin") == data
    assert fs.cat_file("/t/fsspec/r.bin", start=10, end=20) == data[10:20]
    # Opened (as pandas or pyarrow would), by range, by head, and copied out: fetched whole
    # and verified, then read locally.
    with fs.open("/t/fsspec/r.bin", "rb") as f:
        assert f.read(5) == data[:5]
        f.seek(2990)
        assert f.read() == data[2990:]
    with fs.open("tomus:///t/fsspec/r.bin", "r", encoding="latin-1", newline="") as t:
        assert t.read() == data.decode("latin-1")
    assert fs.head("/t/fsspec/r.bin", 7) == data[:7]
    assert fs.cat_ranges(["/t/fsspec/r.bin", "/t/fsspec/r.bin"], [0, -4], [3, None]) == [
        data[:3],
        data[-4:],
    ]
    fs.get("/t/fsspec/r.bin", str(tmp_path / "got"))
    assert (tmp_path / "got").read_bytes() == data
    # The temporary copies are gone once the files are closed.
    assert not list(Path(tempfile.gettempdir()).glob("tomus-registered-*"))
