"""tomus.compute vs plain Dask (dask.bag on local files) vs one Python process, on the same
inputs: WordCount, grep (count of matching lines) and KMeans (10 Lloyd passes). Every answer is
cross-checked against the single-process one. tomus and Dask share one LocalCluster (2 worker
processes, one thread each); load times are reported apart from job times.

    .venv/bin/python bench/compute/peers.py [--size 32MiB] [--points 1000000] [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
from common import engines, machine, timed, write_json
from tomus.compute import Dataset
from tomus.compute.apps.kmeans import assign, initial_centers, kmeans, reference_kmeans
from tomus.compute.apps.synth import clustered_points, pieces, stdlib_text
from tomus.compute.apps.text import (
    grep,
    reference_grep,
    reference_word_count,
    word_count,
    words,
)
from tomus.compute.demo import parse_size

PATTERN = rb"\bimport\b"
ITERATIONS = 10


# --- plain Dask on local files ------------------------------------------------------------------


def _count_partition(lines: list[str]) -> list[Counter[str]]:
    c: Counter[str] = Counter()
    for line in lines:
        c.update(w.decode() for w in words(line.encode()))
    return [c]


def _add_counters(a: Counter[str], b: Counter[str]) -> Counter[str]:
    a.update(b)
    return a


def dask_word_count(paths: list[str], blocksize: int) -> Counter[str]:
    import dask.bag as db

    bag = db.read_text(paths, blocksize=blocksize, linedelimiter="\n")
    return (
        bag.map_partitions(_count_partition)
        .fold(_add_counters, _add_counters)
        .compute()
    )


def _matches(line: str) -> bool:
    return re.search(PATTERN.decode(), line) is not None


def dask_grep(paths: list[str], blocksize: int) -> int:
    import dask.bag as db

    bag = db.read_text(paths, blocksize=blocksize, linedelimiter="\n")
    return int(bag.filter(_matches).count().compute())


def _kmeans_stats(
    path: str, centers: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    x = np.load(path)
    labels, d2 = assign(x, centers)
    k = len(centers)
    sums = np.stack(
        [np.bincount(labels, weights=x[:, j], minlength=k) for j in range(x.shape[1])],
        1,
    )
    return sums, np.bincount(labels, minlength=k), float(d2.sum())


def _add_stats(a: tuple, b: tuple) -> tuple:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def dask_kmeans(paths: list[str], centers: np.ndarray, iterations: int) -> np.ndarray:
    import dask.bag as db

    c = centers
    for _ in range(iterations):
        bag = db.from_sequence(paths, npartitions=len(paths))
        sums, counts, _ = (
            bag.map(_kmeans_stats, c).fold(_add_stats, _add_stats).compute()
        )
        new = c.copy()
        nonempty = counts > 0
        new[nonempty] = sums[nonempty] / counts[nonempty, None]
        c = new
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=parse_size, default=parse_size("32MiB"))
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--split", type=parse_size, default=parse_size("4MiB"))
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "peers.json"
    )
    args = ap.parse_args()
    text = stdlib_text(args.size)
    points, _ = clustered_points(args.points, 8, 8, seed=3, spread=1.5)
    start = initial_centers(points[:20000], 8, seed=1)
    rows: dict[str, dict[str, float]] = {}

    def put(app: str, system: str, seconds: float) -> None:
        rows.setdefault(app, {})[system] = round(seconds, 3)
        print(app, system, round(seconds, 3))

    with tempfile.TemporaryDirectory() as tmp, engines() as s:
        # Inputs: 4 text files / blobs, 8 point files / dataset objects.
        paths, blobs = [], []
        for i, part in enumerate(pieces(text, 4)):
            p = Path(tmp, f"text{i}.txt")
            p.write_bytes(part)
            paths.append(str(p))
            b = s.tomus.create_blob(chunk_size=1 << 20)
            b.write(0, part)
            blobs.append(b.id)
        point_paths = []
        for i, part in enumerate(np.array_split(points, 8)):
            p = Path(tmp, f"points{i}.npy")
            np.save(p, part)
            point_paths.append(str(p))
        ds, t_load = timed(
            lambda: Dataset.write(s.tomus, points, objects=8, chunk_bytes=4 << 20)
        )

        # WordCount
        expected_wc, t = timed(lambda: reference_word_count(text))
        put("wordcount", "single_process", t)
        got, t = timed(
            lambda: word_count(blobs, session=s, split_size=args.split).value
        )
        assert got == expected_wc, "tomus word count differs"
        put("wordcount", "tomus", t)
        got, t = timed(lambda: dask_word_count(paths, args.split))
        assert got == expected_wc, "dask word count differs"
        put("wordcount", "dask_bag", t)

        # grep
        expected_grep, t = timed(lambda: reference_grep(text, PATTERN))
        put("grep", "single_process", t)
        got, t = timed(
            lambda: grep(blobs, PATTERN, session=s, split_size=args.split).value
        )
        assert got == expected_grep, "tomus grep differs"
        put("grep", "tomus", t)
        got, t = timed(lambda: dask_grep(paths, args.split))
        assert got == expected_grep, "dask grep differs"
        put("grep", "dask_bag", t)

        # KMeans, 10 passes from the same start
        (ref_c, _, _), t = timed(
            lambda: reference_kmeans(points, start, ITERATIONS, tol=-1.0)
        )
        put("kmeans", "single_process", t)
        res, t = timed(
            lambda: kmeans(ds, 8, ITERATIONS, centers=start, tol=-1.0, session=s)
        )
        assert res.iterations == ITERATIONS
        np.testing.assert_allclose(res.centers, ref_c, rtol=1e-6, atol=1e-6)
        put("kmeans", "tomus", t)
        got, t = timed(lambda: dask_kmeans(point_paths, start, ITERATIONS))
        np.testing.assert_allclose(got, ref_c, rtol=1e-6, atol=1e-6)
        put("kmeans", "dask_bag", t)

    ratios = {
        app: {
            "tomus_vs_single": round(r["tomus"] / r["single_process"], 3),
            "tomus_vs_dask": round(r["tomus"] / r["dask_bag"], 3),
        }
        for app, r in rows.items()
    }
    write_json(args.out, {
        "benchmark": "peers", "machine": machine(), "text_bytes": len(text),
        "points": args.points, "kmeans_iterations": ITERATIONS, "dataset_load_seconds":
        round(t_load, 3), "seconds": rows, "ratios": ratios,
    })  # fmt: skip


if __name__ == "__main__":
    main()
