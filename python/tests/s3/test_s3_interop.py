"""Interoperability: s3fs (fsspec) and pyarrow's S3FileSystem reading and writing Parquet
through the gateway."""

from __future__ import annotations

import pytest

from .conftest import ACCESS_KEY, SECRET_KEY

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pafs = pytest.importorskip("pyarrow.fs")
ds = pytest.importorskip("pyarrow.dataset")


def table(n: int = 50_000):
    return pa.table(
        {
            "id": pa.array(range(n), type=pa.int64()),
            "group": pa.array([f"g{i % 4}" for i in range(n)]),
            "value": pa.array([i * 0.5 for i in range(n)]),
        }
    )


def test_s3fs_writes_and_reads_parquet(gateway, s3, bucket) -> None:
    s3fs = pytest.importorskip("s3fs")
    fs = s3fs.S3FileSystem(
        key=ACCESS_KEY,
        secret=SECRET_KEY,
        endpoint_url=f"http://{gateway.endpoint}",
        client_kwargs={"region_name": "us-east-1"},
        use_listings_cache=False,
    )
    t = table()
    with fs.open(f"{bucket}/s3fs/data.parquet", "wb") as f:
        pq.write_table(t, f, row_group_size=10_000)
    assert fs.exists(f"{bucket}/s3fs/data.parquet")
    assert fs.isdir(f"{bucket}/s3fs")
    assert fs.ls(f"{bucket}/s3fs", detail=False) == [f"{bucket}/s3fs/data.parquet"]
    with fs.open(f"{bucket}/s3fs/data.parquet", "rb") as f:
        assert pq.read_table(f).equals(t)
    # Ranged reads of a single column.
    with fs.open(f"{bucket}/s3fs/data.parquet", "rb") as f:
        assert pq.read_table(f, columns=["value"]).column("value").equals(t.column("value"))
    # Large writes go through s3fs's multipart upload.
    big = b"x" * (12 << 20)
    fs.pipe(f"{bucket}/s3fs/big.bin", big, block_size=5 << 20)
    assert fs.cat(f"{bucket}/s3fs/big.bin") == big
    fs.rm(f"{bucket}/s3fs", recursive=True)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_pyarrow_s3filesystem_dataset_round_trip(gateway, bucket) -> None:
    fs = pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        endpoint_override=gateway.endpoint,
        scheme="http",
        region="us-east-1",
    )
    t = table()
    pq.write_table(t, f"{bucket}/arrow/single.parquet", filesystem=fs)
    assert pq.read_table(f"{bucket}/arrow/single.parquet", filesystem=fs).equals(t)
    info = fs.get_file_info(f"{bucket}/arrow/single.parquet")
    assert info.type == pafs.FileType.File and info.size > 0
    assert fs.get_file_info(f"{bucket}/arrow").type == pafs.FileType.Directory
    # A partitioned dataset: pyarrow creates the directories and lists them back.
    ds.write_dataset(
        t,
        f"{bucket}/arrow/parts",
        format="parquet",
        filesystem=fs,
        partitioning=["group"],
        partitioning_flavor="hive",
    )
    back = ds.dataset(f"{bucket}/arrow/parts", filesystem=fs, partitioning="hive").to_table()
    assert back.num_rows == t.num_rows
    assert sorted(back.column("id").to_pylist()) == list(range(t.num_rows))
    selector = pafs.FileSelector(f"{bucket}/arrow/parts", recursive=True)
    files = [i.path for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]
    assert len(files) == 4
