"""Buckets through the gateway: the top-level directories of the namespace."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

import tomus
from tomus.fs import TomusFileSystem

from .conftest import error_code, status


def test_create_list_head_locate_delete(s3) -> None:
    s3.create_bucket(Bucket="lifecycle-bucket")
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert "lifecycle-bucket" in names
    assert s3.head_bucket(Bucket="lifecycle-bucket")["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.get_bucket_location(Bucket="lifecycle-bucket").get("LocationConstraint") is None
    # Re-creating your own bucket in us-east-1 succeeds and leaves it as it is.
    s3.put_bucket_versioning(
        Bucket="lifecycle-bucket", VersioningConfiguration={"Status": "Enabled"}
    )
    s3.put_object(Bucket="lifecycle-bucket", Key="stays", Body=b"x")
    assert s3.create_bucket(Bucket="lifecycle-bucket")["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.get_bucket_versioning(Bucket="lifecycle-bucket")["Status"] == "Enabled"
    assert s3.get_object(Bucket="lifecycle-bucket", Key="stays")["Body"].read() == b"x"
    s3.delete_object(Bucket="lifecycle-bucket", Key="stays")
    for v in s3.list_object_versions(Bucket="lifecycle-bucket").get("Versions", []):
        s3.delete_object(Bucket="lifecycle-bucket", Key=v["Key"], VersionId=v["VersionId"])
    for m in s3.list_object_versions(Bucket="lifecycle-bucket").get("DeleteMarkers", []):
        s3.delete_object(Bucket="lifecycle-bucket", Key=m["Key"], VersionId=m["VersionId"])
    s3.delete_bucket(Bucket="lifecycle-bucket")
    assert "lifecycle-bucket" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket="lifecycle-bucket")
    assert status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket="lifecycle-bucket")
    assert error_code(e) == "NoSuchBucket"


def test_a_bucket_with_objects_is_not_deleted(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="keep/me", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert error_code(e) == "BucketNotEmpty"
    assert status(e) == 409
    s3.delete_object(Bucket=bucket, Key="keep/me")
    # Deleting the last key also removed its "folder": the bucket is empty again.
    s3.delete_bucket(Bucket=bucket)


@pytest.mark.parametrize(
    "name",
    [
        "ab",
        "UpperCase",
        "under_score",
        "-leading-dash",
        "a" * 64,
        "192.168.1.1",
        "foo-.bar",
        "foo.-bar",
        "foo..bar",
        "xn--punycode",
        "sthree-bucket",
        "name-s3alias",
        "name--ol-s3",
    ],
)
def test_invalid_bucket_names_are_refused(s3, name: str) -> None:
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=name)
    assert error_code(e) == "InvalidBucketName"
    assert status(e) == 400


def test_operations_on_a_missing_bucket(s3) -> None:
    for call in (
        lambda: s3.put_object(Bucket="no-such-bucket-here", Key="k", Body=b"x"),
        lambda: s3.get_object(Bucket="no-such-bucket-here", Key="k"),
        lambda: s3.list_objects_v2(Bucket="no-such-bucket-here"),
        lambda: s3.create_multipart_upload(Bucket="no-such-bucket-here", Key="k"),
    ):
        with pytest.raises(ClientError) as e:
            call()
        assert error_code(e) == "NoSuchBucket"


def test_early_errors_keep_the_connection_in_step(s3) -> None:
    # boto3 sends PUT bodies after "Expect: 100-continue"; an error answered before the body
    # is read must not leave the withheld body to be parsed as the next request.
    for _ in range(150):
        for call in (
            lambda: s3.put_object(Bucket="no-such-bucket-here", Key="k", Body=b"x"),
            lambda: s3.get_object(Bucket="no-such-bucket-here", Key="k"),
        ):
            with pytest.raises(ClientError) as e:
                call()
            assert error_code(e) == "NoSuchBucket"


def test_gateway_state_is_hidden_and_other_directories_say_why(gateway, s3, bucket) -> None:
    """The gateway's own directories are not listed by tomus fs or fsspec and cannot be
    written there; a top-level directory whose name is no bucket name says so."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    uid = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    try:
        assert b".tomus" not in gateway.tomus("fs", "ls", "/")
        assert b".tomus" not in gateway.tomus("fs", "ls", "-r", "/")
        fs = TomusFileSystem(addr=gateway.manager)
        assert not [n for n in fs.find("", withdirs=True) if ".tomus-" in n]
        assert not [n for n in fs.ls("", detail=False) if ".tomus-" in n]
        with pytest.raises(tomus.InvalidArgument, match="reserved"):
            fs.rm(".tomus-uploads", recursive=True)
        # The gateway still reaches its state.
        assert s3.list_multipart_uploads(Bucket=bucket)["Uploads"][0]["UploadId"] == uid
        versioning = s3.get_bucket_versioning(Bucket=bucket)
        assert versioning["Status"] == "Enabled"
    finally:
        s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=uid)

    gateway.tomus("fs", "mkdir", "/py")
    try:
        assert "py" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        with pytest.raises(ClientError) as e:
            s3.list_objects_v2(Bucket="py")
        assert error_code(e) == "InvalidBucketName"
        assert "not a valid S3 bucket name" in e.value.response["Error"]["Message"]
    finally:
        gateway.tomus("fs", "rm", "-r", "/py")
