"""Versioning: version ids are blob versions; delete markers; restoring by deleting one."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, status


def test_versioned_overwrite_delete_and_restore(s3, bucket) -> None:
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    v1 = s3.put_object(Bucket=bucket, Key="doc", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="doc", Body=b"two, longer")["VersionId"]
    assert int(v2) > int(v1)
    assert s3.get_object(Bucket=bucket, Key="doc")["VersionId"] == v2
    assert s3.get_object(Bucket=bucket, Key="doc", VersionId=v1)["Body"].read() == b"one"
    assert s3.head_object(Bucket=bucket, Key="doc", VersionId=v1)["ContentLength"] == 3

    d = s3.delete_object(Bucket=bucket, Key="doc")
    assert d["DeleteMarker"] is True
    marker = d["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="doc")
    assert error_code(e) == "NoSuchKey"
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="doc", VersionId=marker)
    assert status(e) == 405
    assert s3.get_object(Bucket=bucket, Key="doc", VersionId=v2)["Body"].read() == b"two, longer"
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0

    listed = s3.list_object_versions(Bucket=bucket)
    assert [(v["VersionId"], v["IsLatest"]) for v in listed["Versions"]] == [
        (v2, False),
        (v1, False),
    ]
    assert [(m["VersionId"], m["IsLatest"]) for m in listed["DeleteMarkers"]] == [(marker, True)]

    # Deleting the delete marker restores the version before it.
    r = s3.delete_object(Bucket=bucket, Key="doc", VersionId=marker)
    assert r["DeleteMarker"] is True
    assert s3.get_object(Bucket=bucket, Key="doc")["Body"].read() == b"two, longer"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["doc"]
    # Versions are immutable: only the latest can be deleted.
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=bucket, Key="doc", VersionId=v1)
    assert (error_code(e), status(e)) == ("NotImplemented", 501)
    # An older version can be copied back over the current one (metadata only).
    s3.copy_object(
        Bucket=bucket, Key="doc", CopySource={"Bucket": bucket, "Key": "doc", "VersionId": v1}
    )
    assert s3.get_object(Bucket=bucket, Key="doc")["Body"].read() == b"one"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="doc", VersionId="999999")
    assert error_code(e) == "NoSuchVersion"

    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    s3.delete_object(Bucket=bucket, Key="doc")
    assert not s3.list_object_versions(Bucket=bucket).get("Versions")


def test_version_listing_pages_by_key(s3, bucket) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for k in ["a", "b", "c"]:
        for i in range(3):
            s3.put_object(Bucket=bucket, Key=k, Body=f"{k}{i}".encode())
    pages = s3.get_paginator("list_object_versions").paginate(
        Bucket=bucket, PaginationConfig={"PageSize": 1}
    )
    seen = [(v["Key"], v["IsLatest"]) for p in pages for v in p.get("Versions", [])]
    assert seen == [(k, latest) for k in "abc" for latest in (True, False, False)]
