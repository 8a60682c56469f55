"""The memory storage class from Python: ``create_blob(storage="memory")``,
``Namespace.create(..., storage=...)`` and the fsspec ``storage`` option, checked against what
``tomus fs stat`` says of the file's class (the session cluster's providers keep the default
256 MiB of memory class)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from blob_support import CHUNK

import tomus
from tomus.fs import TomusFileSystem


def storage_of(addr: str, path: str) -> str:
    env = dict(os.environ, TOMUS_ADDR=addr)
    r = subprocess.run(
        [sys.executable, "-m", "tomus", "--json", "fs", "stat", path],
        capture_output=True,
        env=env,
        timeout=60,
        check=True,
    )
    return str(json.loads(r.stdout)["storage"])


def test_memory_blob_round_trip(client: tomus.Client) -> None:
    blob = client.create_blob(chunk_size=CHUNK, replication=2, storage="memory")
    data = os.urandom(3 * CHUNK + 17)
    blob.append(data)
    blob.append(b"tail")
    assert blob.read() == data + b"tail"
    assert client.open_blob(blob.id).read(len(data), 4) == b"tail"


def test_unknown_storage_class_is_refused(client: tomus.Client) -> None:
    with pytest.raises(ValueError, match="storage"):
        client.create_blob(storage="tape")


def test_fsspec_storage_option(cluster: tomus.LocalCluster, client: tomus.Client) -> None:
    root = f"mem-{uuid.uuid4().hex[:10]}"
    memory = TomusFileSystem(client=client, chunk_size=CHUNK, replication=2, storage="memory")
    disk = TomusFileSystem(client=client, chunk_size=CHUNK)
    data = os.urandom(2 * CHUNK + 5)
    memory.pipe(f"{root}/piped", data)
    with disk.open(f"{root}/opened", "wb", storage="memory") as f:
        f.write(data)
    disk.pipe(f"{root}/plain", data)
    for name in ("piped", "opened", "plain"):
        assert disk.cat(f"{root}/{name}") == data
    assert storage_of(cluster.addr, f"/{root}/piped") == "memory"
    assert storage_of(cluster.addr, f"/{root}/opened") == "memory"
    assert storage_of(cluster.addr, f"/{root}/plain") == "disk"
    # A new version of a memory file stays in memory.
    memory.pipe(f"{root}/piped", b"second")
    assert disk.cat(f"{root}/piped") == b"second"
    assert storage_of(cluster.addr, f"/{root}/piped") == "memory"
    disk.rm(root, recursive=True)
