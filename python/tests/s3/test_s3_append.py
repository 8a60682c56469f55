"""Appends: S3 Express One Zone's offset check, and concurrent appends at offsets the store
assigns (``x-tomus-append: true``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, status


def with_header(s3, name: str, value: str):
    """A client that adds a header to every PutObject (before signing)."""

    def add(request, **_):
        request.headers[name] = value

    s3.meta.events.register("before-sign.s3.PutObject", add)
    return s3


def test_write_offset_must_be_the_current_size(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="log", Body=b"0123", ContentType="text/plain")
    r = s3.put_object(Bucket=bucket, Key="log", Body=b"4567", WriteOffsetBytes=4)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="log", Body=b"xx", WriteOffsetBytes=4)
    assert (error_code(e), status(e)) == ("InvalidWriteOffset", 400)
    got = s3.get_object(Bucket=bucket, Key="log")
    assert got["Body"].read() == b"01234567"
    assert got["ContentType"] == "text/plain"  # kept from the first write
    # Past the end of a missing object: refused, and nothing is created.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="missing", Body=b"xx", WriteOffsetBytes=3)
    assert error_code(e) == "InvalidWriteOffset"
    assert s3.list_objects_v2(Bucket=bucket, Prefix="missing")["KeyCount"] == 0
    # Offset 0 creates a new object.
    s3.put_object(Bucket=bucket, Key="new-log", Body=b"ab", WriteOffsetBytes=0)
    assert s3.get_object(Bucket=bucket, Key="new-log")["Body"].read() == b"ab"


def test_16_concurrent_appenders_never_overlap(gateway, bucket) -> None:
    writers, records = 16, 12

    def run(w: int) -> list[tuple[int, int, bytes]]:
        c = with_header(gateway.client(), "x-tomus-append", "true")
        out = []
        for i in range(records):
            data = f"[w{w:02d} r{i:02d} {'#' * (w + i)}]".encode()
            r = c.put_object(Bucket=bucket, Key="shared.log", Body=data)
            h = r["ResponseMetadata"]["HTTPHeaders"]
            out.append((int(h["x-tomus-offset"]), int(h["x-tomus-version"]), data))
        return out

    with ThreadPoolExecutor(writers) as pool:
        landed = [x for xs in pool.map(run, range(writers)) for x in xs]
    assert len(landed) == writers * records
    assert len({v for _, v, _ in landed}) == len(landed), "versions are distinct"
    landed.sort()
    content = gateway.client().get_object(Bucket=bucket, Key="shared.log")["Body"].read()
    at = 0
    for offset, _, data in landed:
        assert offset == at, "appends overlap or leave gaps"
        assert content[offset : offset + len(data)] == data
        at += len(data)
    assert len(content) == at
