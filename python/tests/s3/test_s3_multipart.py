"""Multipart uploads and CopyObject: both compose a version from existing chunks."""

from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, status

MiB = 1 << 20


def multipart_etag(parts: list[bytes]) -> str:
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


def test_parts_of_different_sizes_uploaded_out_of_order(gateway, s3, bucket) -> None:
    sizes = [5 * MiB + 17, 7 * MiB, 5 * MiB, 123_457]
    parts = [os.urandom(n) for n in sizes]
    up = s3.create_multipart_upload(
        Bucket=bucket,
        Key="mp/object.bin",
        ContentType="application/x-test",
        Metadata={"origin": "multipart"},
    )
    uid = up["UploadId"]
    listed = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in listed] == [("mp/object.bin", uid)]

    def upload(n: int) -> tuple[int, str]:
        r = s3.upload_part(
            Bucket=bucket, Key="mp/object.bin", UploadId=uid, PartNumber=n + 1, Body=parts[n]
        )
        return n + 1, r["ETag"]

    # Concurrently, and the last parts first.
    with ThreadPoolExecutor(4) as pool:
        etags = dict(pool.map(upload, [3, 1, 2, 0]))
    assert etags[2] == f'"{hashlib.md5(parts[1]).hexdigest()}"'
    got = s3.list_parts(Bucket=bucket, Key="mp/object.bin", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in got] == [
        (n, sizes[n - 1], etags[n]) for n in (1, 2, 3, 4)
    ]
    page = s3.list_parts(Bucket=bucket, Key="mp/object.bin", UploadId=uid, MaxParts=2)
    assert page["IsTruncated"] and page["NextPartNumberMarker"] == 2
    chunks_before = gateway.chunk_files()
    done = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mp/object.bin",
        UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etags[n]} for n in (1, 2, 3, 4)]},
    )
    assert done["ETag"] == multipart_etag(parts)
    assert gateway.chunk_files() == chunks_before, "completing copied data"
    got = s3.get_object(Bucket=bucket, Key="mp/object.bin")
    assert got["Body"].read() == b"".join(parts)
    assert got["ETag"] == done["ETag"]
    assert got["ContentType"] == "application/x-test"
    assert got["Metadata"] == {"origin": "multipart"}
    assert s3.head_object(Bucket=bucket, Key="mp/object.bin")["PartsCount"] == 4
    # Each part reads back by its number, from the object and from a copy of it.
    s3.copy_object(
        Bucket=bucket, Key="mp/copy.bin", CopySource={"Bucket": bucket, "Key": "mp/object.bin"}
    )
    start = 0
    for n, part in enumerate(parts, 1):
        end = start + len(part)
        for key in ("mp/object.bin", "mp/copy.bin"):
            got = s3.get_object(Bucket=bucket, Key=key, PartNumber=n)
            assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
            assert got["Body"].read() == part, (key, n)
            assert got["ContentRange"] == f"bytes {start}-{end - 1}/{sum(sizes)}"
            assert (got["PartsCount"], got["ETag"]) == (4, done["ETag"])
        head = s3.head_object(Bucket=bucket, Key="mp/object.bin", PartNumber=n)
        assert (head["ContentLength"], head["PartsCount"]) == (len(part), 4)
        start = end
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="mp/object.bin", PartNumber=5)
    assert (error_code(e), status(e)) == ("InvalidPartNumber", 416)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="mp/object.bin", PartNumber=1, Range="bytes=0-1")
    assert status(e) == 400
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="mp/object.bin", UploadId=uid)
    assert error_code(e) == "NoSuchUpload"


def test_part_errors(s3, bucket) -> None:
    uid = s3.create_multipart_upload(Bucket=bucket, Key="small")["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key="small", UploadId=uid, PartNumber=1, Body=b"a" * 1000)
    e2 = s3.upload_part(Bucket=bucket, Key="small", UploadId=uid, PartNumber=2, Body=b"b" * 10)

    def complete(parts):
        return s3.complete_multipart_upload(
            Bucket=bucket, Key="small", UploadId=uid, MultipartUpload={"Parts": parts}
        )

    with pytest.raises(ClientError) as e:
        complete([{"PartNumber": 1, "ETag": e1["ETag"]}, {"PartNumber": 2, "ETag": e2["ETag"]}])
    assert error_code(e) == "EntityTooSmall" and status(e) == 400
    with pytest.raises(ClientError) as e:
        complete([{"PartNumber": 1, "ETag": e2["ETag"]}])
    assert error_code(e) == "InvalidPart"
    with pytest.raises(ClientError) as e:
        complete([{"PartNumber": 3, "ETag": e1["ETag"]}])
    assert error_code(e) == "InvalidPart"
    with pytest.raises(ClientError) as e:
        complete([{"PartNumber": 2, "ETag": e2["ETag"]}, {"PartNumber": 1, "ETag": e1["ETag"]}])
    assert error_code(e) == "InvalidPartOrder"
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="small", UploadId=uid, PartNumber=10001, Body=b"x")
    assert status(e) == 400
    # A single small part is fine: the last part has no minimum.
    done = complete([{"PartNumber": 2, "ETag": e2["ETag"]}])
    assert done["ETag"].endswith('-1"')
    assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == b"b" * 10
    assert s3.get_object(Bucket=bucket, Key="small", PartNumber=1)["Body"].read() == b"b" * 10


def test_part_number_of_a_single_put_object(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="one", Body=b"whole")
    assert s3.get_object(Bucket=bucket, Key="one", PartNumber=1)["Body"].read() == b"whole"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="one", PartNumber=2)
    assert (error_code(e), status(e)) == ("InvalidPartNumber", 416)


def test_unknown_upload_ids(s3, bucket) -> None:
    for uid in ["0" * 32, "not-an-id", "../../etc"]:
        with pytest.raises(ClientError) as e:
            s3.upload_part(Bucket=bucket, Key="k", UploadId=uid, PartNumber=1, Body=b"x")
        assert error_code(e) == "NoSuchUpload" and status(e) == 404
        with pytest.raises(ClientError) as e:
            s3.complete_multipart_upload(
                Bucket=bucket,
                Key="k",
                UploadId=uid,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"x"'}]},
            )
        assert error_code(e) == "NoSuchUpload"
        with pytest.raises(ClientError) as e:
            s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=uid)
        assert error_code(e) == "NoSuchUpload"
    # An upload id is tied to its key.
    uid = s3.create_multipart_upload(Bucket=bucket, Key="mine")["UploadId"]
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="other", UploadId=uid, PartNumber=1, Body=b"x")
    assert error_code(e) == "NoSuchUpload"


def test_abort_removes_the_parts(gateway, s3, bucket) -> None:
    uid = s3.create_multipart_upload(Bucket=bucket, Key="gone")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="gone", UploadId=uid, PartNumber=1, Body=b"p" * 100)
    assert f"{bucket}".encode() in gateway.tomus("fs", "ls", ".tomus-uploads")
    s3.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=uid)
    assert b"gone" not in gateway.tomus("fs", "ls", "-r", f".tomus-uploads/{bucket}")
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="gone")
    assert status(e) == 404


def test_parts_racing_the_end_of_their_upload_leave_nothing_behind(gateway, s3, bucket) -> None:
    """Parts still in flight when their upload is aborted (as a transfer manager does after
    a failure) or completed either make it in before the end (and go with the upload) or
    answer NoSuchUpload; none is left holding space where no listing shows it."""
    source = b"s" * 1000
    s3.put_object(Bucket=bucket, Key="source", Body=source)

    def part(key: str, uid: str, n: int) -> str:
        client = gateway.client()
        try:
            if n % 3 == 0:
                client.upload_part_copy(
                    Bucket=bucket,
                    Key=key,
                    UploadId=uid,
                    PartNumber=n,
                    CopySource={"Bucket": bucket, "Key": "source"},
                )
            else:
                client.upload_part(
                    Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=b"x" * 300_000
                )
            return "ok"
        except ClientError as e:
            return str(e.response["Error"]["Code"])

    answers: set[str] = set()
    for round in range(10):
        key = f"raced-{round}"
        uid = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        first = s3.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=1, Body=b"f")

        with ThreadPoolExecutor(6) as pool:
            racing = [pool.submit(part, key, uid, n) for n in range(2, 14)]
            time.sleep(0.01 * round)
            if round % 2:
                s3.complete_multipart_upload(
                    Bucket=bucket,
                    Key=key,
                    UploadId=uid,
                    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": first["ETag"]}]},
                )
            else:
                s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=uid)
            answers.update(f.result() for f in racing)
        if round % 2:
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"f"
    assert answers <= {"ok", "NoSuchUpload"}, answers
    left = gateway.tomus("fs", "ls", "-r", f".tomus-uploads/{bucket}").decode()
    assert left.strip() == "", left
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_copy_of_a_1_gib_object_moves_no_data(gateway, s3, bucket, tmp_path) -> None:
    size = 1 << 30
    # Distinct MiBs (one random MiB, numbered), streamed from a file: neither the test nor
    # boto3 holds the GiB in memory.
    source = tmp_path / "source"
    base = os.urandom(MiB)
    md5 = hashlib.md5()
    with source.open("wb") as f:
        for i in range(size // MiB):
            block = i.to_bytes(8, "little") + base[8:]
            md5.update(block)
            f.write(block)
    t0 = time.monotonic()
    with source.open("rb") as f:
        src = s3.put_object(Bucket=bucket, Key="large/source", Body=f, ContentType="a/b")
    put_seconds = time.monotonic() - t0
    assert src["ETag"] == f'"{md5.hexdigest()}"'
    files_before, bytes_before = gateway.chunk_files(), gateway.chunk_bytes()
    assert bytes_before >= size
    t0 = time.monotonic()
    r = s3.copy_object(
        Bucket=bucket, Key="large/copy", CopySource={"Bucket": bucket, "Key": "large/source"}
    )
    copy_seconds = time.monotonic() - t0
    # Bytes moved: no chunk file and no chunk byte was written by the copy.
    assert gateway.chunk_files() == files_before, "the copy stored chunk data"
    assert gateway.chunk_bytes() == bytes_before, "the copy stored chunk data"
    assert copy_seconds < put_seconds / 20, (copy_seconds, put_seconds)
    assert r["CopyObjectResult"]["ETag"] == src["ETag"]
    head = s3.head_object(Bucket=bucket, Key="large/copy")
    assert (head["ContentLength"], head["ContentType"]) == (size, "a/b")

    def expect(offset: int, n: int) -> bytes:
        with source.open("rb") as f:
            f.seek(offset)
            return f.read(n)

    # Overwriting the source leaves the copy as it was.
    s3.put_object(Bucket=bucket, Key="large/source", Body=b"new")
    for offset in (0, 100_000_000, size - 1000):
        rng = f"bytes={offset}-{offset + 999}"
        got = s3.get_object(Bucket=bucket, Key="large/copy", Range=rng)["Body"].read()
        assert got == expect(offset, 1000), offset


def test_copy_metadata_directives(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"data", Metadata={"a": "1"}, ContentType="x/y")
    s3.copy_object(Bucket=bucket, Key="same-meta", CopySource=f"{bucket}/src")
    assert s3.head_object(Bucket=bucket, Key="same-meta")["Metadata"] == {"a": "1"}
    s3.copy_object(
        Bucket=bucket,
        Key="new-meta",
        CopySource=f"{bucket}/src",
        MetadataDirective="REPLACE",
        Metadata={"b": "2"},
        ContentType="text/plain",
    )
    head = s3.head_object(Bucket=bucket, Key="new-meta")
    assert (head["Metadata"], head["ContentType"]) == ({"b": "2"}, "text/plain")
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="src", CopySource=f"{bucket}/src")
    assert error_code(e) == "InvalidRequest"
    # In place with new metadata is allowed.
    s3.copy_object(
        Bucket=bucket,
        Key="src",
        CopySource=f"{bucket}/src",
        MetadataDirective="REPLACE",
        Metadata={"c": "3"},
    )
    assert s3.get_object(Bucket=bucket, Key="src")["Body"].read() == b"data"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource=f"{bucket}/missing")
    assert error_code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.copy_object(
            Bucket=bucket, Key="x", CopySource=f"{bucket}/src", CopySourceIfMatch='"nope"'
        )
    assert status(e) == 412


def test_upload_part_copy_composes_ranges_of_other_objects(gateway, s3, bucket) -> None:
    source = os.urandom(12 * MiB + 5)
    s3.put_object(Bucket=bucket, Key="src", Body=source)
    uid = s3.create_multipart_upload(Bucket=bucket, Key="assembled")["UploadId"]
    bytes_before = gateway.chunk_bytes()
    cut = 5 * MiB + 3
    copied = []
    for n, rng in ((1, (0, cut - 1)), (2, (cut, len(source) - 1))):
        r = s3.upload_part_copy(
            Bucket=bucket,
            Key="assembled",
            UploadId=uid,
            PartNumber=n,
            CopySource={"Bucket": bucket, "Key": "src"},
            CopySourceRange=f"bytes={rng[0]}-{rng[1]}",
        )
        part = source[rng[0] : rng[1] + 1]
        assert r["CopyPartResult"]["ETag"] == f'"{hashlib.md5(part).hexdigest()}"'
        copied.append((part, r["CopyPartResult"]["ETag"]))
    # The copied parts refer to the source's chunks: no chunk data was stored for them.
    assert gateway.chunk_bytes() == bytes_before
    tail = b"tail written as an ordinary part"
    etag3 = s3.upload_part(Bucket=bucket, Key="assembled", UploadId=uid, PartNumber=3, Body=tail)[
        "ETag"
    ]
    # A whole single-part object copied as a part keeps its ETag.
    whole = s3.upload_part_copy(
        Bucket=bucket,
        Key="assembled",
        UploadId=uid,
        PartNumber=4,
        CopySource={"Bucket": bucket, "Key": "src"},
    )
    assert whole["CopyPartResult"]["ETag"] == f'"{hashlib.md5(source).hexdigest()}"'
    parts = [{"PartNumber": n + 1, "ETag": e} for n, (_, e) in enumerate(copied)]
    parts.append({"PartNumber": 3, "ETag": etag3})
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="assembled", UploadId=uid, MultipartUpload={"Parts": parts}
    )
    expected = copied[0][0] + copied[1][0] + tail
    assert done["ETag"] == multipart_etag([copied[0][0], copied[1][0], tail])
    assert s3.get_object(Bucket=bucket, Key="assembled")["Body"].read() == expected
    # Overwriting the source leaves the assembled object as it was.
    s3.put_object(Bucket=bucket, Key="src", Body=b"gone")
    assert s3.get_object(Bucket=bucket, Key="assembled")["Body"].read() == expected


def test_upload_part_copy_errors(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="small", Body=b"0123456789")
    uid = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]

    def copy(**extra) -> None:
        args = {
            "Bucket": bucket,
            "Key": "dst",
            "UploadId": uid,
            "PartNumber": 1,
            "CopySource": {"Bucket": bucket, "Key": "small"},
            **extra,
        }
        s3.upload_part_copy(**args)

    for rng, code in (
        ("bytes=0-", "InvalidArgument"),
        ("bytes=5-2", "InvalidArgument"),
        ("bytes=5-10", "InvalidRange"),
    ):
        with pytest.raises(ClientError) as e:
            copy(CopySourceRange=rng)
        assert error_code(e) == code, rng
    with pytest.raises(ClientError) as e:
        copy(CopySource={"Bucket": bucket, "Key": "missing"})
    assert error_code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        copy(CopySourceIfMatch='"0000"')
    assert status(e) == 412
    with pytest.raises(ClientError) as e:
        copy(PartNumber=10_001)
    assert error_code(e) == "InvalidArgument"
    copy(CopySourceRange="bytes=2-4")
    parts = s3.list_parts(Bucket=bucket, Key="dst", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in parts] == [(1, 3)]


def test_completing_a_completed_upload_again_answers_as_the_first_time(s3, bucket) -> None:
    uid = s3.create_multipart_upload(Bucket=bucket, Key="twice")["UploadId"]
    bodies = [os.urandom(5 * MiB), b"last part"]
    parts = [
        {
            "PartNumber": n + 1,
            "ETag": s3.upload_part(
                Bucket=bucket, Key="twice", UploadId=uid, PartNumber=n + 1, Body=b
            )["ETag"],
        }
        for n, b in enumerate(bodies)
    ]
    first = s3.complete_multipart_upload(
        Bucket=bucket, Key="twice", UploadId=uid, MultipartUpload={"Parts": parts}
    )
    again = s3.complete_multipart_upload(
        Bucket=bucket, Key="twice", UploadId=uid, MultipartUpload={"Parts": parts}
    )
    assert again["ETag"] == first["ETag"] == multipart_etag(bodies)
    assert s3.get_object(Bucket=bucket, Key="twice")["Body"].read() == b"".join(bodies)
    # Other parts than the completion used: the upload is gone.
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="twice", UploadId=uid, MultipartUpload={"Parts": parts[:1]}
        )
    assert error_code(e) == "NoSuchUpload"


def ending(call) -> str:
    """What one request that ends an upload answered: "ok" or its error code."""
    try:
        call()
        return "ok"
    except ClientError as e:
        return str(e.response["Error"]["Code"])


def test_a_completion_racing_an_abort_ends_the_upload_one_way(gateway, s3, bucket) -> None:
    """CompleteMultipartUpload and AbortMultipartUpload of one upload at once (a transfer
    manager aborting after its completion timed out): one of them ends the upload, and the
    other answers NoSuchUpload. An abort that succeeded leaves no object; a completion that
    succeeded leaves its object."""
    completer, aborter = gateway.client(), gateway.client()
    whole = b"\x01" * (5 * MiB) + b"\x02" * (5 * MiB)
    for round in range(24):
        key = f"race-{round}"
        uid = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        listed = [
            {
                "PartNumber": n,
                "ETag": s3.upload_part(
                    Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=bytes([n]) * (5 * MiB)
                )["ETag"],
            }
            for n in (1, 2)
        ]
        complete = partial(
            completer.complete_multipart_upload,
            Bucket=bucket,
            Key=key,
            UploadId=uid,
            MultipartUpload={"Parts": listed},
        )
        abort = partial(aborter.abort_multipart_upload, Bucket=bucket, Key=key, UploadId=uid)
        with ThreadPoolExecutor(2) as pool:
            # Each goes first in turn.
            order = [complete, abort] if round % 2 else [abort, complete]
            futures = [pool.submit(ending, call) for call in order]
            answers = [f.result() for f in futures]
        completed, aborted = answers if round % 2 else answers[::-1]
        assert (completed, aborted) in {("ok", "NoSuchUpload"), ("NoSuchUpload", "ok")}, (
            round,
            completed,
            aborted,
        )
        try:
            body: bytes | None = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as e:
            assert e.response["Error"]["Code"] == "NoSuchKey"
            body = None
        if completed == "ok":
            assert body == whole, round
        else:
            assert body is None, f"round {round}: aborted, yet the object exists"
    left = gateway.tomus("fs", "ls", "-r", f".tomus-uploads/{bucket}").decode()
    assert left.strip() == "", left
