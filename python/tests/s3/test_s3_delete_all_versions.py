"""Deleting every listed version leaves nothing (issue 16, item 4): the standard "empty the
bucket" loop over ListObjectVersions must not leave a restored copy behind."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code


def _history(s3, bucket: str) -> None:
    """Keys with several versions, a delete marker and a restored version."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"one", b"two", b"three"):
        s3.put_object(Bucket=bucket, Key="k", Body=body)
    latest = s3.head_object(Bucket=bucket, Key="k")["VersionId"]
    # Deleting the latest version makes "two" current again (as a copy).
    s3.delete_object(Bucket=bucket, Key="k", VersionId=latest)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"two"
    s3.put_object(Bucket=bucket, Key="m", Body=b"m1")
    s3.delete_object(Bucket=bucket, Key="m")  # a delete marker
    s3.put_object(Bucket=bucket, Key="m", Body=b"m2")


def _listed(s3, bucket: str) -> list[dict]:
    out = s3.list_object_versions(Bucket=bucket)
    return [
        {"Key": v["Key"], "VersionId": v["VersionId"]}
        for v in out.get("Versions", []) + out.get("DeleteMarkers", [])
    ]


def _assert_empty(s3, bucket: str) -> None:
    assert _listed(s3, bucket) == []
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    for key in ("k", "m"):
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=bucket, Key=key)
        assert error_code(e) == "NoSuchKey"
    s3.delete_bucket(Bucket=bucket)


def test_delete_objects_over_every_listed_version_empties_the_bucket(s3, bucket) -> None:
    _history(s3, bucket)
    listed = _listed(s3, bucket)
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": listed})
    assert not out.get("Errors")
    assert len(out["Deleted"]) == len(listed)
    _assert_empty(s3, bucket)


@pytest.mark.parametrize("order", ["oldest-first", "newest-first"])
def test_deleting_each_version_in_any_order_empties_the_bucket(s3, bucket, order) -> None:
    _history(s3, bucket)
    listed = _listed(s3, bucket)
    if order == "oldest-first":
        listed.reverse()
    for v in listed:
        s3.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
    _assert_empty(s3, bucket)
