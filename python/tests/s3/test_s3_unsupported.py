"""Headers the gateway does not honour are refused, never silently ignored (issue 16, item 5):
SSE-C, SSE-KMS, SSE-S3, object lock, tagging, ACL grants, other storage classes."""

from __future__ import annotations

import base64
import hashlib

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, status

KEY = b"k" * 32
SSE_C = {
    "SSECustomerAlgorithm": "AES256",
    "SSECustomerKey": base64.b64encode(KEY).decode(),
    "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(KEY).digest()).decode(),
}

REFUSED_PUTS = [
    SSE_C,
    {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/mine"},
    {"ServerSideEncryption": "AES256"},
    {"ObjectLockMode": "COMPLIANCE", "ObjectLockRetainUntilDate": "2030-01-01T00:00:00Z"},
    {"ObjectLockLegalHoldStatus": "ON"},
    {"Tagging": "a=b"},
    {"ACL": "public-read"},
    {"GrantRead": 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'},
    {"StorageClass": "GLACIER"},
    {"WebsiteRedirectLocation": "/elsewhere"},
]


@pytest.mark.parametrize("extra", REFUSED_PUTS, ids=lambda x: next(iter(x)))
def test_unhonoured_put_headers_are_refused_and_store_nothing(s3, bucket, extra) -> None:
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="secret", Body=b"plaintext", **extra)
    assert error_code(e) == "NotImplemented" and status(e) == 501
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket=bucket, Key="secret", **extra)
    assert error_code(e) == "NotImplemented"
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_harmless_values_are_accepted(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="a", Body=b"x", ACL="private", StorageClass="STANDARD")
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"x"


def test_sse_c_reads_and_copies_are_refused(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="plain", **SSE_C)
        assert status(e) == 501
    with pytest.raises(ClientError) as e:
        s3.copy_object(
            Bucket=bucket,
            Key="copy",
            CopySource={"Bucket": bucket, "Key": "plain"},
            ServerSideEncryption="aws:kms",
        )
    assert error_code(e) == "NotImplemented"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["plain"]
