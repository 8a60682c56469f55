"""Objects through the gateway: PUT/GET/HEAD/DELETE, ranges, conditions, metadata, listings,
and the namespace shared with ``tomus fs``."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, status, tomus_command


def test_put_get_head_with_metadata(s3, bucket) -> None:
    body = b"hello tomus" * 100
    put = s3.put_object(
        Bucket=bucket,
        Key="docs/readme.txt",
        Body=body,
        ContentType="text/plain",
        CacheControl="no-cache",
        Metadata={"color": "blue", "Owner": "team-a"},
    )
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="docs/readme.txt")
    assert got["Body"].read() == body
    assert got["ContentType"] == "text/plain"
    assert got["CacheControl"] == "no-cache"
    assert got["Metadata"] == {"color": "blue", "owner": "team-a"}
    assert got["ETag"] == put["ETag"]
    assert got["ContentLength"] == len(body)
    age = datetime.now(timezone.utc) - got["LastModified"]
    assert timedelta(seconds=-5) < age < timedelta(minutes=5)
    head = s3.head_object(Bucket=bucket, Key="docs/readme.txt")
    assert head["ContentLength"] == len(body)
    assert head["ETag"] == put["ETag"]
    assert head["Metadata"]["color"] == "blue"


def test_overwrite_empty_objects_and_default_content_type(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"first version, longer")
    s3.put_object(Bucket=bucket, Key="k", Body=b"")
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == b""
    assert got["ContentType"] == "binary/octet-stream"
    assert got["ETag"] == f'"{hashlib.md5(b"").hexdigest()}"'
    s3.put_object(Bucket=bucket, Key="k", Body=b"again")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"again"


def test_ranges_and_invalid_range(s3, bucket) -> None:
    body = bytes(range(256)) * 16
    s3.put_object(Bucket=bucket, Key="r", Body=body)
    for header, want in [
        ("bytes=0-9", body[:10]),
        ("bytes=100-", body[100:]),
        ("bytes=-7", body[-7:]),
        ("bytes=4000-999999", body[4000:]),
    ]:
        got = s3.get_object(Bucket=bucket, Key="r", Range=header)
        assert got["Body"].read() == want, header
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"].endswith(f"/{len(body)}")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={len(body)}-")
    assert error_code(e) == "InvalidRange"
    assert status(e) == 416
    # Part 1 of an object written in one PUT is all of it.
    assert s3.get_object(Bucket=bucket, Key="r", PartNumber=1)["Body"].read() == body
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", PartNumber=2)
    assert error_code(e) == "InvalidPartNumber"


def test_conditional_requests(s3, bucket) -> None:
    etag = s3.put_object(Bucket=bucket, Key="c", Body=b"cond")["ETag"]
    modified = s3.head_object(Bucket=bucket, Key="c")["LastModified"]
    before, after = modified - timedelta(hours=1), modified + timedelta(hours=1)
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)["Body"].read() == b"cond"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"0000"')
    assert error_code(e) == "PreconditionFailed" and status(e) == 412
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert status(e) == 304
    # A 304 names the representation the client has.
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["etag"] == etag
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=after)
    assert status(e) == 304
    assert s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=before)["Body"].read()
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=before)
    assert status(e) == 412
    assert s3.head_object(Bucket=bucket, Key="c", IfUnmodifiedSince=after)["ETag"] == etag
    # Conditional create: only when the key is new.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="c", Body=b"no", IfNoneMatch="*")
    assert status(e) == 412
    s3.put_object(Bucket=bucket, Key="fresh", Body=b"yes", IfNoneMatch="*")


def test_large_objects_stream_both_ways(s3, bucket) -> None:
    body = os.urandom(40 << 20)  # several read windows
    etag = s3.put_object(Bucket=bucket, Key="big.bin", Body=body)["ETag"]
    assert etag == f'"{hashlib.md5(body).hexdigest()}"'
    assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == body
    part = s3.get_object(Bucket=bucket, Key="big.bin", Range="bytes=17000000-33554439")
    assert part["Body"].read() == body[17000000:33554440]


def test_delete_and_delete_objects(s3, bucket) -> None:
    for k in ["x/1", "x/2", "x/3", "y"]:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    s3.delete_object(Bucket=bucket, Key="y")
    s3.delete_object(Bucket=bucket, Key="never-existed")  # idempotent, as S3
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="y")
    assert error_code(e) == "NoSuchKey"
    r = s3.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": "x/1"}, {"Key": "x/2"}, {"Key": "bad//key"}]},
    )
    assert sorted(d["Key"] for d in r["Deleted"]) == ["x/1", "x/2"]
    assert [(x["Key"], x["Code"]) for x in r["Errors"]] == [("bad//key", "InvalidArgument")]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["x/3"]
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "x/3"}], "Quiet": True})
    assert not r.get("Deleted")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_keys_that_clash_with_directories_get_409(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="a/b", Body=b"1")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="a", Body=b"2")
    assert (error_code(e), status(e)) == ("PathConflict", 409)
    s3.put_object(Bucket=bucket, Key="f", Body=b"3")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="f/g", Body=b"4")
    assert (error_code(e), status(e)) == ("PathConflict", 409)
    # Once "a/b" is gone, "a" is free again.
    s3.delete_object(Bucket=bucket, Key="a/b")
    s3.put_object(Bucket=bucket, Key="a", Body=b"5")
    for bad in ["/lead", "dou//ble", "dot/./x", "up/../x"]:
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key=bad, Body=b"x")
        assert (error_code(e), status(e)) == ("InvalidArgument", 400), bad


def test_key_too_long(s3, bucket) -> None:
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert error_code(e) == "KeyTooLongError"
    # 1024 bytes is fine (in components of at most 255 bytes).
    key = "/".join(["p" * 200] * 5) + "/" + "q" * 19
    assert len(key) == 1024
    s3.put_object(Bucket=bucket, Key=key, Body=b"long")
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"long"


def test_folder_markers_are_directories(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="folder/", Body=b"")
    assert s3.head_object(Bucket=bucket, Key="folder/")["ContentLength"] == 0
    s3.put_object(Bucket=bucket, Key="folder/file", Body=b"in it")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="data/", Body=b"not empty")
    assert status(e) == 400


def test_files_are_objects_and_back(gateway, s3, bucket, tmp_path) -> None:
    local = tmp_path / "from-fs.bin"
    local.write_bytes(b"written by tomus fs")
    gateway.tomus("fs", "put", str(local), f"{bucket}/fs/file.bin")
    got = s3.get_object(Bucket=bucket, Key="fs/file.bin")
    assert got["Body"].read() == b"written by tomus fs"
    assert got["ContentLength"] == len(b"written by tomus fs")
    assert got["ETag"].strip('"')  # a stable tag even without an MD5 recorded
    s3.put_object(Bucket=bucket, Key="s3/obj.txt", Body=b"written by S3")
    assert gateway.tomus("fs", "cat", f"{bucket}/s3/obj.txt") == b"written by S3"
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == ["fs/file.bin", "s3/obj.txt"]


def test_a_registered_file_is_not_an_object_and_refuses_writes_clearly(
    gateway, s3, bucket, tmp_path
) -> None:
    """A workflow output registered in place in a bucket's tree is not served over S3 (its
    checksum covers the whole file, held on its holders' disks): not listed, GET says why,
    a plain PUT over it is a 409 naming it (it was a 412 "If-None-Match" the client never
    sent), and DELETE removes it."""
    local = tmp_path / "registered.bin"
    local.write_bytes(b"r" * 100)
    gateway.tomus("fs", "register", str(local), f"/{bucket}/out/r.bin")
    s3.put_object(Bucket=bucket, Key="plain", Body=b"p")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["plain"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="out/r.bin")
    assert (error_code(e), status(e)) == ("InvalidArgument", 400)
    assert "registered file" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="out/r.bin", Body=b"new")
    assert (error_code(e), status(e)) == ("PathConflict", 409)
    assert "immutable" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="out/r.bin", Body=b"new", IfNoneMatch="*")
    assert (error_code(e), status(e)) == ("PreconditionFailed", 412)
    s3.delete_object(Bucket=bucket, Key="out/r.bin")
    s3.put_object(Bucket=bucket, Key="out/r.bin", Body=b"new")
    assert s3.get_object(Bucket=bucket, Key="out/r.bin")["Body"].read() == b"new"


def test_listing_2500_keys_paginates_exactly(s3, bucket) -> None:
    keys = [f"dir{i % 5}/sub{i % 3}/key-{i:05d}" for i in range(2500)] + ["top-level"]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=k.encode()), keys))
    want = sorted(keys)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    got = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert got == want
    small = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="dir3/", PaginationConfig={"PageSize": 97}
    )
    got = [o["Key"] for p in small for o in p.get("Contents", [])]
    assert got == [k for k in want if k.startswith("dir3/")]
    v1 = s3.get_paginator("list_objects").paginate(
        Bucket=bucket, PaginationConfig={"PageSize": 333}
    )
    assert [o["Key"] for p in v1 for o in p.get("Contents", [])] == want
    # Delimiter: common prefixes, one page at a time.
    folded = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Delimiter="/", PaginationConfig={"PageSize": 2}
    )
    prefixes, top = [], []
    for p in folded:
        prefixes += [c["Prefix"] for c in p.get("CommonPrefixes", [])]
        top += [o["Key"] for o in p.get("Contents", [])]
    assert prefixes == [f"dir{i}/" for i in range(5)]
    assert top == ["top-level"]
    nested = s3.list_objects_v2(Bucket=bucket, Prefix="dir1/", Delimiter="/")
    assert [c["Prefix"] for c in nested["CommonPrefixes"]] == [
        "dir1/sub0/",
        "dir1/sub1/",
        "dir1/sub2/",
    ]
    after = s3.list_objects_v2(Bucket=bucket, StartAfter=want[2400], MaxKeys=1000)
    assert [o["Key"] for o in after["Contents"]] == want[2401:]
    assert not after["IsTruncated"]
    one = s3.list_objects_v2(Bucket=bucket, MaxKeys=1)
    assert one["IsTruncated"] and one["KeyCount"] == 1


def test_content_md5_is_checked(s3, bucket) -> None:
    def md5(data: bytes) -> str:
        return base64.b64encode(hashlib.md5(data).digest()).decode()

    s3.put_object(Bucket=bucket, Key="md5", Body=b"data", ContentMD5=md5(b"data"))
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="md5-bad", Body=b"data", ContentMD5=md5(b"other"))
    assert (error_code(e), status(e)) == ("BadDigest", 400)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="md5-bad")
    assert status(e) == 404
    assert s3.get_object(Bucket=bucket, Key="md5")["Body"].read() == b"data"


def test_puts_in_progress_or_cut_off_leave_no_object(gateway, s3, bucket) -> None:
    """A new object appears only when its first version is published: not while its PUT
    streams, nor after the PUT is cut off, nor after a killed ``tomus fs put``."""
    url = s3.generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": "slow/obj"}, ExpiresIn=300
    )
    u = urllib.parse.urlsplit(url)
    size = 8 << 20
    conn = socket.create_connection((u.hostname, u.port))
    try:
        head = f"PUT {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n"
        conn.sendall(f"{head}Content-Length: {size}\r\n\r\n".encode())
        conn.sendall(b"x" * (size // 2))
        time.sleep(0.5)  # the gateway stores what arrived
        assert not s3.list_objects_v2(Bucket=bucket).get("Contents")
    finally:
        conn.close()  # cut off halfway
    time.sleep(0.5)
    assert not s3.list_objects_v2(Bucket=bucket).get("Contents")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="slow/obj")
    assert status(e) == 404

    cmd = [*tomus_command(), "--addr", gateway.manager, "fs", "put", "-", f"{bucket}/killed.bin"]
    put = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert put.stdin is not None
    put.stdin.write(b"y" * (40 << 20))
    put.stdin.flush()
    time.sleep(0.5)
    put.send_signal(signal.SIGTERM)
    put.wait(30)
    put.stdin.close()
    assert put.returncode != 0
    assert not s3.list_objects_v2(Bucket=bucket).get("Contents")
    assert b"killed" not in gateway.tomus("fs", "ls", "-r", "/")
    # The key is free: the object is written as if nothing happened.
    s3.put_object(Bucket=bucket, Key="slow/obj", Body=b"whole", IfNoneMatch="*")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["slow/obj"]


def test_expires_is_kept(s3, bucket) -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    s3.put_object(Bucket=bucket, Key="exp", Body=b"x", Expires=when)
    assert s3.head_object(Bucket=bucket, Key="exp")["Expires"] == when
    assert s3.get_object(Bucket=bucket, Key="exp")["Expires"] == when


def test_empty_delimiter_and_continuation_token_are_absent_ones(s3, bucket) -> None:
    for key in ("a/1", "a/2", "b"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    listed = s3.list_objects_v2(Bucket=bucket, Delimiter="", ContinuationToken="")
    assert [o["Key"] for o in listed["Contents"]] == ["a/1", "a/2", "b"]
    assert not listed.get("CommonPrefixes")
