"""Many clients on the same few keys at once: PUT (also with If-None-Match), multipart
uploads, DELETE (of the key or of one version), CopyObject and GET from four threads, in a
versioned and in an unversioned bucket. Whatever the interleaving, no request may fail with a
server error, and once they stop each key's listed history must be one a sequence of those
requests could leave: distinct version ids, one latest per key, every version's bytes one
whole payload that was written, the current object (or its absence) the latest listed
version (or delete marker)."""

from __future__ import annotations

import hashlib
import random
import threading

import pytest
from botocore.exceptions import ClientError

KEYS = ["k0", "k1", "d/k2"]
OPERATIONS = 50


def payload(seed: int, i: int, size: int) -> bytes:
    return (f"{seed}.{i}:" * (size // 4 + 1)).encode()[:size]


def run_clients(s3, bucket: str, versioned: bool, base: int) -> tuple[set[bytes], list[str]]:
    """Four threads of random requests (seeds from `base`); the payloads written and the
    server errors seen."""
    written: set[bytes] = set()
    server_errors: list[str] = []
    lock = threading.Lock()

    def client(seed: int) -> None:
        rnd = random.Random(seed)
        for i in range(OPERATIONS):
            key = rnd.choice(KEYS)
            op = rnd.randrange(7)
            try:
                if op <= 1:
                    body = payload(seed, i, rnd.choice([0, 100, 70_000]))
                    with lock:
                        written.add(body)
                    s3.put_object(Bucket=bucket, Key=key, Body=body)
                elif op == 2:
                    s3.delete_object(Bucket=bucket, Key=key)
                elif op == 3 and versioned:
                    listed = s3.list_object_versions(Bucket=bucket, Prefix=key)
                    ids = [
                        v["VersionId"]
                        for v in listed.get("Versions", []) + listed.get("DeleteMarkers", [])
                        if v["Key"] == key
                    ]
                    if ids:
                        s3.delete_object(Bucket=bucket, Key=key, VersionId=rnd.choice(ids))
                elif op == 3:
                    s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                elif op == 4:
                    source = {"Bucket": bucket, "Key": rnd.choice(KEYS)}
                    s3.copy_object(Bucket=bucket, Key=key, CopySource=source)
                elif op == 5:
                    # Parts of 5 MiB are the least S3 allows but the last: two small parts
                    # make one part of the least size plus a tail.
                    body = payload(seed, i, (5 << 20) + 3000)
                    with lock:
                        written.add(body)
                    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
                    parts = []
                    for n, piece in enumerate([body[: 5 << 20], body[5 << 20 :]], 1):
                        etag = s3.upload_part(
                            Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=piece
                        )["ETag"]
                        parts.append({"PartNumber": n, "ETag": etag})
                    s3.complete_multipart_upload(
                        Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts}
                    )
                else:
                    body = payload(seed, i, 300)
                    with lock:
                        written.add(body)
                    s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
            except ClientError as e:
                code = e.response["ResponseMetadata"]["HTTPStatusCode"]
                if code >= 500:
                    with lock:
                        server_errors.append(f"{op} {key}: {e}")

    threads = [threading.Thread(target=client, args=(base + seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return written, server_errors


def check_versioned(s3, bucket: str, written: set[bytes]) -> None:
    listed = s3.list_object_versions(Bucket=bucket)
    versions = listed.get("Versions", [])
    markers = listed.get("DeleteMarkers", [])
    ids = [(v["Key"], v["VersionId"]) for v in versions + markers]
    assert len(ids) == len(set(ids)), f"a version id is listed twice: {ids}"
    current = set()
    for key in KEYS:
        latest = [v for v in versions + markers if v["Key"] == key and v["IsLatest"]]
        mine = [v for v in versions + markers if v["Key"] == key]
        assert len(latest) == (1 if mine else 0), f"{key}: latest {latest} of {mine}"
        for v in versions:
            if v["Key"] != key:
                continue
            got = s3.get_object(Bucket=bucket, Key=key, VersionId=v["VersionId"])
            body = got["Body"].read()
            assert body in written, f"{key} version {v['VersionId']} holds bytes never written"
            assert v["Size"] == len(body)
            etag = v["ETag"].strip('"')
            if "-" not in etag:  # a multipart upload's ETag is not its bytes' MD5
                assert etag == hashlib.md5(body).hexdigest()
        if latest and latest[0] in versions:
            current.add(key)
            got = s3.get_object(Bucket=bucket, Key=key)
            assert got["VersionId"] == latest[0]["VersionId"]
        else:
            with pytest.raises(ClientError) as e:
                s3.get_object(Bucket=bucket, Key=key)
            assert e.value.response["Error"]["Code"] == "NoSuchKey"
    objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert {o["Key"] for o in objects} == current


def check_unversioned(s3, bucket: str, written: set[bytes]) -> None:
    objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    listed = {o["Key"]: o for o in objects}
    for key in KEYS:
        if key in listed:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            assert body in written, f"{key} holds bytes never written"
            assert listed[key]["Size"] == len(body)
        else:
            with pytest.raises(ClientError) as e:
                s3.get_object(Bucket=bucket, Key=key)
            assert e.value.response["Error"]["Code"] == "NoSuchKey"


@pytest.mark.parametrize("versioned", [True, False])
def test_concurrent_clients_leave_a_history_requests_could_leave(
    s3, bucket: str, versioned: bool
) -> None:
    if versioned:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    # Different interleavings every run; the seeds are printed should a run fail.
    base = random.randrange(1 << 30)
    print(f"seeds {base}..{base + 3}")
    written, server_errors = run_clients(s3, bucket, versioned, base)
    assert server_errors == []
    if versioned:
        check_versioned(s3, bucket, written)
    else:
        check_unversioned(s3, bucket, written)
