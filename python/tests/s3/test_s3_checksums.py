"""Flexible checksums (x-amz-checksum-*): checked on the way in, kept with the version,
returned on the way out, combined for multipart objects."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code

MiB = 1 << 20


def crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def digest(name: str, data: bytes) -> str:
    return base64.b64encode(hashlib.new(name, data).digest()).decode()


EXPECTED = {
    "CRC32": ("ChecksumCRC32", crc32),
    "SHA1": ("ChecksumSHA1", lambda d: digest("sha1", d)),
    "SHA256": ("ChecksumSHA256", lambda d: digest("sha256", d)),
}


@pytest.mark.parametrize("alg", sorted(EXPECTED))
def test_checksums_are_computed_kept_and_returned(s3, bucket, alg: str) -> None:
    field, compute = EXPECTED[alg]
    body = os.urandom(300_000)
    put = s3.put_object(Bucket=bucket, Key="obj", Body=body, ChecksumAlgorithm=alg)
    assert put[field] == compute(body)
    assert put["ChecksumType"] == "FULL_OBJECT"
    got = s3.get_object(Bucket=bucket, Key="obj", ChecksumMode="ENABLED")
    assert got[field] == compute(body) and got["Body"].read() == body
    head = s3.head_object(Bucket=bucket, Key="obj", ChecksumMode="ENABLED")
    assert head[field] == compute(body)
    # Not asked, or only part of the object read: no checksum.
    assert field not in s3.head_object(Bucket=bucket, Key="obj")
    ranged = s3.get_object(Bucket=bucket, Key="obj", Range="bytes=0-99", ChecksumMode="ENABLED")
    assert field not in ranged
    # A copy has the source's content, and so its checksum.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "obj"})
    head = s3.head_object(Bucket=bucket, Key="copy", ChecksumMode="ENABLED")
    assert head[field] == compute(body)


def test_a_wrong_checksum_is_refused_and_changes_nothing(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="kept", Body=b"original")
    for kwargs in (
        {"ChecksumCRC32": crc32(b"something else")},
        {"ChecksumSHA256": digest("sha256", b"something else")},
    ):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="kept", Body=b"replacement", **kwargs)
        assert error_code(e) == "BadDigest"
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="never", Body=b"new", **kwargs)
        assert error_code(e) == "BadDigest"
    assert s3.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"original"
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert listed == ["kept"]


def upload_parts(s3, bucket: str, key: str, bodies: list[bytes], **create) -> tuple[str, list]:
    uid = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32", **create)[
        "UploadId"
    ]
    parts = []
    for n, body in enumerate(bodies, start=1):
        r = s3.upload_part(
            Bucket=bucket,
            Key=key,
            UploadId=uid,
            PartNumber=n,
            Body=body,
            ChecksumAlgorithm="CRC32",
        )
        assert r["ChecksumCRC32"] == crc32(body)
        parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    return uid, parts


def test_multipart_checksums_composite_and_full_object(s3, bucket) -> None:
    bodies = [os.urandom(5 * MiB), os.urandom(5 * MiB), b"the last part"]
    uid, parts = upload_parts(s3, bucket, "composite", bodies)
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="composite", UploadId=uid, MultipartUpload={"Parts": parts}
    )
    raw = b"".join(base64.b64decode(crc32(b)) for b in bodies)
    composite = f"{crc32(raw)}-3"
    assert (done["ChecksumCRC32"], done["ChecksumType"]) == (composite, "COMPOSITE")
    head = s3.head_object(Bucket=bucket, Key="composite", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC32"], head["ChecksumType"]) == (composite, "COMPOSITE")

    uid, parts = upload_parts(s3, bucket, "full", bodies, ChecksumType="FULL_OBJECT")
    done = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="full",
        UploadId=uid,
        MultipartUpload={"Parts": parts},
        ChecksumType="FULL_OBJECT",
    )
    whole = b"".join(bodies)
    assert (done["ChecksumCRC32"], done["ChecksumType"]) == (crc32(whole), "FULL_OBJECT")
    got = s3.get_object(Bucket=bucket, Key="full", ChecksumMode="ENABLED")
    assert got["ChecksumCRC32"] == crc32(whole) and got["Body"].read() == whole


def test_multipart_checksum_errors(s3, bucket) -> None:
    uid, parts = upload_parts(s3, bucket, "bad", [os.urandom(5 * MiB), b"end"])
    with pytest.raises(ClientError) as e:
        s3.upload_part(
            Bucket=bucket,
            Key="bad",
            UploadId=uid,
            PartNumber=3,
            Body=b"data",
            ChecksumCRC32=crc32(b"other"),
        )
    assert error_code(e) == "BadDigest"
    wrong = [dict(parts[0], ChecksumCRC32=crc32(b"not this part")), parts[1]]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="bad", UploadId=uid, MultipartUpload={"Parts": wrong}
        )
    assert error_code(e) == "InvalidPart"
    s3.complete_multipart_upload(
        Bucket=bucket, Key="bad", UploadId=uid, MultipartUpload={"Parts": parts}
    )
