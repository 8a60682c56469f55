"""Version ids are never reused for a key (issue 16, item 3): after a DELETE without
versioning removes a key with its history, the ids of its old versions name nothing."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code


def _versioning(s3, bucket: str, status: str) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})


def test_stale_version_ids_after_a_suspended_delete_are_no_such_version(s3, bucket) -> None:
    _versioning(s3, bucket, "Enabled")
    old = [s3.put_object(Bucket=bucket, Key="k", Body=b)["VersionId"] for b in (b"a", b"b")]
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    _versioning(s3, bucket, "Suspended")
    s3.delete_object(Bucket=bucket, Key="k")  # removes the key and its history
    assert not s3.list_object_versions(Bucket=bucket).get("Versions")
    s3.put_object(Bucket=bucket, Key="k", Body=b"new 1")
    _versioning(s3, bucket, "Enabled")
    new = [s3.put_object(Bucket=bucket, Key="k", Body=b)["VersionId"] for b in (b"n2", b"n3")]
    assert not set(new) & {*old, marker}
    for stale in [*old, marker]:
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=bucket, Key="k", VersionId=stale)
        assert error_code(e) == "NoSuchVersion"
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket=bucket, Key="k", VersionId=stale)
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        with pytest.raises(ClientError) as e:
            s3.copy_object(
                Bucket=bucket,
                Key="copy",
                CopySource={"Bucket": bucket, "Key": "k", "VersionId": stale},
            )
        assert error_code(e) == "NoSuchVersion"
    # Deleting a stale id changes nothing.
    for stale in old:
        s3.delete_object(Bucket=bucket, Key="k", VersionId=stale)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"n3"
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=new[0])["Body"].read() == b"n2"
    listed = [v["VersionId"] for v in s3.list_object_versions(Bucket=bucket)["Versions"]]
    assert listed[:2] == [new[1], new[0]]


def test_malformed_version_ids_are_invalid(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", VersionId="not-an-id")
    assert error_code(e) == "InvalidArgument"
