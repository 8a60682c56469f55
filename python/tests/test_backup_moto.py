"""Backup to an independent S3 server (issue 14): moto's S3 server, installed from PyPI, not the
project's own gateway. Two points (write, overwrite, append, delete between them) restore into
fresh clusters byte for byte, nothing later leaks into an earlier point, `verify` passes, and the
bytes really are at the independent server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import cluster, free_port, start, wait_listening

import tomus

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server", reason="moto[server] is in python/requirements-test.txt")

BUCKET = "tomus-backups"
AWS = {
    "AWS_ACCESS_KEY_ID": "moto-access",
    "AWS_SECRET_ACCESS_KEY": "moto-secret",
    "AWS_REGION": "us-east-1",
}


@pytest.fixture
def moto(tmp_path: Path) -> Iterator[str]:
    """A moto S3 server on loopback with one empty bucket; its endpoint URL."""
    port = free_port()
    log = (tmp_path / "moto.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())
        deadline = time.monotonic() + 30
        while True:
            try:
                s3.create_bucket(Bucket=BUCKET)
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": AWS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": AWS["AWS_SECRET_ACCESS_KEY"],
    }


def _tomus(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tomus", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert done.returncode == 0, f"tomus {' '.join(args)}: {done.stderr}"
    return done.stdout


def _held(addr: str) -> dict[str, bytes]:
    """Every file below /data and its current content."""
    fs = tomus.connect(addr).fs()
    return {p: fs.cat_file(p) for p in sorted(fs.find("/data"))}


def _restore_and_read(env: dict[str, str], url: str, point: str, root: Path) -> dict[str, bytes]:
    data = root / f"restored-{point}"
    _tomus(env, "backup", "restore", "--target", url, "--at", point, "--providers", "2",
           "--data", str(data))  # fmt: skip
    log = root / f"up-{point}.log"
    up = start(["up", "--data", str(data), "--addr", "127.0.0.1:0"], log, env)
    try:
        return _held(wait_listening(up, log))
    finally:
        up.terminate()
        up.wait(timeout=30)


def test_points_at_an_independent_s3_server_restore_exactly(moto: str, tmp_path: Path) -> None:
    env = {**AWS, "AWS_ENDPOINT_URL": moto, "AWS_ALLOW_HTTP": "true"}
    url = f"s3://{BUCKET}/cluster-a"
    (tmp_path / "source").mkdir()
    with cluster(tmp_path / "source", 2, env=env) as c:
        fs = tomus.connect(c.addr).fs()
        fs.pipe_file("/data/a.bin", os.urandom(300_000))
        fs.pipe_file("/data/a.bin", os.urandom(200_000))  # a second version
        fs.pipe_file("/data/dir/b.txt", b"first point\n" * 1000)
        _tomus(env, "--addr", c.addr, "backup", "enable", "--target", url, "--rate", "0")
        first = json.loads(_tomus(env, "--addr", c.addr, "backup", "now", "--wait", "--json"))
        want_first = _held(c.addr)

        fs.pipe_file("/data/a.bin", b"overwritten")
        with fs.open("/data/dir/b.txt", "ab") as f:
            f.write(b"appended\n")
        fs.rm("/data/dir/b.txt")
        fs.pipe_file("/data/c.bin", os.urandom(1 << 20))
        second = json.loads(_tomus(env, "--addr", c.addr, "backup", "now", "--wait", "--json"))
        want_second = _held(c.addr)
        _tomus(env, "--addr", c.addr, "backup", "verify", "--target", url)

    points = [first["last_point"], second["last_point"]]
    assert points[0] != points[1]
    names = [sorted(p.rsplit("/", 1)[1] for p in w) for w in (want_first, want_second)]
    assert names == [["a.bin", "b.txt"], ["a.bin", "c.bin"]]
    assert _restore_and_read(env, url, points[0], tmp_path) == want_first
    assert _restore_and_read(env, url, points[1], tmp_path) == want_second

    # The bytes are at the independent server: at least the data written, in its bucket.
    s3 = boto3.client("s3", endpoint_url=moto, region_name="us-east-1", **_keys())
    stored = sum(
        o["Size"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for o in page.get("Contents", [])
    )
    assert stored >= 300_000 + 200_000 + (1 << 20)
