"""Versioning: version ids (blob and version); delete markers; restoring by deleting one."""

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
    assert v2 != v1
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
    # The deleted marker is gone from the history; the restored content is current under a
    # new version id (S3 would make v2 itself current again).
    listed = s3.list_object_versions(Bucket=bucket)
    assert not listed.get("DeleteMarkers")
    ids = [(v["VersionId"], v["IsLatest"]) for v in listed["Versions"]]
    assert ids[1:] == [(v2, False), (v1, False)] and ids[0][1] is True
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


def test_deleting_an_older_version_hides_it(s3, bucket) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v1, v2, v3 = (
        s3.put_object(Bucket=bucket, Key="k", Body=body)["VersionId"]
        for body in (b"one", b"two", b"three")
    )
    other = s3.put_object(Bucket=bucket, Key="other", Body=b"x")["VersionId"]
    r = s3.delete_object(Bucket=bucket, Key="k", VersionId=v2)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert r["VersionId"] == v2 and "DeleteMarker" not in r
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="k", VersionId=v2)
        assert status(e) == 404
        if call is s3.get_object:
            assert error_code(e) == "NoSuchVersion"
    with pytest.raises(ClientError) as e:
        s3.copy_object(
            Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "k", "VersionId": v2}
        )
    assert error_code(e) == "NoSuchVersion"
    # The others are untouched; the current version is still v3 (nothing was rewritten).
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=v1)["Body"].read() == b"one"
    got = s3.get_object(Bucket=bucket, Key="k")
    assert (got["VersionId"], got["Body"].read()) == (v3, b"three")
    listed = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in listed] == [
        ("k", v3, True),
        ("k", v1, False),
        ("other", other, True),
    ]
    # Deleting it again, or an id the key never had, succeeds and changes nothing.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=v2)
    s3.delete_object(Bucket=bucket, Key="k", VersionId="999999")
    # Batch deletes of versions, a delete marker among them.
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    out = s3.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": "k", "VersionId": v1}, {"Key": "k", "VersionId": v3}]},
    )
    assert not out.get("Errors") and len(out["Deleted"]) == 2
    listed = s3.list_object_versions(Bucket=bucket, Prefix="k")
    assert not listed.get("Versions")
    assert [m["VersionId"] for m in listed["DeleteMarkers"]] == [marker]
    # Deleting the last one (the marker) leaves no key at all.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    listed = s3.list_object_versions(Bucket=bucket, Prefix="k")
    assert not listed.get("Versions") and not listed.get("DeleteMarkers")
    # A new object under the same key starts with a clean history.
    v = s3.put_object(Bucket=bucket, Key="k", Body=b"new")["VersionId"]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=v)["Body"].read() == b"new"
    assert len(s3.list_object_versions(Bucket=bucket, Prefix="k")["Versions"]) == 1


def test_deleting_the_latest_version_hides_it_and_restores_the_previous(s3, bucket) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"one", ContentType="text/a")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"two")["VersionId"]
    s3.delete_object(Bucket=bucket, Key="k", VersionId=v2)
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == b"one" and got["ContentType"] == "text/a"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", VersionId=v2)
    assert error_code(e) == "NoSuchVersion"
    listed = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [v["VersionId"] for v in listed][1:] == [v1]
    assert listed[0]["VersionId"] == got["VersionId"] != v1


def test_deleting_the_latest_version_above_a_delete_marker_leaves_the_key_deleted(
    s3, bucket
) -> None:
    # As in S3: the version below becomes current, and here it is a delete marker.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["VersionId"]
    s3.delete_object(Bucket=bucket, Key="k")
    v3 = s3.put_object(Bucket=bucket, Key="k", Body=b"three")["VersionId"]
    s3.delete_object(Bucket=bucket, Key="k", VersionId=v3)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k")
    assert error_code(e) == "NoSuchKey"
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=v1)["Body"].read() == b"one"
    listed = s3.list_object_versions(Bucket=bucket)
    assert [v["VersionId"] for v in listed["Versions"]] == [v1]
    assert [m["IsLatest"] for m in listed["DeleteMarkers"]] == [True, False]


def test_objects_of_an_unversioned_bucket_have_the_null_version(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"one")
    s3.put_object(Bucket=bucket, Key="k", Body=b"two")
    listed = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in listed] == [("k", "null", True)]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"two"
    assert s3.head_object(Bucket=bucket, Key="k", VersionId="null")["ContentLength"] == 3
    s3.delete_object(Bucket=bucket, Key="k", VersionId="null")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k")
    assert error_code(e) == "NoSuchKey"
    # Once versioning is on, versions have ids of their own and "null" names none.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    vid = s3.put_object(Bucket=bucket, Key="k", Body=b"three")["VersionId"]
    assert vid != "null"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", VersionId="null")
    assert error_code(e) == "NoSuchVersion"
