"""The ``tomus://`` fsspec file system against a real cluster: files around chunk boundaries,
seek/tell, ranged reads, listings, renames, versions, concurrent appends to one file, and
pandas/pyarrow/dask round trips through ``tomus://`` URLs."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Iterator

import fsspec
import pytest
from blob_support import CHUNK

import tomus
from tomus.fs import TomusFileSystem


@pytest.fixture
def fs(client: tomus.Client) -> TomusFileSystem:
    return TomusFileSystem(client=client, chunk_size=CHUNK)


@pytest.fixture
def root(fs: TomusFileSystem) -> Iterator[str]:
    """A fresh directory per test, removed afterwards."""
    d = f"t-{uuid.uuid4().hex[:10]}"
    fs.mkdir(d)
    yield d
    fs.rm(d, recursive=True)


@pytest.fixture
def env_addr(cluster: tomus.LocalCluster) -> Iterator[None]:
    """``TOMUS_ADDR`` set, as a user of plain ``tomus://`` URLs would have it."""
    old = os.environ.get("TOMUS_ADDR")
    os.environ["TOMUS_ADDR"] = cluster.addr
    yield
    if old is None:
        del os.environ["TOMUS_ADDR"]
    else:
        os.environ["TOMUS_ADDR"] = old


SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, int(3.5 * CHUNK)]


@pytest.mark.parametrize("size", SIZES)
def test_write_then_read_around_chunk_boundaries(fs: TomusFileSystem, root: str, size: int) -> None:
    data = random.Random(size).randbytes(size)
    path = f"{root}/f-{size}.bin"
    with fs.open(path, "wb") as f:
        # Uneven pieces, so the write-behind buffer fills across chunk boundaries.
        for i in range(0, size, 10_007):
            f.write(data[i : i + 10_007])
    info = fs.info(path)
    assert (info["type"], info["size"]) == ("file", size)
    assert fs.cat_file(path) == data
    with fs.open(path, "rb") as f:
        assert f.read() == data
    if size:
        assert fs.cat_file(path, start=size // 3, end=size - 1) == data[size // 3 : size - 1]
        assert fs.cat_file(path, start=-1) == data[-1:]


def test_seek_tell_and_ranged_reads(fs: TomusFileSystem, root: str) -> None:
    data = random.Random(7).randbytes(5 * CHUNK + 11)
    fs.pipe_file(f"{root}/s.bin", data)
    with fs.open(f"{root}/s.bin", "rb") as f:
        assert f.seek(CHUNK - 3) == CHUNK - 3
        assert f.read(6) == data[CHUNK - 3 : CHUNK + 3]
        assert f.tell() == CHUNK + 3
        f.seek(-5, os.SEEK_END)
        assert f.read() == data[-5:]
        f.seek(2 * CHUNK)
        assert f.read(CHUNK) == data[2 * CHUNK : 3 * CHUNK]
    starts = [0, CHUNK - 1, 3 * CHUNK, 5 * CHUNK]
    ends = [10, CHUNK + 1, 4 * CHUNK + 5, 5 * CHUNK + 11]
    got = fs.cat_ranges([f"{root}/s.bin"] * 4, starts, ends)
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=False)]


def test_listing_find_glob_mv_and_rm(fs: TomusFileSystem, root: str) -> None:
    for name in ["a/x.csv", "a/y.csv", "a/b/z.parquet", "c.txt"]:
        fs.pipe_file(f"{root}/{name}", name.encode())
    assert fs.ls(root, detail=False) == [f"{root}/a", f"{root}/c.txt"]
    assert fs.find(root) == [
        f"{root}/a/b/z.parquet",
        f"{root}/a/x.csv",
        f"{root}/a/y.csv",
        f"{root}/c.txt",
    ]
    assert fs.glob(f"{root}/a/*.csv") == [f"{root}/a/x.csv", f"{root}/a/y.csv"]
    assert fs.isdir(f"{root}/a/b") and fs.isfile(f"{root}/c.txt")
    assert fs.info(f"{root}/a")["type"] == "directory"

    fs.mv(f"{root}/a", f"{root}/moved")
    assert not fs.exists(f"{root}/a")
    assert fs.cat_file(f"{root}/moved/b/z.parquet") == b"a/b/z.parquet"
    with pytest.raises(OSError):
        fs.rmdir(f"{root}/moved")  # not empty
    fs.rm(f"{root}/moved", recursive=True)
    assert fs.ls(root, detail=False) == [f"{root}/c.txt"]
    with pytest.raises(FileNotFoundError):
        fs.info(f"{root}/moved/x.csv")
    with pytest.raises(FileNotFoundError):
        fs.open(f"{root}/nope", "rb")


def test_every_close_is_a_version_and_old_ones_stay_readable(
    fs: TomusFileSystem, root: str
) -> None:
    path = f"{root}/v.txt"
    contents = [b"first version, long enough" * 1000, b"second", b"third, a bit longer"]
    versions = []
    for c in contents:
        with fs.open(path, "wb") as f:
            f.write(c)
        versions.append(fs.info(path)["version"])
    assert versions == sorted(versions) and len(set(versions)) == 3
    assert fs.cat_file(path) == contents[-1]
    for v, c in zip(versions, contents, strict=False):
        with fs.open(path, "rb", version=v) as f:
            assert f.read() == c
        assert fs.cat_file(f"{path}?version={v}") == c
        assert fs.info(f"{path}?version={v}")["size"] == len(c)
    assert fs.versions(path) == versions
    # One round trip gives the file and a version's record; copies take one version whole.
    entry, blob, stat = fs.ns.open_version(path.removeprefix("/"), versions[0])
    assert (entry["type"], stat.version, stat.size) == ("file", versions[0], len(contents[0]))
    assert blob.read(0, 5, stat.version) == contents[0][:5]
    fs.cp_file(f"{path}?version={versions[0]}", f"{root}/copy.txt")
    assert fs.cat_file(f"{root}/copy.txt") == contents[0]
    with pytest.raises(tomus.IsADirectory):
        fs.ns.open_version(root.removeprefix("/"))


def test_overwrites_keep_the_last_three_versions(fs: TomusFileSystem, root: str) -> None:
    """A file keeps its newest 3 versions by default (`tomus fs retention` changes it per
    directory); the older ones go, as after `tomus fs put` over it."""
    path = f"{root}/kept.txt"
    versions = []
    for i in range(5):
        with fs.open(path, "wb") as f:
            f.write(f"content {i}".encode())
        versions.append(fs.info(path)["version"])
    deadline = time.monotonic() + 20
    while fs.versions(path) != versions[2:]:
        assert time.monotonic() < deadline, f"versions kept: {fs.versions(path)}"
        time.sleep(0.1)
    with pytest.raises(FileNotFoundError, match="retention"):
        fs.cat_file(f"{path}?version={versions[0]}")
    assert fs.cat_file(f"{path}?version={versions[2]}") == b"content 2"


def test_locations_name_providers_for_every_byte(fs: TomusFileSystem, root: str) -> None:
    data = random.Random(3).randbytes(4 * CHUNK)
    fs.pipe_file(f"{root}/l.bin", data)
    locs = fs.locations(f"{root}/l.bin")
    assert sum(size for _, size, _ in locs) == len(data)
    assert all(hosts and all(":" in h for h in hosts) for _, _, hosts in locs)


def _append_records(addr: str, path: str, worker: int, count: int) -> None:
    fs = TomusFileSystem(addr=addr, chunk_size=CHUNK)
    for i in range(count):
        with fs.open(path, "ab") as f:
            f.write(f"w{worker}-r{i}\n".encode() * (1 + i % 3))


def test_four_processes_append_to_one_file(
    fs: TomusFileSystem, root: str, cluster: tomus.LocalCluster
) -> None:
    path = f"{root}/log.txt"
    fs.touch(path)
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_append_records, args=(cluster.addr, path, w, 20)) for w in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = fs.cat_file(path).decode().splitlines()
    expected = sorted(f"w{w}-r{i}" for w in range(4) for i in range(20) for _ in range(1 + i % 3))
    assert sorted(lines) == expected
    # Each close landed contiguously: a record's repeats are adjacent.
    runs = [lines[0]]
    for line in lines[1:]:
        if line != runs[-1]:
            runs.append(line)
    assert len(runs) == 80


def test_bad_input_gives_clear_errors(fs: TomusFileSystem, root: str) -> None:
    fs.pipe_file(f"{root}/f", b"x")
    with pytest.raises(NotADirectoryError):
        fs.pipe_file(f"{root}/f/under", b"y")
    with pytest.raises(IsADirectoryError):
        fs.open(root, "rb")
    with pytest.raises(FileExistsError):
        fs.open(f"{root}/f", "xb")
    with pytest.raises(ValueError):
        fs.open(f"{root}/f?version=abc", "rb")
    with pytest.raises(tomus.NotFound):
        fs.open(f"{root}/f", "rb", version=999_999)
    with pytest.raises(ValueError):
        fs.info("a/../b")
    assert fs.cat_file(f"{root}/f") == b"x"


@pytest.mark.parametrize(
    "url", ["s3://b/k.csv", "tomus:/x/y.csv", "file:///tmp/x.csv", "HTTPS://host/x.csv"]
)
def test_urls_of_other_schemes_are_refused(fs: TomusFileSystem, root: str, url: str) -> None:
    """A URL that is not tomus:// names no tomus path: refused, not made into a directory
    named after its scheme (``s3:``)."""
    for use in (
        lambda: fs.pipe_file(url, b"x"),
        lambda: fs.mkdir(url),
        lambda: fs.open(url, "wb"),
        lambda: fs.info(url),
        lambda: fs.mv(f"{root}/f", url),
    ):
        with pytest.raises(tomus.InvalidArgument, match="URL"):
            use()
    assert not [n for n in fs.ls("", detail=False) if n.endswith(":")]
    # tomus:// in any case, and tomus:/// (an empty host), name tomus paths.
    fs.pipe_file(f"TOMUS://{root}/a", b"1")
    fs.pipe_file(f"tomus:///{root}/b", b"2")
    assert fs.cat_file(f"{root}/a") + fs.cat_file(f"{root}/b") == b"12"


def test_a_failed_write_leaves_no_file_behind(fs: TomusFileSystem, root: str) -> None:
    """A new file appears only when its first version is published: an exception inside the
    ``with`` block publishes nothing, and an overwrite that fails keeps the old content."""
    path = f"{root}/new/ghost.csv"
    with pytest.raises(RuntimeError), fs.open(path, "wb") as f:
        f.write(b"partial" * CHUNK)  # several chunks are stored already
        raise RuntimeError("the job failed")
    assert not fs.exists(path)
    assert not fs.exists(f"{root}/new")
    assert fs.ls(root, detail=False) == []
    with fs.open(path, "wb") as f:
        f.discard()
    assert fs.ls(root, detail=False) == []
    with pytest.raises((TypeError, BufferError, ValueError)):
        fs.pipe_file(path, "not bytes")  # type: ignore[arg-type]
    assert fs.ls(root, detail=False) == []
    # The path is free again, even for an exclusive create.
    with fs.open(path, "xb") as f:
        f.write(b"ok")
    assert fs.cat_file(path) == b"ok"

    fs.pipe_file(f"{root}/kept", b"old")
    with pytest.raises(RuntimeError), fs.open(f"{root}/kept", "wb") as f:
        f.write(b"new")
        raise RuntimeError("the job failed")
    assert fs.cat_file(f"{root}/kept") == b"old"
    assert fs.info(f"{root}/kept")["version"] == 1

    # Creating a file with no data still makes it, with an empty first version.
    with fs.open(f"{root}/empty.log", "ab"):
        pass
    fs.touch(f"{root}/touched", truncate=False)
    assert fs.cat_file(f"{root}/empty.log") == fs.cat_file(f"{root}/touched") == b""
    assert sorted(fs.ls(root, detail=False)) == [
        f"{root}/empty.log",
        f"{root}/kept",
        f"{root}/new",
        f"{root}/touched",
    ]


ROUND_ROBIN_WRITER = """
import sys
from tomus.fs import TomusFileSystem
fs = TomusFileSystem(addr=sys.argv[1])
files = [fs.open(f"{sys.argv[2]}/part-{i}", "wb") for i in range(6)]
for round in range(12):
    for i, f in enumerate(files):
        f.write(bytes([i + round]) * (1 << 20))
for f in files:
    f.close()
print("closed", flush=True)
"""


def test_one_thread_filling_many_files_in_turn_never_waits_on_itself(
    cluster: tomus.LocalCluster, fs: TomusFileSystem, root: str
) -> None:
    """Writers of one process share a budget for the batches they are storing. One thread
    writing six 12 MiB files round-robin, with a budget of one batch (8 MiB), must finish:
    the batches it is filling take no share, so it only ever waits for stores under way."""
    env = {**os.environ, "TOMUS_WRITE_BUFFER_MIB": "8"}
    done = subprocess.run(
        [sys.executable, "-c", ROUND_ROBIN_WRITER, cluster.addr, root],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.strip() == b"closed"
    for i in range(6):
        got = fs.cat_file(f"{root}/part-{i}")
        assert got == b"".join(bytes([i + r]) * (1 << 20) for r in range(12)), f"part {i}"


KILLED_WRITER = """
import sys, time
from tomus.fs import TomusFileSystem
fs = TomusFileSystem(addr=sys.argv[1], chunk_size=1 << 20)
with fs.open(sys.argv[2], "wb") as f:
    for _ in range(8):
        f.write(b"x" * (1 << 20))
    print("written", flush=True)
    time.sleep(120)  # killed here, its file still open
"""


def test_a_writer_killed_mid_write_leaves_no_file_behind(
    cluster: tomus.LocalCluster, client: tomus.Client, fs: TomusFileSystem, root: str
) -> None:
    """A process writing through fsspec that is SIGTERMed with its file open (8 MiB of chunks
    stored) leaves nothing visible: no file, no parent directory made for it."""
    path = f"{root}/job/out.parquet"
    blobs_before = len(client.list_blobs())
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, cluster.addr, path], stdout=subprocess.PIPE
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == b"written"
        # The write is under way (its new file's blob exists) yet nothing shows.
        assert len(client.list_blobs()) > blobs_before
        assert fs.ls(root, detail=False) == []
        writer.send_signal(signal.SIGTERM)
        assert writer.wait(30) == -signal.SIGTERM
    finally:
        writer.kill()
        writer.wait()
    assert not fs.exists(path)
    assert not fs.exists(f"{root}/job")
    assert fs.ls(root, detail=False) == []


def test_reserved_names_cannot_be_written(fs: TomusFileSystem) -> None:
    """Top-level names starting with ``.tomus-`` hold the S3 gateway's state."""
    for write in (
        lambda: fs.pipe_file(".tomus-buckets/mine", b"x"),
        lambda: fs.mkdir(".tomus-uploads/x"),
        lambda: fs.open(".tomus-new/f", "wb"),
        lambda: fs.rm(".tomus-uploads", recursive=True),
    ):
        with pytest.raises(tomus.InvalidArgument, match="reserved"):
            write()
    assert not [name for name in fs.ls("", detail=False) if name.startswith(".tomus-")]


def test_huge_ranges_read_what_the_file_has(fs: TomusFileSystem, root: str) -> None:
    """Ends far past the end of a file are clamped to its size (slice semantics) before
    anything is read or allocated."""
    data = os.urandom(100_000)
    fs.pipe_file(f"{root}/f", data)
    tracemalloc.start()
    try:
        assert fs.cat_file(f"{root}/f", 10, 2**40) == data[10:]
        assert fs.cat_ranges([f"{root}/f"] * 2, [0, 2**40], [2**40, 2**41]) == [data, b""]
        with fs.open(f"{root}/f", "rb") as f:
            f.seek(99_990)
            assert f.read(2**40) == data[99_990:]
        assert tracemalloc.get_traced_memory()[1] < 16 << 20
    finally:
        tracemalloc.stop()


def test_fsspec_registry_pandas_pyarrow_and_dask(root: str, env_addr: None) -> None:
    import dask.dataframe as dd
    import pandas as pd
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    fs = fsspec.filesystem("tomus")
    assert isinstance(fs, TomusFileSystem)
    frame = pd.DataFrame({"id": range(1000), "value": [i * 0.5 for i in range(1000)]})
    frame["name"] = [f"n{i % 7}" for i in range(1000)]

    frame.to_csv(f"tomus://{root}/x.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(f"tomus://{root}/x.csv"), frame)

    frame.to_parquet(f"tomus://{root}/p/part-0.parquet")
    frame.iloc[:10].to_parquet(f"tomus://{root}/p/part-1.parquet")
    table = pq.read_table(f"{root}/p/part-0.parquet", filesystem=fs)
    assert table.num_rows == 1000
    dataset = ds.dataset(f"{root}/p", filesystem=fs, format="parquet")
    assert dataset.count_rows() == 1010
    ddf = dd.read_parquet(f"tomus://{root}/p")
    # In this process: the test must not depend on which Dask client other tests left around.
    assert int(ddf["id"].sum().compute(scheduler="sync")) == sum(range(1000)) + sum(range(10))


def test_retention_policies_from_python(fs: TomusFileSystem, root: str) -> None:
    # New files keep the last 3 versions unless a directory above says otherwise.
    default = fs.retention(root)
    assert (default["type"], default["keep_last"], default["from"]) == ("directory", 3, None)
    fs.makedirs(f"{root}/runs")
    set_dir = fs.set_retention(f"{root}/runs", keep_last=5)
    # Paths come back as entry names do: without the leading "/".
    assert (set_dir["keep_last"], set_dir["from"]) == (5, f"{root}/runs".lstrip("/"))
    fs.pipe(f"{root}/runs/out.bin", b"first")
    got = fs.retention(f"{root}/runs/out.bin")
    assert (got["type"], got["keep_last"], got["keep_all"]) == ("file", 5, False)
    got = fs.set_retention(f"{root}/runs/out.bin", keep_all=True)
    assert got["keep_all"] and got["keep_last"] is None
    got = fs.set_retention(f"{root}/runs/out.bin", keep_newer_than=90.5)
    assert got["keep_newer_than"] == 90.5
    assert fs.set_retention(f"{root}/runs", inherit=True)["keep_last"] == 3
    for bad in ({}, {"keep_last": 2, "keep_all": True}, {"keep_last": 0}, {"keep_newer_than": -1}):
        with pytest.raises(ValueError):
            fs.set_retention(f"{root}/runs", **bad)  # type: ignore[arg-type]
    with pytest.raises(tomus.NotFound):
        fs.retention(f"{root}/missing")
