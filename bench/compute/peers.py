"""tomus.compute vs Spark local vs plain Dask vs one Python process, on the same inputs:
WordCount, MostFrequentWords (top 10), grep (count of matching lines), KMeans (10 Lloyd passes),
PCA (top 4 components) and A-Brain (permutation-corrected SNP x voxel correlations). Every answer
is cross-checked against the single-process one (an assertion stops the run on a mismatch).

tomus and Dask share one LocalCluster (2 worker processes, one thread each); Spark runs as
``local[2]`` (one JVM, 2 task slots, Python workers) on the same data written as local files
(text files; .npy files for points, genotype blocks and imaging). Dask uses ``dask.bag`` for the
text apps and KMeans and ``dask.array`` for PCA and A-Brain. Load and start-up times are reported
apart from job times. If pyspark cannot be imported or started, the Spark peer is skipped and
the reason is written to the JSON (``spark_skipped``).

    python bench/compute/peers.py [--size 32MiB] [--points 1000000] [--no-spark] [--out FILE]
"""

from __future__ import annotations

import argparse
import heapq
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from common import engines, machine, timed, write_json
from tomus.compute import Dataset
from tomus.compute.apps.abrain import (
    Partial,
    _standardize,
    abrain,
    block_stats,
    corrected,
    keep_threshold,
    load,
    permutation,
    reference_abrain,
)
from tomus.compute.apps.kmeans import assign, initial_centers, kmeans, reference_kmeans
from tomus.compute.apps.pca import _combine, _components, pca, reference_pca
from tomus.compute.apps.synth import (
    clustered_points,
    genotypes_imaging,
    pieces,
    stdlib_text,
)
from tomus.compute.apps.text import (
    grep,
    most_frequent_words,
    reference_grep,
    reference_top_words,
    reference_word_count,
    word_count,
    words,
)
from tomus.compute.demo import parse_size

PATTERN = rb"\bimport\b"
ITERATIONS = 10
TOP = 10
PCA_K = 4
ALPHA = 0.05
SEED = 7


# --- shared per-partition functions (Dask and Spark run the same Python code) ------------------


def _count_partition(lines: Any) -> list[Counter[str]]:
    c: Counter[str] = Counter()
    for line in lines:
        c.update(w.decode() for w in words(line.encode()))
    return [c]


def _add_counters(a: Counter[str], b: Counter[str]) -> Counter[str]:
    a.update(b)
    return a


def _matches(line: str) -> bool:
    return re.search(PATTERN.decode(), line) is not None


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


def _new_centers(c: np.ndarray, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    new = c.copy()
    nonempty = counts > 0
    new[nonempty] = sums[nonempty] / counts[nonempty, None]
    return new


def _moments(path: str) -> tuple[int, np.ndarray, np.ndarray]:
    x = np.load(path).astype(np.float64)
    m = x.mean(0)
    c = x - m
    return len(x), m, c.T @ c


# --- plain Dask on local files ------------------------------------------------------------------


def dask_word_count(paths: list[str], blocksize: int) -> Counter[str]:
    import dask.bag as db

    bag = db.read_text(paths, blocksize=blocksize, linedelimiter="\n")
    return (
        bag.map_partitions(_count_partition)
        .fold(_add_counters, _add_counters)
        .compute()
    )


def dask_top_words(paths: list[str], blocksize: int, k: int) -> list[tuple[str, int]]:
    # Words are ASCII, so str order is the bytes order top_k breaks ties with.
    counts = dask_word_count(paths, blocksize)
    return heapq.nsmallest(k, counts.items(), key=lambda wc: (-wc[1], wc[0]))


def dask_grep(paths: list[str], blocksize: int) -> int:
    import dask.bag as db

    bag = db.read_text(paths, blocksize=blocksize, linedelimiter="\n")
    return int(bag.filter(_matches).count().compute())


def dask_kmeans(paths: list[str], centers: np.ndarray, iterations: int) -> np.ndarray:
    import dask.bag as db

    c = centers
    for _ in range(iterations):
        bag = db.from_sequence(paths, npartitions=len(paths))
        sums, counts, _ = (
            bag.map(_kmeans_stats, c).fold(_add_stats, _add_stats).compute()
        )
        c = _new_centers(c, sums, counts)
    return c


def _npy_array(paths: list[str], shapes: list[tuple[int, ...]], dtype: Any) -> Any:
    """One dask.array over .npy files concatenated along axis 0 (one chunk per file)."""
    import dask
    import dask.array as da

    parts = [
        da.from_delayed(dask.delayed(np.load)(p), shape=s, dtype=dtype)
        for p, s in zip(paths, shapes, strict=True)
    ]
    return da.concatenate(parts, axis=0)


def dask_pca(paths: list[str], shapes: list[tuple[int, ...]], k: int) -> Any:
    import dask

    x = _npy_array(paths, shapes, np.float32).astype(np.float64)
    mean = x.mean(0)
    c = x - mean
    m, scatter = dask.compute(mean, c.T @ c)
    return _components((int(x.shape[0]), m, scatter), k)


def dask_abrain(
    block_paths: list[str], block_shapes: list[tuple[int, int]], y_path: str, y_shape: tuple,
    permutations: int,
) -> Any:  # fmt: skip
    import dask
    import dask.array as da

    xs = _npy_array(block_paths, block_shapes, np.int8).astype(
        np.float64
    )  # SNPs x subjects
    n = xs.shape[1]
    xs = xs - xs.mean(1, keepdims=True)
    sd = xs.std(1, keepdims=True)
    xs = xs / da.where(sd == 0, np.inf, sd)
    y = _npy_array([y_path], [y_shape], np.float32).astype(np.float64)
    y = y - y.mean(0)
    yz = y / y.std(0)
    stats = []
    for b in range(permutations + 1):
        perm = permutation(SEED, b, n)
        r = (xs if perm is None else xs[:, perm]) @ yz / n
        stats.append(r if b == 0 else abs(r).max())
    r0, *maxes = dask.compute(*stats)
    keep_r = keep_threshold(n, 1e-3)
    total = Partial({b + 1: float(m) for b, m in enumerate(maxes)})
    total.hits = [
        (int(i), int(v), float(r0[i, v])) for i, v in np.argwhere(np.abs(r0) >= keep_r)
    ]
    return corrected(total, permutations, ALPHA, keep_r)


# --- Spark local[2] on local files --------------------------------------------------------------


def start_spark() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    conf = (
        SparkConf().setMaster("local[2]").setAppName("tomus-peers")
        .set("spark.ui.enabled", "false").set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.memory", "4g")
        .set("spark.python.worker.reuse", "true")
    )  # fmt: skip
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    assert (
        sc.parallelize(range(100), 2).sum() == 4950
    )  # warm up the JVM and Python workers
    return sc


def _text_rdd(sc: Any, paths: list[str], blocksize: int) -> Any:
    total = sum(os.path.getsize(p) for p in paths)
    return sc.textFile(",".join(paths), minPartitions=max(1, -(-total // blocksize)))


def spark_word_count_rdd(sc: Any, paths: list[str], blocksize: int) -> Any:
    # The same per-partition Counter as the Dask version, then a shuffle by word.
    return (
        _text_rdd(sc, paths, blocksize)
        .mapPartitions(lambda it: _count_partition(it)[0].items())
        .reduceByKey(lambda a, b: a + b)
    )


def spark_word_count(sc: Any, paths: list[str], blocksize: int) -> Counter[str]:
    return Counter(spark_word_count_rdd(sc, paths, blocksize).collectAsMap())


def spark_top_words(
    sc: Any, paths: list[str], blocksize: int, k: int
) -> list[tuple[str, int]]:
    rdd = spark_word_count_rdd(sc, paths, blocksize)
    return [(w, c) for w, c in rdd.takeOrdered(k, key=lambda wc: (-wc[1], wc[0]))]


def spark_grep(sc: Any, paths: list[str], blocksize: int) -> int:
    return int(_text_rdd(sc, paths, blocksize).filter(_matches).count())


def spark_kmeans(
    sc: Any, paths: list[str], centers: np.ndarray, iterations: int
) -> np.ndarray:
    c = centers
    rdd = sc.parallelize(paths, len(paths))
    for _ in range(iterations):
        sums, counts, _ = rdd.map(lambda p, c=c: _kmeans_stats(p, c)).reduce(_add_stats)
        c = _new_centers(c, sums, counts)
    return c


def spark_pca(sc: Any, paths: list[str], k: int) -> Any:
    total = sc.parallelize(paths, len(paths)).map(_moments).reduce(_combine)
    return _components(total, k)


def spark_abrain(
    sc: Any, block_paths: list[str], firsts: list[int], y_path: str, permutations: int
) -> Any:
    yz = sc.broadcast(_standardize(np.load(y_path)))
    n = yz.value.shape[0]
    keep_r = keep_threshold(n, 1e-3)

    def task(t: tuple[int, str, int]) -> Partial:
        b, path, first = t
        r = block_stats(np.load(path).T, yz.value, permutation(SEED, b, n))
        a = np.abs(r)
        out = Partial({b: float(a.max())})
        if b == 0:
            out.hits = [
                (first + int(i), int(v), float(r[i, v]))
                for i, v in np.argwhere(a >= keep_r)
            ]
        return out

    def merge(p: Partial, q: Partial) -> Partial:
        for b, m in q.max_stat.items():
            p.max_stat[b] = max(p.max_stat.get(b, 0.0), m)
        p.hits.extend(q.hits)
        return p

    tasks = [
        (b, p, f) for b in range(permutations + 1) for p, f in zip(block_paths, firsts)
    ]
    total = sc.parallelize(tasks, min(len(tasks), 64)).map(task).reduce(merge)
    yz.unpersist()
    return corrected(total, permutations, ALPHA, keep_r)


# --- the run ------------------------------------------------------------------------------------


def check_pca(got: Any, ref: Any) -> None:
    np.testing.assert_allclose(got.mean, ref.mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(
        got.explained_variance, ref.explained_variance, rtol=1e-7
    )
    np.testing.assert_allclose(got.components, ref.components, atol=1e-6)


def check_abrain(got: Any, ref: Any) -> None:
    assert [(s, v, p) for s, v, _, p in got.pairs] == [
        (s, v, p) for s, v, _, p in ref.pairs
    ]
    np.testing.assert_allclose([r for *_, r, _ in got.pairs], [r for *_, r, _ in ref.pairs],
                               rtol=1e-9)  # fmt: skip
    np.testing.assert_allclose(got.null_max, ref.null_max, rtol=1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=parse_size, default=parse_size("32MiB"))
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--pca-points", type=int, default=1_000_000)
    ap.add_argument("--pca-dims", type=int, default=32)
    ap.add_argument("--subjects", type=int, default=300)
    ap.add_argument("--snps", type=int, default=4096)
    ap.add_argument("--voxels", type=int, default=256)
    ap.add_argument("--permutations", type=int, default=99)
    ap.add_argument("--snp-block", type=int, default=512)
    ap.add_argument("--split", type=parse_size, default=parse_size("4MiB"))
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "peers.json"
    )
    args = ap.parse_args()
    text = stdlib_text(args.size)
    points, _ = clustered_points(args.points, 8, 8, seed=3, spread=1.5)
    start = initial_centers(points[:20000], 8, seed=1)
    pca_points, _ = clustered_points(
        args.pca_points, args.pca_dims, 8, seed=5, spread=1.0
    )
    gx, gy, planted = genotypes_imaging(
        args.subjects, args.snps, args.voxels, planted=4, effect=0.9, seed=5
    )
    rows: dict[str, dict[str, float]] = {}
    extra: dict[str, Any] = {}

    def put(app: str, system: str, seconds: float) -> None:
        rows.setdefault(app, {})[system] = round(seconds, 3)
        print(app, system, round(seconds, 3), flush=True)

    sc = None
    spark_skipped = "disabled with --no-spark" if args.no_spark else None
    if not args.no_spark:
        try:
            sc, t = timed(start_spark)
            extra["spark_start_seconds"] = round(t, 3)
            extra["spark_version"] = sc.version
        except Exception as e:  # noqa: BLE001 - any failure to start skips only this peer
            spark_skipped = f"{type(e).__name__}: {e}".strip()[:500]
            print("spark skipped:", spark_skipped, flush=True)

    with tempfile.TemporaryDirectory() as tmp, engines() as s:

        def save(name: str, a: np.ndarray) -> str:
            p = str(Path(tmp, name))
            np.save(p, a)
            return p

        # Inputs: 4 text files / blobs; .npy files / datasets for the numeric apps.
        paths, blobs = [], []
        for i, part in enumerate(pieces(text, 4)):
            p = Path(tmp, f"text{i}.txt")
            p.write_bytes(part)
            paths.append(str(p))
            b = s.tomus.create_blob(chunk_size=1 << 20)
            b.write(0, part)
            blobs.append(b.id)
        point_paths = [
            save(f"points{i}.npy", a) for i, a in enumerate(np.array_split(points, 8))
        ]
        pca_parts = np.array_split(pca_points, 8)
        pca_paths = [save(f"pca{i}.npy", a) for i, a in enumerate(pca_parts)]
        xt = np.ascontiguousarray(gx.T)  # SNP-major, as tomus stores it
        firsts = list(range(0, args.snps, args.snp_block))
        block_parts = [xt[f : f + args.snp_block] for f in firsts]
        block_paths = [save(f"geno{i}.npy", a) for i, a in enumerate(block_parts)]
        y_path = save("imaging.npy", gy)
        t0 = time.perf_counter()
        ds = Dataset.write(s.tomus, points, objects=8, chunk_bytes=4 << 20)
        pca_ds = Dataset.write(s.tomus, pca_points, objects=8, chunk_bytes=4 << 20)
        ab_data = load(s.tomus, gx, gy, snp_block=args.snp_block, objects=2)
        extra["tomus_dataset_load_seconds"] = round(time.perf_counter() - t0, 3)

        def spark(app: str, fn: Any, check: Any) -> None:
            if sc is None:
                return
            got, t = timed(fn)
            check(got)
            put(app, "spark", t)

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
        put("wordcount", "dask", t)

        def check_wc(got: Counter[str]) -> None:
            assert got == expected_wc, "spark word count differs"

        spark("wordcount", lambda: spark_word_count(sc, paths, args.split), check_wc)

        # MostFrequentWords (top 10)
        expected_top, t = timed(lambda: reference_top_words(text, TOP))
        put("mfw", "single_process", t)
        got, t = timed(
            lambda: (
                most_frequent_words(blobs, TOP, session=s, split_size=args.split).value
            )
        )
        assert got == expected_top, "tomus top words differ"
        put("mfw", "tomus", t)
        got, t = timed(lambda: dask_top_words(paths, args.split, TOP))
        assert got == expected_top, "dask top words differ"
        put("mfw", "dask", t)

        def check_top(got: list) -> None:
            assert got == expected_top, f"spark top words differ: {got}"

        spark("mfw", lambda: spark_top_words(sc, paths, args.split, TOP), check_top)

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
        put("grep", "dask", t)

        def check_grep(got: int) -> None:
            assert got == expected_grep, f"spark grep differs: {got} != {expected_grep}"

        spark("grep", lambda: spark_grep(sc, paths, args.split), check_grep)

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
        put("kmeans", "dask", t)

        def check_km(got: np.ndarray) -> None:
            np.testing.assert_allclose(got, ref_c, rtol=1e-6, atol=1e-6)

        spark(
            "kmeans", lambda: spark_kmeans(sc, point_paths, start, ITERATIONS), check_km
        )

        # PCA, one pass (mean + scatter), top components
        ref_pca, t = timed(lambda: reference_pca(pca_points, PCA_K))
        put("pca", "single_process", t)
        got, t = timed(lambda: pca(pca_ds, PCA_K, session=s))
        check_pca(got, ref_pca)
        put("pca", "tomus", t)
        shapes = [p.shape for p in pca_parts]
        got, t = timed(lambda: dask_pca(pca_paths, shapes, PCA_K))
        check_pca(got, ref_pca)
        put("pca", "dask", t)
        spark(
            "pca",
            lambda: spark_pca(sc, pca_paths, PCA_K),
            lambda g: check_pca(g, ref_pca),
        )

        # A-Brain
        P = args.permutations
        ref_ab, t = timed(lambda: reference_abrain(gx, gy, P, alpha=ALPHA, seed=SEED))
        put("abrain", "single_process", t)
        assert ref_ab.complete
        extra["abrain_planted_found"] = sum(
            1 for p in planted if p in {(a, b) for a, b, _, _ in ref_ab.pairs}
        )
        got, t = timed(lambda: abrain(ab_data, P, alpha=ALPHA, seed=SEED, session=s))
        check_abrain(got, ref_ab)
        put("abrain", "tomus", t)
        block_shapes = [a.shape for a in block_parts]
        got, t = timed(
            lambda: dask_abrain(block_paths, block_shapes, y_path, gy.shape, P)
        )
        check_abrain(got, ref_ab)
        put("abrain", "dask", t)
        spark("abrain", lambda: spark_abrain(sc, block_paths, firsts, y_path, P),
              lambda g: check_abrain(g, ref_ab))  # fmt: skip

    if sc is not None:
        sc.stop()

    peers = ("single_process", "dask", "spark")
    ratios = {
        app: {f"tomus_vs_{p}": round(r["tomus"] / r[p], 3) for p in peers if p in r}
        for app, r in rows.items()
    }
    write_json(args.out, {
        "benchmark": "peers", "machine": machine(), "text_bytes": len(text),
        "points": args.points, "kmeans_iterations": ITERATIONS,
        "pca": {"points": args.pca_points, "dims": args.pca_dims, "components": PCA_K},
        "abrain": {"subjects": args.subjects, "snps": args.snps, "voxels": args.voxels,
                   "permutations": P, "snp_block": args.snp_block},
        "dask_api": {"wordcount": "dask.bag", "mfw": "dask.bag", "grep": "dask.bag",
                     "kmeans": "dask.bag", "pca": "dask.array", "abrain": "dask.array"},
        "spark": "pyspark RDD, local[2]", "spark_skipped": spark_skipped,
        **extra, "seconds": rows, "ratios": ratios,
    })  # fmt: skip


if __name__ == "__main__":
    main()
