"""EncodingType=url in listings (issue 16, item 1): boto3 asks for it and decodes, so keys with
`%`, `+`, spaces and non-ASCII must come back exactly and be deletable from the listing."""

from __future__ import annotations

import urllib.parse

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code

KEYS = ["a%20b+c", "dir x/é+ü%2F 1", "plus+only", "tab\tand?amp&=#", "日本/語 ファイル"]


def test_odd_keys_round_trip_through_boto3_listings(s3, bucket) -> None:
    for k in KEYS:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]) == sorted(KEYS)
    assert sorted(o["Key"] for o in s3.list_objects(Bucket=bucket)["Contents"]) == sorted(KEYS)
    listed = s3.list_object_versions(Bucket=bucket)
    assert sorted(v["Key"] for v in listed["Versions"]) == sorted(KEYS)
    for k in KEYS:
        assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == k.encode()

    # Prefixes, delimiters and markers come back as sent.
    page = s3.list_objects_v2(Bucket=bucket, Prefix="dir x/", Delimiter=" ")
    assert page["Prefix"] == "dir x/"
    assert page["Delimiter"] == " "
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["dir x/é+ü%2F "]
    page = s3.list_objects(Bucket=bucket, Delimiter="/", Marker="a%20b+c", MaxKeys=1)
    assert page["Marker"] == "a%20b+c"
    assert page["NextMarker"] == "dir x/"
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["dir x/"]
    page = s3.list_objects_v2(Bucket=bucket, StartAfter="a%20b+c", MaxKeys=1)
    assert page["StartAfter"] == "a%20b+c"
    assert [o["Key"] for o in page["Contents"]] == ["dir x/é+ü%2F 1"]
    versions = s3.list_object_versions(Bucket=bucket, KeyMarker="a%20b+c", MaxKeys=1)
    assert versions["KeyMarker"] == "a%20b+c"
    assert versions["NextKeyMarker"] == "dir x/é+ü%2F 1"

    # Every page of a paginated listing, deleted as listed: the bucket empties.
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, PaginationConfig={"PageSize": 2}
    ):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            out = s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
            assert not out.get("Errors")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    s3.delete_bucket(Bucket=bucket)


def test_raw_listing_is_encoded_only_when_asked(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="a b+c%", Body=b"x")
    raw: dict[str, bytes] = {}

    def keep(http_response, **_kw) -> None:
        raw["body"] = http_response.content

    s3.meta.events.register("after-call.s3.ListObjectsV2", keep)
    try:
        s3.list_objects_v2(Bucket=bucket)
    finally:
        s3.meta.events.unregister("after-call.s3.ListObjectsV2", keep)
    assert b"<Key>a+b%2Bc%25</Key>" in raw["body"]
    assert b"<EncodingType>url</EncodingType>" in raw["body"]
    assert urllib.parse.unquote_plus("a+b%2Bc%25") == "a b+c%"

    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=bucket, EncodingType="base64")
    assert error_code(e) == "InvalidArgument"
