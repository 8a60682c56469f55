"""ListObjectVersions in pages: MaxKeys bounds versions, delete markers and common prefixes
together, a page may end inside a key's history, and KeyMarker with VersionIdMarker goes on
from there. Every page size walks the same listing as one large page."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from .conftest import error_code, status

Item = tuple[str, str, str, bool]  # (kind, key or prefix, version id, is latest)


def one_page(s3, bucket: str, **kw) -> tuple[list[Item], dict]:
    r = s3.list_object_versions(Bucket=bucket, **kw)
    items: list[Item] = [
        ("v", v["Key"], v["VersionId"], v["IsLatest"]) for v in r.get("Versions", [])
    ]
    items += [("m", m["Key"], m["VersionId"], m["IsLatest"]) for m in r.get("DeleteMarkers", [])]
    items += [("p", p["Prefix"], "", False) for p in r.get("CommonPrefixes", [])]
    # A page's versions and markers interleave by key, then newest first within a key:
    # version ids here are "<blob>.<version>", so newer means a larger version number.
    items.sort(key=lambda i: (i[1], -int(i[2].split(".")[1]) if i[2] not in ("", "null") else 0))
    return items, r


def walk(s3, bucket: str, max_keys: int, **kw) -> list[Item]:
    """Every page of a listing, checking each page's size and markers."""
    out: list[Item] = []
    markers: dict = {}
    for _ in range(1000):
        items, r = one_page(s3, bucket, MaxKeys=max_keys, **markers, **kw)
        assert len(items) <= max_keys
        out += items
        if not r["IsTruncated"]:
            assert "NextKeyMarker" not in r
            return out
        assert items, "a truncated page lists something"
        markers = {"KeyMarker": r["NextKeyMarker"]}
        if r.get("NextVersionIdMarker"):
            markers["VersionIdMarker"] = r["NextVersionIdMarker"]
            assert r["NextVersionIdMarker"] == items[-1][2]
    raise AssertionError("the listing never ended")


def test_pages_of_every_size_walk_the_same_listing(s3, bucket) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for i in range(7):
        s3.put_object(Bucket=bucket, Key="long", Body=b"x" * i)
    s3.put_object(Bucket=bucket, Key="a", Body=b"a")
    s3.delete_object(Bucket=bucket, Key="a")  # a delete marker on top
    s3.put_object(Bucket=bucket, Key="a", Body=b"again")
    for key in ("dir/x", "dir/y", "m"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"1")
        s3.put_object(Bucket=bucket, Key=key, Body=b"2")
    # A deleted version is skipped, wherever the page boundaries fall.
    long_versions = [
        v["VersionId"] for v in s3.list_object_versions(Bucket=bucket, Prefix="long")["Versions"]
    ]
    s3.delete_object(Bucket=bucket, Key="long", VersionId=long_versions[3])

    for kw in ({}, {"Delimiter": "/"}, {"Prefix": "l"}):
        whole, r = one_page(s3, bucket, **kw)
        assert not r["IsTruncated"]
        for max_keys in range(1, len(whole) + 2):
            assert walk(s3, bucket, max_keys, **kw) == whole, (kw, max_keys)

    whole, _ = one_page(s3, bucket)
    long = [i for i in whole if i[1] == "long"]
    assert len(long) == 6 and long_versions[3] not in {i[2] for i in long}
    assert [i[3] for i in long] == [True] + [False] * 5
    a = [(i[0], i[1], i[3]) for i in whole if i[1] == "a"]
    assert a == [("v", "a", True), ("m", "a", False), ("v", "a", False)]
    folded, _ = one_page(s3, bucket, Delimiter="/")
    assert ("p", "dir/", "", False) in folded


def test_a_page_that_ends_inside_a_key_says_where_it_goes_on(s3, bucket) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    ids = [s3.put_object(Bucket=bucket, Key="k", Body=b"%d" % i)["VersionId"] for i in range(5)]
    s3.put_object(Bucket=bucket, Key="later", Body=b"z")
    r = s3.list_object_versions(Bucket=bucket, MaxKeys=2)
    assert [v["VersionId"] for v in r["Versions"]] == [ids[4], ids[3]]
    assert r["IsTruncated"] is True
    assert (r["NextKeyMarker"], r["NextVersionIdMarker"]) == ("k", ids[3])
    r = s3.list_object_versions(Bucket=bucket, KeyMarker="k", VersionIdMarker=ids[3], MaxKeys=3)
    assert [v["VersionId"] for v in r["Versions"]] == ids[2::-1]
    assert all(not v["IsLatest"] for v in r["Versions"])
    # The page is full and "later" follows.
    assert r["IsTruncated"] is True and r["NextKeyMarker"] == "k"
    r = s3.list_object_versions(Bucket=bucket, KeyMarker="k", VersionIdMarker=ids[0])
    assert [v["Key"] for v in r["Versions"]] == ["later"] and r["IsTruncated"] is False
    r = s3.list_object_versions(Bucket=bucket, MaxKeys=0)
    assert (r.get("Versions"), r["IsTruncated"]) == (None, False)
    # A key marker alone starts after the key.
    r = s3.list_object_versions(Bucket=bucket, KeyMarker="k")
    assert [v["Key"] for v in r["Versions"]] == ["later"]


def test_bad_version_id_markers_are_refused(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    with pytest.raises(ClientError) as e:
        s3.list_object_versions(Bucket=bucket, VersionIdMarker="1.1")
    assert (status(e), error_code(e)) == (400, "InvalidArgument")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    with pytest.raises(ClientError) as e:
        s3.list_object_versions(Bucket=bucket, KeyMarker="k", VersionIdMarker="not-an-id")
    assert (status(e), error_code(e)) == (400, "InvalidArgument")


def test_unversioned_buckets_page_by_key_with_null_ids(s3, bucket) -> None:
    for key in ("a", "b", "c"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"1")
        s3.put_object(Bucket=bucket, Key=key, Body=b"2")
    whole, _ = one_page(s3, bucket)
    assert whole == [("v", k, "null", True) for k in ("a", "b", "c")]
    assert walk(s3, bucket, 1) == whole
    r = s3.list_object_versions(Bucket=bucket, MaxKeys=1)
    assert (r["NextKeyMarker"], r["NextVersionIdMarker"]) == ("a", "null")


def test_a_history_longer_than_the_first_look_is_read_on(s3, bucket) -> None:
    """The gateway reads the newest 33 versions of each key at once, then reads on when the
    page has room for more: the versions past the first look come too, deleted ones left out."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    ids = [s3.put_object(Bucket=bucket, Key="log", Body=b"%d" % i)["VersionId"] for i in range(45)]
    s3.put_object(Bucket=bucket, Key="next", Body=b"n")
    # Two deleted: one in the first look, one past it.
    for gone in (ids[40], ids[3]):
        s3.delete_object(Bucket=bucket, Key="log", VersionId=gone)
    kept = [i for i in reversed(ids) if i not in (ids[40], ids[3])]
    r = s3.list_object_versions(Bucket=bucket)
    assert [v["VersionId"] for v in r["Versions"] if v["Key"] == "log"] == kept
    assert [v["Key"] for v in r["Versions"]][-1] == "next"
    # A page that ends past the first look, inside the history.
    r = s3.list_object_versions(Bucket=bucket, MaxKeys=40)
    assert [v["VersionId"] for v in r["Versions"]] == kept[:40]
    assert (r["NextKeyMarker"], r["NextVersionIdMarker"]) == ("log", kept[39])
