"""The tomus command line from the Python package, and local_cluster's life cycle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tomus


def tomus_cli(
    *args: str, addr: str | None = None, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    if addr:
        env["TOMUS_ADDR"] = addr
    return subprocess.run(
        [sys.executable, "-m", "tomus", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=60,
    )


def test_python_m_tomus_runs_blob_commands(
    cluster: tomus.LocalCluster, client: tomus.Client
) -> None:
    r = tomus_cli("blob", "create", "--chunk-size", "64KiB", addr=cluster.addr)
    assert r.returncode == 0, r.stderr
    blob_id = int(r.stdout)
    r = tomus_cli("blob", "append", str(blob_id), "-", addr=cluster.addr, stdin=b"from the cli")
    assert r.returncode == 0 and r.stdout.split() == [b"1", b"0"], r.stderr
    assert client.open_blob(blob_id).read() == b"from the cli"
    r = tomus_cli("--json", "blob", "stat", str(blob_id), addr=cluster.addr)
    assert json.loads(r.stdout)["size"] == 12
    r = tomus_cli("blob", "read", str(blob_id), "--offset", "5", addr=cluster.addr)
    assert r.stdout == b"the cli"


@pytest.mark.parametrize(
    "args",
    [
        ("fs", "ls", "-r", "/"),
        ("status",),
        ("compute", "wordcount", "pipe/words.txt", "--workers", "1"),
    ],
)
def test_output_into_a_closed_pipe_ends_quietly(
    cluster: tomus.LocalCluster, client: tomus.Client, args: tuple[str, ...]
) -> None:
    # `tomus fs ls -r / | head -1` once head has exited: the native command line runs in
    # this interpreter (which ignores SIGPIPE), the compute commands are Python.
    client.fs().pipe("pipe/words.txt", b"a b a c\n")
    read, write = os.pipe()
    os.close(read)
    env = dict(os.environ, TOMUS_ADDR=cluster.addr)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "tomus", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            timeout=60,
        )
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (0, b"")


def test_cli_exit_codes_and_help(cluster: tomus.LocalCluster) -> None:
    r = tomus_cli("blob", "read", "999999", addr=cluster.addr)
    assert r.returncode == 3 and b"does not exist" in r.stderr
    r = tomus_cli("--help")
    assert r.returncode == 0 and b"tomus up" in r.stdout
    r = tomus_cli("no-such-command")
    assert r.returncode == 2


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("tomus")
    assert script.exists(), "pip install should create the tomus script next to python"
    r = subprocess.run([script, "--version"], capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(b"tomus ")


def test_local_cluster_stop_kills_processes_and_removes_temp_dir() -> None:
    cluster = tomus.local_cluster(providers=1)
    data_dir, pid = cluster.data_dir, cluster._proc.pid
    blob = cluster.connect().create_blob()
    assert blob.write(0, b"durable") == 1
    assert (data_dir / "logs").is_dir() and cluster.running
    cluster.stop()
    assert not cluster.running and not data_dir.exists()
    assert live_processes_in_group(pid) == [], "the whole process group is gone"
    cluster.stop()  # idempotent
    with pytest.raises(tomus.Unavailable):
        blob.read()


def live_processes_in_group(pgid: int) -> list[int]:
    """Processes of group `pgid` that are not zombies (PID 1 may not reap orphans here)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


def test_local_cluster_keeps_a_given_data_dir(tmp_path: Path) -> None:
    with tomus.local_cluster(providers=2, data_dir=tmp_path / "data", memory_tier="1MiB") as c:
        blob = c.connect().create_blob()
        blob.write(0, b"kept")
        assert len(c.connect().providers()) == 2
    assert (tmp_path / "data" / "manager").is_dir()
    # The manager's state is durable: a new cluster on the same directory has the blob.
    with tomus.local_cluster(providers=2, data_dir=tmp_path / "data") as c:
        assert c.connect().open_blob(blob.id).read() == b"kept"


def test_local_cluster_failure_reports_the_log() -> None:
    with pytest.raises(tomus.ClusterStartError, match="providers must be at least 1") as e:
        tomus.local_cluster(providers=0)
    assert "exited with status" in str(e.value)
