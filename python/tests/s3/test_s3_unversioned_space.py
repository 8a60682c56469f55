"""Space in buckets without versioning: an overwritten object's old data is collected after
the GC grace, as S3 keeps only the current object there; buckets that have had versioning
keep every version, including the objects written before versioning was enabled."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from .conftest import Gateway, eventually, start_gateway

BODY = 1 << 20


@pytest.fixture(scope="module")
def fast_gc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway whose manager collects expired versions within seconds."""
    yield from start_gateway(
        tmp_path_factory.mktemp("s3-fast-gc"),
        "--gc-grace-ms",
        "1000",
        "--gc-reuse-grace-ms",
        "1000",
        "--maintenance-interval-ms",
        "300",
    )


def retention(gw: Gateway, bucket: str, key: str) -> str:
    out = gw.tomus("fs", "retention", f"/{bucket}/{key}", "--json")
    return json.loads(out)["retention"]


def body(i: int) -> bytes:
    return bytes([i % 251]) * BODY


def test_overwrites_in_an_unversioned_bucket_give_their_space_back(fast_gc: Gateway) -> None:
    s3 = fast_gc.client()
    s3.create_bucket(Bucket="plain")
    s3.put_object(Bucket="plain", Key="obj", Body=body(0))
    assert retention(fast_gc, "plain", "obj") == "KeepLast(1)"
    eventually("the first object's chunks", lambda: fast_gc.chunk_bytes() >= BODY)
    one_version = fast_gc.chunk_bytes()
    for i in range(1, 6):
        s3.put_object(Bucket="plain", Key="obj", Body=body(i))
    assert s3.get_object(Bucket="plain", Key="obj")["Body"].read() == body(5)
    # Five overwritten versions collected: one version's bytes remain (and a little slack
    # for the version the last overwrite made while its predecessor waited).
    eventually(
        "the overwritten versions collected",
        lambda: fast_gc.chunk_bytes() <= one_version * 1.5,
    )
    assert s3.get_object(Bucket="plain", Key="obj")["Body"].read() == body(5)
    listed = s3.list_object_versions(Bucket="plain", Prefix="obj")["Versions"]
    assert len(listed) == 1 and listed[0]["IsLatest"]


def test_enabling_versioning_keeps_the_history_from_then_on(fast_gc: Gateway) -> None:
    s3 = fast_gc.client()
    s3.create_bucket(Bucket="later")
    s3.put_object(Bucket="later", Key="old", Body=b"written before versioning")
    assert retention(fast_gc, "later", "old") == "KeepLast(1)"
    s3.put_bucket_versioning(Bucket="later", VersioningConfiguration={"Status": "Enabled"})
    # The object written before keeps its history now, as new objects do.
    assert retention(fast_gc, "later", "old") == "KeepAll"
    s3.put_object(Bucket="later", Key="new", Body=b"one")
    assert retention(fast_gc, "later", "new") == "KeepAll"
    first = s3.list_object_versions(Bucket="later", Prefix="old")["Versions"][0]["VersionId"]
    s3.put_object(Bucket="later", Key="old", Body=b"written after")
    v2 = s3.put_object(Bucket="later", Key="new", Body=b"two")["VersionId"]
    # Several maintenance passes later, every version is still there.
    time.sleep(3)
    got = s3.get_object(Bucket="later", Key="old", VersionId=first)["Body"].read()
    assert got == b"written before versioning"
    assert len(s3.list_object_versions(Bucket="later", Prefix="new")["Versions"]) == 2
    assert s3.get_object(Bucket="later", Key="new", VersionId=v2)["Body"].read() == b"two"
    # Suspending versioning does not make the bucket forget: versions stay.
    s3.put_bucket_versioning(Bucket="later", VersioningConfiguration={"Status": "Suspended"})
    s3.put_object(Bucket="later", Key="fresh", Body=b"x")
    assert retention(fast_gc, "later", "fresh") == "KeepAll"
