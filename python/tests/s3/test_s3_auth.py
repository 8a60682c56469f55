"""Authentication: SigV4 headers and presigned URLs, several users, errors with request ids."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request

import pytest
from botocore import UNSIGNED
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from .conftest import ACCESS_KEY, OTHER_KEY, SECRET_KEY, error_code, signed_headers, status


def test_wrong_secret_is_signature_does_not_match(gateway) -> None:
    bad = gateway.client(ACCESS_KEY, "not-the-secret")
    with pytest.raises(ClientError) as e:
        bad.list_buckets()
    assert error_code(e) == "SignatureDoesNotMatch"
    assert status(e) == 403
    meta = e.value.response["ResponseMetadata"]
    assert meta["RequestId"] and meta["HTTPHeaders"]["x-amz-request-id"] == meta["RequestId"]


def test_unknown_access_key_is_refused(gateway) -> None:
    with pytest.raises(ClientError) as e:
        gateway.client("nobody", "whatever").list_buckets()
    assert error_code(e) == "InvalidAccessKeyId"
    assert status(e) == 403


def test_unsigned_requests_are_denied(gateway) -> None:
    anon = gateway.client(signature_version=UNSIGNED)
    with pytest.raises(ClientError) as e:
        anon.list_buckets()
    assert error_code(e) == "AccessDenied"


def test_keys_file_users_can_sign(gateway, s3, bucket) -> None:
    other = gateway.client(*OTHER_KEY)
    other.put_object(Bucket=bucket, Key="from-other", Body=b"hi")
    assert s3.get_object(Bucket=bucket, Key="from-other")["Body"].read() == b"hi"


def test_presigned_get_and_its_expiry(gateway, s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="shared.txt", Body=b"presigned body")
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "shared.txt"}, ExpiresIn=300
    )
    with urllib.request.urlopen(url) as r:
        assert r.read() == b"presigned body"
    tampered = url.replace("shared.txt", "other.txt")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(tampered)
    assert e.value.code == 403
    assert b"<RequestId>" in e.value.read()


def signed_request(gateway, method: str, path: str, body: bytes) -> tuple[int, bytes, dict]:
    """Sends a raw request signed with SigV4 (so it passes authentication)."""
    host, port = gateway.endpoint.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(method, path, body=body, headers=signed_headers(gateway, method, path, body))
    r = conn.getresponse()
    out = (r.status, r.read(), dict(r.getheaders()))
    conn.close()
    return out


def test_malformed_requests_get_4xx_not_a_dropped_connection(gateway, s3, bucket) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    for method, path, body in [
        ("PUT", f"/{bucket}?versioning", b"<not xml"),
        ("POST", f"/{bucket}/k?uploadId={upload}", b"<CompleteMultipartUpload><Part>"),
        ("POST", f"/{bucket}/k?uploadId={upload}", b""),
        ("GET", f"/{bucket}?list-type=2&max-keys=-5", b""),
        ("GET", f"/{bucket}?list-type=2&continuation-token=zz", b""),
        ("GET", f"/{bucket}/k?versionId=not-a-number", b""),
        ("PUT", f"/{bucket}/k?partNumber=0&uploadId={upload}", b"x"),
        ("PUT", f"/{bucket}/a//b", b"x"),
        ("PUT", f"/{bucket}/a/../b", b"x"),
    ]:
        code, text, headers = signed_request(gateway, method, path, body)
        assert 400 <= code < 500, (method, path, code, text)
        assert headers.get("x-amz-request-id"), (method, path)
        assert b"<RequestId>" in text, (method, path, text)


def blobs(gateway) -> int:
    """How many blobs the cluster has."""
    return len(json.loads(gateway.tomus("blob", "list", "--json")))


def test_an_interrupted_put_leaves_no_object(gateway, s3, bucket) -> None:
    path = f"/{bucket}/half-written"
    before = blobs(gateway)
    headers = {"x-amz-content-sha256": "UNSIGNED-PAYLOAD", "Content-Length": "100000"}
    req = AWSRequest(method="PUT", url=f"http://{gateway.endpoint}{path}", headers=headers)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    host, port = gateway.endpoint.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.putrequest("PUT", path, skip_accept_encoding=True)
    for k, v in req.headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    conn.send(b"x" * 1000)

    def exists() -> bool:
        try:
            s3.head_object(Bucket=bucket, Key="half-written")
            return True
        except ClientError as e:
            assert status_of(e) == 404
            return False

    # The PUT has started once its (new, invisible) file's blob exists...
    deadline = time.monotonic() + 10
    while blobs(gateway) == before:
        assert time.monotonic() < deadline, "the PUT never started"
        time.sleep(0.05)
    # ... but the object appears only with its first version: not while the body streams,
    assert not exists()
    conn.close()
    # and not after the body breaks off: the new file is given up, with its blob.
    deadline = time.monotonic() + 10
    while blobs(gateway) != before:
        assert time.monotonic() < deadline, "the interrupted PUT's new file was not given up"
        time.sleep(0.05)
    assert not exists()
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def status_of(e: ClientError) -> int:
    return e.response["ResponseMetadata"]["HTTPStatusCode"]
