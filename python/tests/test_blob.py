"""Blob round trips, unaligned writes, snapshots, metadata calls: real cluster, real sockets."""

from __future__ import annotations

import array
import pickle
import random

import numpy as np
import pytest
from blob_support import CHUNK

import tomus

SIZES = [1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK - 1, 3 * CHUNK + 1, 10 * CHUNK + 7]


@pytest.mark.parametrize("size", SIZES)
def test_write_read_round_trip(blob: tomus.Blob, size: int) -> None:
    data = random.Random(size).randbytes(size)
    v = blob.write(0, data)
    assert v == 1 == blob.latest()
    assert blob.size() == size
    assert blob.read() == data
    assert blob.read(0, size, version=v) == data
    # Ranges that start and end on either side of chunk boundaries.
    for start in {0, 1, CHUNK - 1, CHUNK, CHUNK + 1, size - 1}:
        if 0 <= start < size:
            for length in {1, CHUNK, size - start}:
                if 0 < length <= size - start:
                    assert blob.read(start, length) == data[start : start + length]
    assert blob.read(size - 1) == data[-1:]


@pytest.mark.parametrize("size", SIZES)
def test_append_round_trip(blob: tomus.Blob, size: int) -> None:
    first = random.Random(-size).randbytes(size)
    second = random.Random(size).randbytes(CHUNK // 2 + 3)
    assert blob.append(first) == (1, 0)
    assert blob.append(second) == (2, size)
    assert blob.read() == first + second
    assert blob.read(version=1) == first


def test_unaligned_writes_match_a_model(blob: tomus.Blob) -> None:
    rng = random.Random(7)
    model = bytearray()
    snapshots = {0: b""}
    for _ in range(25):
        offset = rng.randrange(0, len(model) + 2 * CHUNK)  # sometimes past the end: a hole
        data = rng.randbytes(rng.randrange(1, 3 * CHUNK))
        v = blob.write(offset, data)
        if offset > len(model):
            model.extend(bytes(offset - len(model)))
        model[offset : offset + len(data)] = data
        snapshots[v] = bytes(model)
        assert blob.size() == len(model)
    assert blob.read() == model
    # Every earlier version still reads exactly as it was written.
    for v, snap in snapshots.items():
        assert blob.read(version=v) == snap, f"version {v}"
        assert blob.size(v) == len(snap)
    for _ in range(20):
        start = rng.randrange(len(model))
        size = rng.randrange(0, len(model) - start + 1)
        assert blob.read(start, size) == model[start : start + size]


def test_write_takes_any_bytes_like(blob: tomus.Blob) -> None:
    ints = np.arange(1000, dtype=np.int32)
    inputs = [
        b"bytes",
        bytearray(b"bytearray"),
        memoryview(b"0123456789")[2:7],
        ints,
        array.array("d", [1.5, 2.5]),
        np.arange(12, dtype=np.float64).reshape(3, 4),
    ]
    expected = b""
    for data in inputs:
        _, off = blob.append(data)
        assert off == len(expected)
        expected += memoryview(data).tobytes()
    assert blob.read() == expected


def test_read_defaults_and_empty_reads(blob: tomus.Blob) -> None:
    assert blob.latest() == 0
    assert blob.size() == 0
    assert blob.read() == b""
    blob.write(0, b"abcdef")
    assert blob.read(2) == b"cdef"
    assert blob.read(6) == b""
    assert blob.read(3, 0) == b""
    assert blob.read(version=0) == b""
    assert isinstance(blob.read(), bytes)


def test_holes_read_as_zeros(blob: tomus.Blob) -> None:
    blob.write(3 * CHUNK, b"end")
    assert blob.size() == 3 * CHUNK + 3
    assert blob.read(0, 3 * CHUNK) == bytes(3 * CHUNK)
    locs = blob.locations()
    assert locs[0][0] == 0 and locs[0][2] == []  # a hole: no provider
    assert locs[-1][2], "the written range has a provider"


def test_stat_versions_locations(client: tomus.Client, blob: tomus.Blob) -> None:
    v1 = blob.write(0, bytes(2 * CHUNK + 5))
    v2, off = blob.append(b"tail")
    st = blob.stat()
    assert (st.blob, st.version, st.state, st.append) == (blob.id, v2, "published", True)
    assert (st.offset, st.length, st.size) == (off, 4, 2 * CHUNK + 9)
    assert blob.stat(v1).size == 2 * CHUNK + 5 and not blob.stat(v1).append
    versions = blob.versions()
    assert [v.version for v in versions] == [v1, v2] and len(versions) == 2
    assert versions[-1] == st and versions.aborted == []
    providers = {p.addr for p in client.providers()}
    assert len(providers) == 4
    locs = blob.locations()
    assert sum(size for _, size, _ in locs) == blob.size()
    assert [off for off, _, _ in locs] == sorted(off for off, _, _ in locs)
    for _, _, addrs in locs:
        assert addrs and set(addrs) <= providers
    assert blob.locations(CHUNK, 10) == [(CHUNK, 10, locs_at(locs, CHUNK))]
    assert blob.locations(0, 5, version=v1)[0][0] == 0


def locs_at(locs: list[tuple[int, int, list[str]]], offset: int) -> list[str]:
    return next(a for o, s, a in locs if o <= offset < o + s)


def test_open_and_list(client: tomus.Client, blob: tomus.Blob) -> None:
    blob.write(0, b"listed")
    again = client.open_blob(blob.id)
    assert (again.id, again.chunk_size, again.replication) == (blob.id, CHUNK, 1)
    assert again.read() == b"listed"
    info = next(b for b in client.list_blobs() if b.id == blob.id)
    assert (info.chunk_size, info.replication, info.latest, info.size) == (CHUNK, 1, 1, 6)


def test_reprs(client: tomus.Client, blob: tomus.Blob, cluster: tomus.LocalCluster) -> None:
    blob.write(0, b"x")
    assert repr(client) == f"Client(addr='{cluster.addr}')"
    assert repr(blob).startswith(f"Blob(id={blob.id}, chunk_size={CHUNK}, replication=1")
    assert "state='published'" in repr(blob.stat())
    assert "1 published" in repr(blob.versions())
    assert "alive=True" in repr(client.providers()[0])
    # A sound provider reports no fault (and its repr names none).
    assert client.providers()[0].fault is None
    assert "fault" not in repr(client.providers()[0])
    assert client.providers()[0].state == "up"
    assert "state='up'" in repr(client.providers()[0])
    assert "running" in repr(cluster)


def test_pickle_round_trip(client: tomus.Client, blob: tomus.Blob) -> None:
    blob.write(0, b"pickled")
    b2 = pickle.loads(pickle.dumps(blob))
    assert (b2.id, b2.chunk_size, b2.replication) == (blob.id, blob.chunk_size, 1)
    assert b2.read() == b"pickled"
    c2 = pickle.loads(pickle.dumps(client))
    assert c2.addr == client.addr and c2.open_blob(blob.id).read() == b"pickled"


def test_connect_uses_tomus_addr(
    cluster: tomus.LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOMUS_ADDR", cluster.addr)
    assert tomus.connect().addr == cluster.addr
    monkeypatch.delenv("TOMUS_ADDR")
    with pytest.raises(tomus.InvalidArgument, match="TOMUS_ADDR"):
        tomus.connect()


def test_replicated_blob(client: tomus.Client) -> None:
    b = client.create_blob(chunk_size=CHUNK, replication=2)
    b.write(0, bytes(range(256)) * 1000)
    assert b.read() == bytes(range(256)) * 1000
    for _, _, addrs in b.locations():
        assert len(set(addrs)) == 2


def test_delete_blob(client: tomus.Client) -> None:
    blob = client.create_blob(chunk_size=CHUNK)
    v = blob.write(0, b"x" * (2 * CHUNK))
    client.delete_blob(blob.id)
    with pytest.raises(tomus.NotFound):
        blob.read(0, 1, version=v)
    with pytest.raises(tomus.NotFound):
        client.open_blob(blob.id)
    with pytest.raises(tomus.NotFound):
        client.delete_blob(blob.id)
    assert blob.id not in {b.id for b in client.list_blobs()}


def test_delete_blob_refuses_a_files_blob(client: tomus.Client) -> None:
    fs = client.fs()
    fs.pipe("/delete-refused/f.bin", b"kept")
    _, blob = client.namespace().open("/delete-refused/f.bin")
    with pytest.raises(tomus.PreconditionFailed, match=r"/delete-refused/f\.bin"):
        client.delete_blob(blob.id)
    assert fs.cat("/delete-refused/f.bin") == b"kept"
    fs.rm("/delete-refused", recursive=True)


def test_namespace_refuses_urls_as_new_names(client: tomus.Client) -> None:
    """The namespace API takes paths (``dir/file``): a URL given where a new name goes is
    refused instead of becoming a directory named after its scheme (``s3:``, ``tomus:``)."""
    ns = client.namespace()
    client.fs().pipe("/url-refused/f", b"x")
    for make in (
        lambda: ns.mkdir("s3://b/k", True),
        lambda: ns.create("tomus://x/y.csv"),
        lambda: ns.create("file:///tmp/x.csv"),
        lambda: ns.rename("/url-refused/f", "https://host/f"),
    ):
        with pytest.raises(tomus.InvalidArgument, match="URL"):
            make()
    assert not [e["name"] for e in ns.list("/") if e["name"].endswith(":")]
    assert ns.stat("/url-refused/f")["type"] == "file"
    ns.delete("/url-refused", recursive=True)
