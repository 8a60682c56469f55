"""GetObjectAttributes, and user metadata outside US-ASCII (RFC 2047 on the way out, as S3)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import zlib

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, signed_headers, status

MiB = 1 << 20
ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


def test_attributes_of_a_simple_object(s3, bucket) -> None:
    body = os.urandom(100_000)
    s3.put_object(Bucket=bucket, Key="plain", Body=body)
    a = s3.get_object_attributes(Bucket=bucket, Key="plain", ObjectAttributes=ALL)
    assert a["ETag"].strip('"') == hashlib.md5(body).hexdigest()
    assert a["ObjectSize"] == len(body)
    assert a["StorageClass"] == "STANDARD"
    assert "ObjectParts" not in a  # not a multipart object
    # Recent botocore sends a CRC32 with every PUT by default: it is kept and answered.
    crc = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    assert a.get("Checksum", {}).get("ChecksumCRC32", crc) == crc
    assert a["LastModified"] is not None


def test_only_the_named_attributes_are_answered(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"abc")
    a = s3.get_object_attributes(Bucket=bucket, Key="k", ObjectAttributes=["ObjectSize"])
    assert a["ObjectSize"] == 3
    assert "ETag" not in a and "StorageClass" not in a


def test_checksum_and_parts_of_a_multipart_object(s3, bucket) -> None:
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1000)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32")
    done = []
    for n, body in enumerate(parts, 1):
        r = s3.upload_part(
            Bucket=bucket,
            Key="mp",
            UploadId=up["UploadId"],
            PartNumber=n,
            Body=body,
            ChecksumAlgorithm="CRC32",
        )
        done.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    complete = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=up["UploadId"], MultipartUpload={"Parts": done}
    )
    a = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=ALL)
    assert a["ObjectSize"] == sum(map(len, parts))
    assert a["ObjectParts"]["TotalPartsCount"] == 3
    assert a["Checksum"]["ChecksumCRC32"] == complete["ChecksumCRC32"]
    assert a["Checksum"]["ChecksumType"] == "COMPOSITE"
    assert a["ETag"].strip('"') == complete["ETag"].strip('"')


def test_a_full_object_checksum_is_answered(s3, bucket) -> None:
    body = os.urandom(300_000)
    s3.put_object(Bucket=bucket, Key="c", Body=body, ChecksumAlgorithm="CRC32")
    a = s3.get_object_attributes(Bucket=bucket, Key="c", ObjectAttributes=["Checksum"])
    want = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    assert a["Checksum"] == {"ChecksumCRC32": want, "ChecksumType": "FULL_OBJECT"}


def test_attributes_of_an_older_version(s3, bucket) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket=bucket, Key="v", Body=b"one")
    second = s3.put_object(Bucket=bucket, Key="v", Body=b"three")
    old = s3.get_object_attributes(
        Bucket=bucket, Key="v", VersionId=first["VersionId"], ObjectAttributes=["ObjectSize"]
    )
    assert (old["ObjectSize"], old["VersionId"]) == (3, first["VersionId"])
    new = s3.get_object_attributes(Bucket=bucket, Key="v", ObjectAttributes=["ObjectSize"])
    assert (new["ObjectSize"], new["VersionId"]) == (5, second["VersionId"])


def test_missing_objects_and_unknown_attributes_are_errors(s3, bucket) -> None:
    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="absent", ObjectAttributes=["ETag"])
    assert status(e) == 404
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="k", ObjectAttributes=["Colour"])
    assert error_code(e) == "InvalidArgument"


def _put_with_header(gateway, path: str, name: str, value: bytes) -> int:
    """PUT with a header value sent as raw bytes (boto3 refuses non-ASCII metadata itself)."""
    headers = {name: value.decode(), "x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
    host, port = gateway.endpoint.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.putrequest("PUT", path, skip_accept_encoding=True)
    for k, v in signed_headers(gateway, "PUT", path, b"body", headers).items():
        conn.putheader(k, v.encode())
    conn.putheader("Content-Length", "4")
    conn.endheaders()
    conn.send(b"body")
    code = conn.getresponse().status
    conn.close()
    return code


def _rfc2047(text: str) -> str:
    return "=?UTF-8?B?" + base64.b64encode(text.encode()).decode() + "?="


def test_non_ascii_metadata_round_trips_as_s3_returns_it(gateway, s3, bucket) -> None:
    text = "café ™ 数据"
    # Sent as UTF-8 bytes: stored decoded, returned RFC 2047-encoded (mail-safe), as S3 does.
    assert _put_with_header(gateway, f"/{bucket}/raw", "x-amz-meta-note", text.encode()) == 200
    head = s3.head_object(Bucket=bucket, Key="raw")
    assert head["Metadata"]["note"] == _rfc2047(text)
    # Sent RFC 2047-encoded (what a careful client does): the same stored value.
    s3.put_object(Bucket=bucket, Key="encoded", Body=b"x", Metadata={"note": _rfc2047(text)})
    got = s3.get_object(Bucket=bucket, Key="encoded")
    assert got["Metadata"]["note"] == _rfc2047(text)
    # ASCII values come back as they were sent.
    s3.put_object(Bucket=bucket, Key="ascii", Body=b"x", Metadata={"note": "plain text"})
    assert s3.head_object(Bucket=bucket, Key="ascii")["Metadata"]["note"] == "plain text"
    # A copy keeps the decoded value.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "raw"})
    assert s3.head_object(Bucket=bucket, Key="copy")["Metadata"]["note"] == _rfc2047(text)
