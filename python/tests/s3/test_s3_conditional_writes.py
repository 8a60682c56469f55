"""Conditional writes and deletes (issue 16, item 2): If-Match on PUT, CompleteMultipartUpload
and DELETE; a mismatch is 412 and changes nothing, a missing key is 404."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, status


def test_put_if_match(s3, bucket) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"first")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"clobber", IfMatch='"0123456789abcdef"')
    assert error_code(e) == "PreconditionFailed" and status(e) == 412
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"

    new = s3.put_object(Bucket=bucket, Key="k", Body=b"second", IfMatch=etag)["ETag"]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"second"
    # The old ETag no longer matches: a lost update is refused.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"stale", IfMatch=etag)
    assert status(e) == 412
    assert s3.head_object(Bucket=bucket, Key="k")["ETag"] == new
    s3.put_object(Bucket=bucket, Key="k", Body=b"any", IfMatch="*")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"any"

    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="missing", Body=b"x", IfMatch=etag)
    assert error_code(e) == "NoSuchKey" and status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="missing", Body=b"x", IfMatch="*")
    assert status(e) == 404
    assert s3.list_objects_v2(Bucket=bucket, Prefix="missing")["KeyCount"] == 0


def test_complete_multipart_upload_conditions(s3, bucket) -> None:
    def upload(key: str) -> tuple[str, list[dict]]:
        uid = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=1, Body=b"mp")[
            "ETag"
        ]
        return uid, [{"PartNumber": 1, "ETag": etag}]

    etag = s3.put_object(Bucket=bucket, Key="m", Body=b"old")["ETag"]
    uid, parts = upload("m")
    kwargs = {"Bucket": bucket, "Key": "m", "UploadId": uid, "MultipartUpload": {"Parts": parts}}
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(**kwargs, IfMatch='"ffffffffffffffffffffffffffffffff"')
    assert status(e) == 412
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(**kwargs, IfNoneMatch="*")
    assert status(e) == 412
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == b"old"
    s3.complete_multipart_upload(**kwargs, IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == b"mp"

    uid, parts = upload("new")
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="new",
            UploadId=uid,
            MultipartUpload={"Parts": parts},
            IfMatch=etag,
        )
    assert status(e) == 404
    s3.complete_multipart_upload(
        Bucket=bucket, Key="new", UploadId=uid, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
    )
    assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"mp"


def test_conditional_delete(s3, bucket) -> None:
    etag = s3.put_object(Bucket=bucket, Key="d", Body=b"keep")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=bucket, Key="d", IfMatch='"00000000000000000000000000000000"')
    assert status(e) == 412
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=bucket, Key="d", IfMatchSize=5)
    assert status(e) == 412
    assert s3.get_object(Bucket=bucket, Key="d")["Body"].read() == b"keep"
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=bucket, Key="nothing", IfMatch=etag)
    assert status(e) == 404
    s3.delete_object(Bucket=bucket, Key="d", IfMatch=etag, IfMatchSize=4)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0

    etag = s3.put_object(Bucket=bucket, Key="e", Body=b"x")["ETag"]
    out = s3.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": "e", "ETag": '"00000000000000000000000000000000"'}]},
    )
    assert [(x["Key"], x["Code"]) for x in out["Errors"]] == [("e", "PreconditionFailed")]
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "e", "ETag": etag}]})
    assert [d["Key"] for d in out["Deleted"]] == ["e"]
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
