"""Prometheus metrics of real servers, read with the Prometheus client's own parser: counters
move by what known operations did, unknown paths are 404, and HTTP follows the RPC port's
secret rules."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import (
    Cluster,
    basic,
    cluster,
    free_port,
    http_get,
    scrape,
    total,
    value,
)

import tomus

MiB = 1 << 20


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("metrics"), providers=3) as c:
        yield c


def wait_for(check, timeout: float = 15.0):  # type: ignore[no-untyped-def]
    """Polls ``check`` until it returns something true; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_writes_move_the_counters_by_what_was_written(
    servers: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reads and writes through the providers' sockets, so their request counters see them (a
    # client on the providers' host otherwise uses their chunk files directly).
    monkeypatch.setenv("TOMUS_LOCAL_READS", "0")
    monkeypatch.setenv("TOMUS_LOCAL_WRITES", "0")
    # All three providers registered and heartbeating.
    assert wait_for(
        lambda: value(scrape(servers.http), "tomus_cluster_providers", state="up") == 3
    ), scrape(servers.http)
    before = [scrape(m) for m in servers.provider_metrics]
    manager_before = scrape(servers.http)

    client = tomus.connect(servers.addr)
    blob = client.create_blob(chunk_size=MiB, replication=2)
    data = os.urandom(10 * MiB)
    blob.append(data)
    assert blob.read() == data

    after = [scrape(m) for m in servers.provider_metrics]
    written = sum(
        value(a, "tomus_provider_written_bytes_total")
        - value(b, "tomus_provider_written_bytes_total")
        for a, b in zip(after, before, strict=True)
    )
    assert written == 10 * MiB * 2
    chunks = sum(
        value(a, "tomus_provider_written_chunks_total")
        - value(b, "tomus_provider_written_chunks_total")
        for a, b in zip(after, before, strict=True)
    )
    assert chunks == 10 * 2
    # The read served every byte once (from one replica each).
    read = sum(
        value(a, "tomus_provider_read_bytes_total") - value(b, "tomus_provider_read_bytes_total")
        for a, b in zip(after, before, strict=True)
    )
    assert read == 10 * MiB
    # Requests by kind and outcome, with their latency histogram.
    puts = sum(
        total(a, "tomus_rpc_requests_total", kind="PutChunk", outcome="ok")
        - total(b, "tomus_rpc_requests_total", kind="PutChunk", outcome="ok")
        for a, b in zip(after, before, strict=True)
    )
    assert puts == 20
    assert (
        sum(total(a, "tomus_rpc_request_duration_seconds_count", kind="PutChunk") for a in after)
        >= 20
    )
    # Request bytes received cover the chunk data and the frame headers around it.
    received = sum(
        total(a, "tomus_rpc_received_bytes_total") - total(b, "tomus_rpc_received_bytes_total")
        for a, b in zip(after, before, strict=True)
    )
    assert 20 * MiB < received < 20 * MiB + 1 * MiB
    for a in after:
        assert value(a, "tomus_provider_capacity_bytes") > 0
        assert (
            0 < value(a, "tomus_provider_free_bytes") <= value(a, "tomus_provider_capacity_bytes")
        )
    assert sum(value(a, "tomus_provider_stored_bytes", tier="disk") for a in after) >= 20 * MiB

    m = scrape(servers.http)
    published = value(m, "tomus_versions_published_total") - value(
        manager_before, "tomus_versions_published_total"
    )
    assigned = value(m, "tomus_versions_assigned_total") - value(
        manager_before, "tomus_versions_assigned_total"
    )
    assert assigned == published >= 1
    assert value(m, "tomus_versions_in_flight") == 0
    assert total(m, "tomus_rpc_requests_total", service="manager", outcome="ok") > 0
    # The cluster totals follow the next heartbeats: the 20 MiB are stored.
    stored_before = value(manager_before, "tomus_cluster_stored_bytes")
    assert wait_for(
        lambda: (
            value(scrape(servers.http), "tomus_cluster_stored_bytes") - stored_before >= 20 * MiB
        )
    )
    assert value(scrape(servers.http), "tomus_cluster_chunks") >= 20


def test_failed_requests_count_by_error_kind(servers: Cluster) -> None:
    client = tomus.connect(servers.addr)
    before = scrape(servers.http)
    with pytest.raises(tomus.NotFound):
        client.open_blob(987654321).read()
    after = scrape(servers.http)
    failed = total(after, "tomus_rpc_requests_total", outcome="NotFound") - total(
        before, "tomus_rpc_requests_total", outcome="NotFound"
    )
    assert failed >= 1


def test_unknown_paths_are_404_and_only_get_is_served(servers: Cluster) -> None:
    for server in [servers.http, servers.provider_metrics[0]]:
        status, body, _ = http_get(f"http://{server}/no/such/page")
        assert status == 404, body
        status, _, _ = http_get(f"http://{server}/metricsX")
        assert status == 404
    import urllib.request

    req = urllib.request.Request(f"http://{servers.http}/metrics", data=b"x", method="POST")
    try:
        urllib.request.urlopen(req, timeout=10)
        raise AssertionError("POST was answered")
    except urllib.error.HTTPError as e:  # type: ignore[attr-defined]
        assert e.code == 405


def test_non_loopback_http_without_a_secret_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TOMUS_CLUSTER_SECRET"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tomus",
            "--addr",
            "127.0.0.1:0",
            "manager",
            "--data",
            str(tmp_path / "m"),
            "--http-addr",
            f"0.0.0.0:{free_port()}",
        ],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert r.returncode != 0
    assert b"without a cluster secret" in r.stdout + r.stderr


def test_with_a_secret_every_http_request_must_carry_it(tmp_path: Path) -> None:
    secret = "metrics-test-secret-0123456789"
    with cluster(tmp_path, providers=1, env={"TOMUS_CLUSTER_SECRET": secret}) as c:
        status, body, headers = http_get(f"http://{c.http}/metrics")
        assert status == 401
        assert b"tomus_" not in body
        assert headers["www-authenticate"].startswith("Basic")
        assert http_get(f"http://{c.http}/metrics", "Bearer wrong-secret-0123456789")[0] == 401
        assert http_get(f"http://{c.http}/metrics", basic("wrong"))[0] == 401
        assert http_get(f"http://{c.http}/", basic("wrong"))[0] == 401
        # A bearer token (Prometheus) or a basic-auth password (a browser).
        samples = scrape(c.http, f"Bearer {secret}")
        assert ("tomus_versions_in_flight", ()) in samples
        assert value(scrape(c.http, basic(secret)), "tomus_versions_in_flight") == 0
        assert http_get(f"http://{c.provider_metrics[0]}/metrics")[0] == 401
        assert scrape(c.provider_metrics[0], f"Bearer {secret}")


# The manager requests a read could make: a file's or a version's record.
RECORD_KINDS = ("FsObject", "FsStat", "GetVersion", "GetBlob", "VersionsAttrs")


def record_requests(http: str) -> float:
    m = scrape(http)
    return sum(total(m, "tomus_rpc_requests_total", kind=k) for k in RECORD_KINDS)


def test_reads_of_a_known_version_leave_the_manager_alone(tmp_path: Path) -> None:
    """Published version records never change, so the client keeps them (issue 20: the
    manager off the read path): the ranges of one ``cat_ranges`` cost one manager request in
    all (the file's record, not one per range), and reads of an open file or of a blob at a
    known version cost none. Counted by the manager's own metrics, with no background client
    (maintenance and backup off) asking it anything."""
    from tomus.fs import TomusFileSystem

    with cluster(tmp_path, providers=2, manager_args=["--no-maintenance"]) as c:
        fs = TomusFileSystem(addr=c.addr, chunk_size=64 << 10)
        data = os.urandom(MiB)
        fs.pipe_file("/pinned/f", data)
        starts = [i * 7 * 4096 for i in range(20)]
        before = record_requests(c.http)
        got = fs.cat_ranges(["/pinned/f"] * 20, starts, [s + 4096 for s in starts])
        assert got == [data[s : s + 4096] for s in starts]
        # The metrics count a request once its answer is written: wait for the first.
        assert wait_for(lambda: record_requests(c.http) > before, timeout=5)
        time.sleep(0.3)
        assert record_requests(c.http) - before == 1

        with fs.open("/pinned/f", "rb") as f:
            opened = record_requests(c.http)
            for s in starts:
                f.seek(s)
                assert f.read(4096) == data[s : s + 4096]
        _, blob, stat = fs.ns.open_version("pinned/f")
        known = record_requests(c.http)
        for s in starts:
            assert blob.read(s, 4096, stat.version) == data[s : s + 4096]
        time.sleep(0.3)
        assert record_requests(c.http) == known
        assert known - opened == 1, "opening a version by name is one request"


def test_a_provider_whose_data_directory_is_removed_shows_failed(tmp_path: Path) -> None:
    """``rm -rf`` of a provider's data directory: its own ``/metrics`` says so (and stops
    measuring the space of a directory that is gone, which logged a warning per scrape), the
    manager counts it failed, and Python names its state."""
    import shutil

    with cluster(tmp_path, providers=2) as c:
        before = scrape(c.provider_metrics[0])
        assert value(before, "tomus_provider_failed") == 0
        assert value(before, "tomus_provider_free_bytes") > 0
        shutil.rmtree(tmp_path / "provider-0")
        assert wait_for(lambda: value(scrape(c.provider_metrics[0]), "tomus_provider_failed") == 1)
        for _ in range(3):
            after = scrape(c.provider_metrics[0])
        assert value(after, "tomus_provider_free_bytes") == 0
        assert value(after, "tomus_provider_capacity_bytes") == 0
        assert value(scrape(c.provider_metrics[1]), "tomus_provider_failed") == 0
        assert wait_for(
            lambda: value(scrape(c.http), "tomus_cluster_providers", state="failed") == 1
        )
        assert value(scrape(c.http), "tomus_cluster_providers", state="up") == 1
        states = sorted(p.state for p in tomus.connect(c.addr).providers())
        assert states == ["failed", "up"]
        log = (tmp_path / "provider-0.log").read_text()
        assert "statvfs" not in log, log
