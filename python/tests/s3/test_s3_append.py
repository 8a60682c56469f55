"""Appends: S3 Express One Zone's offset check, and concurrent appends at offsets the store
assigns (``x-tomus-append: true``)."""

from __future__ import annotations

import http.client
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, eventually, signed_headers, status


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


class HeldAppend:
    """An offset append held in flight: it asks ``Expect: 100-continue`` and waits for the
    gateway's go-ahead (given once the gateway reads the body, so after the append has passed
    its checks), sends one byte, then the rest on ``finish``; ``abandon`` closes the connection
    mid-body instead."""

    def __init__(self, gateway, bucket: str, key: str, offset: int, body: bytes) -> None:
        path = f"/{bucket}/{key}"
        headers = {"x-amz-write-offset-bytes": str(offset)}
        host, port = gateway.endpoint.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.conn.putrequest("PUT", path, skip_accept_encoding=True)
        for name, value in signed_headers(gateway, "PUT", path, body, headers).items():
            self.conn.putheader(name, value)
        self.conn.putheader("Content-Length", str(len(body)))
        self.conn.putheader("Expect", "100-continue")
        self.conn.endheaders()
        assert self.conn.sock is not None
        interim = self.conn.sock.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100"), interim
        self.conn.send(body[:1])
        self.rest = body[1:]

    def finish(self) -> int:
        self.conn.send(self.rest)
        r = self.conn.getresponse()
        r.read()
        self.conn.close()
        return r.status

    def abandon(self) -> None:
        self.conn.close()


def test_losing_offset_appends_are_refused_before_their_body(gateway, s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="log", Body=b"0123")
    held = HeldAppend(gateway, bucket, "log", 4, b"4567")
    # Refused while the first one's body is still missing, not once it has come.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="log", Body=b"xxxx", WriteOffsetBytes=4)
    assert error_code(e) == "InvalidWriteOffset"
    assert "in flight" in e.value.response["Error"]["Message"]
    # A stale offset is refused with the object's size in the message.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="log", Body=b"xx", WriteOffsetBytes=2)
    assert "has 4 bytes" in e.value.response["Error"]["Message"]
    assert held.finish() == 200
    assert s3.get_object(Bucket=bucket, Key="log")["Body"].read() == b"01234567"
    # The claim went with the commit: the next offset append goes through.
    s3.put_object(Bucket=bucket, Key="log", Body=b"89", WriteOffsetBytes=8)
    # A client that goes away mid-body leaves no claim behind, and no bytes.
    HeldAppend(gateway, bucket, "log", 10, b"lost").abandon()

    def taken() -> bool:
        try:
            s3.put_object(Bucket=bucket, Key="log", Body=b"AB", WriteOffsetBytes=10)
            return True
        except ClientError as e:
            assert error_code(e) == "InvalidWriteOffset"
            return False

    eventually("the abandoned append's claim is released", taken, timeout=10.0)
    assert s3.get_object(Bucket=bucket, Key="log")["Body"].read() == b"0123456789AB"
