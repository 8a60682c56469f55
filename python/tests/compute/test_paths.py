"""Inputs as files of the tomus namespace, MapReduce output files, and the CLI
(``python -m tomus.compute``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from computetext import make_text, put_text

import tomus
from tomus.compute import plan_splits
from tomus.compute.apps.text import (
    grep,
    most_frequent_words,
    reference_grep,
    reference_top_words,
    reference_word_count,
    word_count,
)
from tomus.compute.mapreduce import default_partition

CHUNK = 4096


def _put_file(tc: tomus.Client, path: str, data: bytes) -> None:
    _, blob = tc.namespace().create(path, CHUNK, 1, False)
    blob.replace(data)


@pytest.fixture(scope="module")
def tree(tc: tomus.Client) -> dict[str, bytes]:
    """A directory ``paths/in`` with files at two levels (and an empty one)."""
    tc.namespace().mkdir("paths/in/sub", True)
    files = {
        "paths/in/a.txt": make_text(10, 400),
        "paths/in/sub/b.txt": make_text(11, 300),
        "paths/in/sub/c.txt": make_text(12, 500),
        "paths/in/sub/empty.txt": b"",
    }
    for path, data in files.items():
        _put_file(tc, path, data)
    return files


def _parse_part(data: bytes) -> list[tuple[str, int]]:
    out = []
    for line in data.decode().splitlines():
        key, value = line.split("\t")
        out.append((key, int(value)))
    return out


def test_splits_of_paths_are_chunk_aligned(tc: tomus.Client, tree: dict[str, bytes]) -> None:
    ns = tc.namespace()
    splits = plan_splits(tc, ["tomus://paths/in"], 3 * CHUNK - 1)
    blobs = {ns.stat(p)["blob"] for p, d in tree.items() if d}
    assert {s.blob for s in splits} == blobs
    assert all(s.start % CHUNK == 0 and s.length <= 3 * CHUNK for s in splits)
    assert sum(s.length for s in splits) == sum(len(d) for d in tree.values())
    # One file given as a bare path (no list) is one input; a missing path is an error.
    one = plan_splits(tc, "paths/in/a.txt", CHUNK)
    assert {s.blob for s in one} == {ns.stat("paths/in/a.txt")["blob"]}
    with pytest.raises(tomus.NotFound):
        plan_splits(tc, ["paths/nope"])


def test_word_count_over_directory_equals_counter(
    dask: Any, addr: str, tc: tomus.Client, tree: dict[str, bytes]
) -> None:
    text = b"".join(tree.values())
    res = word_count("tomus://paths/in", dask, addr, partitions=3, split_size=CHUNK)
    assert res.value == reference_word_count(text)
    assert sum(1 for t in res.timeline if t.kind == "map") > len(tree)
    # Paths and blob ids mixed in one job.
    extra = make_text(13, 200)
    res = word_count(["paths/in/sub", put_text(tc, extra)], dask, addr, split_size=CHUNK)
    sub = b"".join(d for p, d in tree.items() if p.startswith("paths/in/sub/"))
    assert res.value == reference_word_count(sub + extra)


def test_text_apps_over_paths(dask: Any, addr: str, tree: dict[str, bytes]) -> None:
    text = b"".join(tree.values())
    top = most_frequent_words(["paths/in/"], 5, dask, addr, ratio=2, split_size=CHUNK)
    assert top.value == reference_top_words(text, 5)
    n = grep("paths/in", rb"alpha.*beta", dask, addr, split_size=CHUNK)
    assert n.value == reference_grep(text, rb"alpha.*beta")


def test_output_files(dask: Any, addr: str, tc: tomus.Client, tree: dict[str, bytes]) -> None:
    expected = reference_word_count(b"".join(tree.values()))
    res = word_count("paths/in", dask, addr, partitions=3, split_size=CHUNK, output="paths/out")
    assert res.files == [f"paths/out/part-{p:05d}" for p in range(3)]
    ns = tc.namespace()
    got: Counter[str] = Counter()
    for p, path in enumerate(res.files):
        items = _parse_part(ns.open(path)[1].read())
        keys = [k for k, _ in items]
        assert keys == sorted(keys)  # one line per key, in key order
        assert all(default_partition(k.encode()) % 3 == p for k in keys)
        got.update(dict(items))
    assert got == expected == res.value
    # A second run with fewer reducers replaces the parts and removes the stale one.
    res = word_count("paths/in", dask, addr, partitions=2, output="tomus://paths/out/")
    names = sorted(e["name"] for e in ns.list("paths/out"))
    assert names == ["paths/out/part-00000", "paths/out/part-00001"]
    got = Counter()
    for path in names:
        got.update(dict(_parse_part(ns.open(path)[1].read())))
    assert got == expected


def test_cli_wordcount_on_path(
    dask: Any, addr: str, tc: tomus.Client, tree: dict[str, bytes]
) -> None:
    expected = reference_word_count(b"".join(tree.values()))
    base = [sys.executable, "-m", "tomus.compute"]
    common = ["--addr", addr, "--scheduler", dask.scheduler.address]
    out = subprocess.run(
        [*base, "wordcount", "tomus://paths/in", *common, "--json", "--output", "paths/cli"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    doc = json.loads(out.stdout)
    assert Counter(doc["counts"]) == expected
    parts = [e["name"] for e in tc.namespace().list("paths/cli")]
    assert len(parts) == 2
    # Plain output: "word\tcount" lines, most frequent first.
    out = subprocess.run(
        [*base, "wordcount", "paths/in/a.txt", *common, "--limit", "3"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = [ln.split("\t") for ln in out.stdout.splitlines()]
    assert [(w, int(c)) for w, c in lines] == reference_top_words(tree["paths/in/a.txt"], 3)
    # A missing path is reported, not a traceback.
    bad = subprocess.run(
        [*base, "grep", "x", "paths/nope", *common],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1 and "no such file" in bad.stderr


def test_cli_kmeans_and_pca_read_a_dataset(dask: Any, addr: str, tc: tomus.Client) -> None:
    import numpy as np

    from tomus.compute import Dataset
    from tomus.compute.apps.kmeans import initial_centers, reference_kmeans
    from tomus.compute.apps.pca import reference_pca
    from tomus.compute.apps.synth import clustered_points

    pts, _ = clustered_points(2000, 3, 3, seed=5)
    ds = Dataset.write(tc, pts, objects=2, chunk_records=300)
    _put_file(tc, "paths/points.index", tc.open_blob(ds.index).read())  # index as a file
    common = ["--addr", addr, "--scheduler", dask.scheduler.address, "--json"]
    out = subprocess.run(
        [sys.executable, "-m", "tomus.compute", "kmeans", str(ds.index), "-k", "3",
         "--iterations", "4", *common],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout)
    centers, inertia, _ = reference_kmeans(pts, initial_centers(pts[:300], 3, 0), 4)
    np.testing.assert_allclose(got["centers"], centers, rtol=1e-6, atol=1e-6)
    assert got["inertia"] == pytest.approx(inertia, rel=1e-6)
    out = subprocess.run(
        [sys.executable, "-m", "tomus.compute", "pca", "tomus://paths/points.index",
         "--components", "2", *common],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout)
    ref = reference_pca(pts, 2)
    np.testing.assert_allclose(got["explained_variance"], ref.explained_variance, rtol=1e-6)
    np.testing.assert_allclose(np.abs(got["components"]), np.abs(ref.components), atol=1e-6)
