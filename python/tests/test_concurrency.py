"""Concurrent appends into one blob, from threads and from processes (spawn and fork)."""

from __future__ import annotations

import itertools
import multiprocessing
import random
from concurrent.futures import ThreadPoolExecutor

from blob_support import CHUNK, record

import tomus

Landed = tuple[int, int, int, int, int]  # (version, offset, writer, seq, size)


def append_records(blob: tomus.Blob, writer: int, count: int) -> list[Landed]:
    """Appends `count` records of varied sizes; returns where each landed."""
    rng = random.Random(writer)
    out = []
    for seq in range(count):
        size = rng.choice([1, 100, CHUNK - 1, CHUNK + 1, rng.randrange(1, 3 * CHUNK)])
        version, offset = blob.append(record(writer, seq, size))
        out.append((version, offset, writer, seq, size))
    return out


def check_records(blob: tomus.Blob, landed: list[Landed], expected: int) -> None:
    """Every record is found exactly once, at its offset, and the records tile the blob."""
    assert len(landed) == expected
    versions = [v for v, *_ in landed]
    assert len(set(versions)) == expected, "each append got its own version"
    data = blob.read()
    assert len(data) == sum(size for *_, size in landed) == blob.size()
    at = 0
    for _version, offset, writer, seq, size in sorted(landed, key=lambda r: r[1]):
        assert offset == at, "appends neither overlap nor leave gaps"
        assert data[offset : offset + size] == record(writer, seq, size), (writer, seq)
        at += size
    # A version's size is the end of its own append: appends are ordered by version.
    by_version = sorted(landed)
    for (_, off_a, *_), (_, off_b, *_) in itertools.pairwise(by_version):
        assert off_a < off_b


def test_appends_from_8_threads(client: tomus.Client) -> None:
    blob = client.create_blob(chunk_size=CHUNK)
    with ThreadPoolExecutor(8) as pool:
        results = pool.map(lambda w: append_records(blob, w, 15), range(8))
        landed = [r for rs in results for r in rs]
    check_records(blob, landed, 8 * 15)


def _process_worker(args: tuple[tomus.Blob, int, int]) -> list[Landed]:
    blob, writer, count = args
    return append_records(blob, writer, count)


def test_appends_from_4_spawned_processes(client: tomus.Client) -> None:
    blob = client.create_blob(chunk_size=CHUNK)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:  # the blob is pickled to the workers, which reconnect
        results = pool.map(_process_worker, [(blob, w, 15) for w in range(4)])
    check_records(blob, [r for rs in results for r in rs], 4 * 15)


def test_appends_from_forked_processes_after_use(client: tomus.Client) -> None:
    """Children forked from a process that already used its client (runtime threads, pooled
    connections, random state) write their own data; the parent's client keeps working."""
    ctx = multiprocessing.get_context("fork")
    for used in range(4):  # how much the parent wrote before forking varies its random state
        blob = client.create_blob(chunk_size=CHUNK)
        parent = append_records(blob, 100, used)
        with ctx.Pool(2) as pool:
            results = pool.map(_process_worker, [(blob, w, 5) for w in range(2)])
        parent += append_records(blob, 101, 2)
        check_records(blob, parent + [r for rs in results for r in rs], used + 2 + 2 * 5)
