"""Concurrent large uploads share one budget of write buffers in the gateway: with a budget
smaller than what they would hold together, every upload still completes, byte for byte."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import Gateway, start_gateway

UPLOADS = 8
# Three 8 MiB batches each: eight uploads would hold 8 x 24 MiB at once without the budget.
SIZE = 24 << 20
BUDGET_MIB = 16


@pytest.fixture(scope="module")
def small_budget(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    yield from start_gateway(
        tmp_path_factory.mktemp("s3-write-budget"),
        env_extra={"TOMUS_WRITE_BUFFER_MIB": str(BUDGET_MIB)},
    )


def test_uploads_beyond_the_budget_wait_for_it_and_complete(small_budget: Gateway) -> None:
    s3 = small_budget.client(max_pool_connections=UPLOADS)
    bucket = f"t-{uuid.uuid4().hex[:20]}"
    s3.create_bucket(Bucket=bucket)
    bodies = [os.urandom(SIZE) for _ in range(UPLOADS)]

    def put(i: int) -> str:
        return s3.put_object(Bucket=bucket, Key=f"big/{i}", Body=bodies[i])["ETag"]

    with ThreadPoolExecutor(UPLOADS) as pool:
        etags = list(pool.map(put, range(UPLOADS), timeout=300))
    for i, etag in enumerate(etags):
        assert etag.strip('"') == hashlib.md5(bodies[i]).hexdigest()
        got = s3.get_object(Bucket=bucket, Key=f"big/{i}")["Body"].read()
        assert len(got) == SIZE
        assert got == bodies[i], f"object {i} differs"
