"""tomus.compute at real sizes against plain Dask (2 worker processes; the threaded scheduler
with 2 threads), Spark ``local[2]`` and one numpy process, in one sitting on the same inputs:
KMeans (k=16, 10 passes, fixed start), PCA (top 4), A-Brain (permutation-corrected SNP x voxel
correlations) and PageRank (fixed iterations). Every answer is cross-checked against the numpy
process's (an assertion stops the run on a mismatch). ``floor`` is not a peer: the same kernels
on inputs already in memory, in 2 bare threads; no engine running these kernels here can beat
it by much, so best peer / floor bounds how far ahead of the best peer any engine could be.

The machine may be shared: within each repetition the engines run in a rotating order, so a
burst of outside load hits each of them alike; the figures are medians of ``--repeat`` runs and
the JSON keeps every run. Loading the inputs into tomus and writing the local files are timed
apart; job times include reading the inputs (tomus from its store, the peers from local files in
the page cache).

    python bench/compute/real.py [--points 5000000] [--subjects 1000 --snps 8192 --voxels 256
        --permutations 20] [--edges 10000000] [--repeat 3] [--apps kmeans,pca,abrain,pagerank]
        [--no-spark] [--engines tomus,tomus_procs,dask,dask_threads,spark,numpy,floor]
        [--out results/real.json]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# BLAS single-threaded in every engine, as Dask's workers have it by default: on a busy 2-core
# machine multithreaded OpenBLAS ran the tall-skinny products of KMeans ~10-25x slower. Each
# engine gets its 2 cores from its own parallelism (2 processes, 2 threads, local[2]).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np
import real_engines as E
from common import engines, machine, write_json
from tomus.compute import Dataset
from tomus.compute.apps.abrain import abrain, load
from tomus.compute.apps.kmeans import initial_centers, kmeans
from tomus.compute.apps.pagerank import pagerank
from tomus.compute.apps.pca import pca
from tomus.compute.apps.synth import clustered_points, genotypes_imaging, stdlib_text
from tomus.compute.apps.text import grep, most_frequent_words, word_count
from tomus.compute.demo import parse_size
from tomus.compute.engine import Placement, Session

SEED = 7
K = 16
ITERATIONS = 10
PCA_K = 4
DAMPING = 0.85
TOP = 10
PATTERN = rb"\bimport\b"
TEXT_APPS = ("wordcount", "mfw", "grep")


def start_spark() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    conf = (
        SparkConf().setMaster("local[2]").setAppName("tomus-real")
        .set("spark.ui.enabled", "false").set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.memory", "6g").set("spark.driver.maxResultSize", "2g")
        .set("spark.python.worker.reuse", "true")
        .set("spark.executorEnv.PYTHONPATH", os.pathsep.join(sys.path))
    )  # fmt: skip
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    sc.addPyFile(str(Path(__file__).with_name("real_engines.py")))
    assert sc.parallelize(range(100), 2).sum() == 4950
    return sc


def graph_text(edges: int, nodes: int, seed: int) -> bytes:
    """``edges`` lines ``src dst``: uniform sources, in-degrees skewed (a few popular nodes),
    ids spread over a range twice the node count (so not every id exists)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    rng = np.random.default_rng(seed)
    src = rng.integers(0, nodes, edges) * 2
    dst = (np.floor(nodes * rng.random(edges) ** 3).astype(np.int64)) * 2
    sink = pa.BufferOutputStream()
    table = pa.table({"s": src, "d": dst})
    pcsv.write_csv(
        table,
        sink,
        pcsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none"),
    )
    return sink.getvalue().to_pybytes()


def cut_lines(text: bytes, n: int) -> list[bytes]:
    out, start, step = [], 0, -(-len(text) // n)
    while start < len(text):
        end = text.find(b"\n", min(start + step, len(text)) - 1)
        end = len(text) if end < 0 else end + 1
        out.append(text[start:end])
        start = end
    return out


def load_blobs(client: Any, parts: list[bytes]) -> tuple[list[int], float]:
    """One blob per part (4 MiB chunks): their ids and the seconds loading them took."""
    t0 = time.perf_counter()
    ids = []
    for part in parts:
        b = client.create_blob(chunk_size=4 << 20)
        b.write(0, part)
        ids.append(b.id)
    return ids, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--points", type=int, default=5_000_000)
    ap.add_argument("--dims", type=int, default=8)
    ap.add_argument("--subjects", type=int, default=1000)
    ap.add_argument("--snps", type=int, default=8192)
    ap.add_argument("--voxels", type=int, default=256)
    ap.add_argument("--permutations", type=int, default=20)
    ap.add_argument("--snp-block", type=int, default=512)
    ap.add_argument("--edges", type=int, default=10_000_000)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--pagerank-iterations", type=int, default=10)
    ap.add_argument(
        "--text-size", type=parse_size, default=parse_size("512MiB"),
        help="bytes of text for wordcount, mfw and grep (the Python standard library's sources)",
    )  # fmt: skip
    ap.add_argument(
        "--text-split", type=parse_size, default=parse_size("32MiB"),
        help="bytes of text per task, the same in every engine",
    )  # fmt: skip
    ap.add_argument(
        "--files", type=int, default=8, help="local files / data objects per input"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--apps", default="kmeans,pca,abrain,pagerank",
        help="also: wordcount, mfw, grep (minutes each at the default --text-size)",
    )  # fmt: skip
    ap.add_argument(
        "--engines", default="tomus,tomus_procs,dask,dask_threads,spark,numpy,floor"
    )
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument(
        "--tomus-processes",
        action="store_true",
        help="tomus' Dask workers as 2 processes (default: 2 threads in the driver)",
    )
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "real.json"
    )
    args = ap.parse_args()
    apps = args.apps.split(",")
    wanted = [
        e for e in args.engines.split(",") if not (args.no_spark and e == "spark")
    ]
    extra: dict[str, Any] = {}

    sc = None
    if "spark" in wanted:
        try:
            t0 = time.perf_counter()
            sc = start_spark()
            extra["spark_start_seconds"] = round(time.perf_counter() - t0, 3)
            extra["spark_version"] = sc.version
        except Exception as e:  # noqa: BLE001 - a failing peer is reported, not fatal
            extra["spark_skipped"] = f"{type(e).__name__}: {e}"[:500]
            print("spark skipped:", extra["spark_skipped"], flush=True)
            wanted.remove("spark")

    runs: dict[str, dict[str, list[float]]] = {}

    def report() -> None:
        """Medians and ratios so far, printed and written (after every repetition: a run
        cut short still leaves its figures)."""
        medians = {
            a: {e: round(statistics.median(v), 3) for e, v in r.items()}
            for a, r in runs.items()
        }
        ratios = {}
        for a, m in medians.items():
            peers = {
                e: v for e, v in m.items() if not e.startswith("tomus") and e != "floor"
            }
            if "tomus" in m and peers:
                best = min(peers, key=lambda e: peers[e])
                ratios[a] = {"best_peer": best, "best_peer_over_tomus": round(peers[best] / m["tomus"], 3),
                             **{f"{e}_over_tomus": round(v / m["tomus"], 3) for e, v in peers.items()}}  # fmt: skip
                if "floor" in m:
                    # The ceiling of best_peer_over_tomus for any engine running these kernels.
                    ratios[a]["best_peer_over_floor"] = round(
                        peers[best] / m["floor"], 3
                    )
                    ratios[a]["floor_over_tomus"] = round(m["floor"] / m["tomus"], 3)
                if "tomus_procs" in m:
                    ratios[a]["best_peer_over_tomus_procs"] = round(
                        peers[best] / m["tomus_procs"], 3
                    )
        for a, m in medians.items():
            print(a, m, ratios.get(a))
        write_json(args.out, {
            "benchmark": "compute-real-sizes", "machine": machine(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "sizes": {"points": args.points, "dims": args.dims, "kmeans_k": K,
                      "kmeans_iterations": ITERATIONS, "pca_components": PCA_K,
                      "abrain": [args.subjects, args.snps, args.voxels, args.permutations],
                      "snp_block": args.snp_block, "pagerank_edges": args.edges,
                      "pagerank_nodes_range": args.nodes,
                      "pagerank_iterations": args.pagerank_iterations, "files": args.files,
                      "text_bytes": args.text_size, "text_split": args.text_split},
            "engines": {"tomus": "tomus.compute, embedded 4-provider cluster, Dask LocalCluster 2 workers x 1 thread ("
                                 + ("processes" if args.tomus_processes else "threads of the driver") + ")",
                        "tomus_procs": "tomus.compute on the dask peer's LocalCluster (2 processes x 1 thread)",
                        "dask": "distributed futures, LocalCluster (2 processes x 1 thread)",
                        "dask_threads": "dask.delayed, threaded scheduler, 2 threads",
                        "spark": "pyspark RDDs of numpy blocks, local[2]",
                        "numpy": "one Python process, numpy",
                        "floor": "not a peer: the same kernels on inputs already in memory, 2 bare threads "
                                 "(no scheduler, storage or file reads)"},
            "repeat": args.repeat, **extra, "runs": runs, "median_seconds": medians,
            "ratios": ratios,
        })  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            s = stack.enter_context(engines(processes=args.tomus_processes))
            extra["engine_start_seconds"] = round(time.perf_counter() - t0, 3)
            extra["tomus_dask_workers"] = (
                "processes" if args.tomus_processes else "threads"
            )
            if args.tomus_processes:
                dc = s.dask  # the peer shares tomus' 2-process LocalCluster
            else:
                # The plain Dask peer keeps its 2 worker processes (its best setting for
                # these apps here), started apart and not counted in any time.
                from distributed import Client, LocalCluster

                t0 = time.perf_counter()
                lc = stack.enter_context(
                    LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 dashboard_address=None, silence_logs=40,
                                 scheduler_kwargs={"dashboard_address": ":0"})
                )  # fmt: skip
                dc = stack.enter_context(Client(lc, set_as_default=False))
                extra["dask_start_seconds"] = round(time.perf_counter() - t0, 3)
            # "tomus_procs": tomus.compute on the peer's 2-process LocalCluster (the previous
            # default), for a before/after in the same sitting.
            sessions = {
                "tomus": s,
                "tomus_procs": Session(dc, s.addr, s.tomus, Placement(dc)),
            }

            def save(name: str, a: np.ndarray) -> str:
                p = str(Path(tmp, name))
                np.save(p, a)
                return p

            jobs: dict[str, dict[str, Callable[[], Any]]] = {}
            checks: dict[str, Callable[[Any, Any], None]] = {}
            load_s: dict[str, float] = {}
            if "kmeans" in apps or "pca" in apps:
                pts, _ = clustered_points(args.points, args.dims, K, seed=3, spread=1.5)
                paths = [
                    save(f"pts{i}.npy", a)
                    for i, a in enumerate(np.array_split(pts, args.files))
                ]
                t0 = time.perf_counter()
                ds = Dataset.write(
                    s.tomus, pts, objects=args.files, chunk_bytes=4 << 20
                )
                load_s["points"] = time.perf_counter() - t0
                mem = np.array_split(pts, args.files) if "floor" in wanted else []
                start = initial_centers(pts[:20000], K, seed=1)
                del pts
            if "kmeans" in apps:
                jobs["kmeans"] = {
                    **{e: (lambda x=x: kmeans(ds, K, ITERATIONS, centers=start, tol=-1.0, session=x).centers)
                       for e, x in sessions.items()},
                    "dask": lambda: E.dd_kmeans(dc, paths, start, ITERATIONS),
                    "dask_threads": lambda: E.dt_kmeans(paths, start, ITERATIONS),
                    "spark": lambda: E.sp_kmeans(sc, paths, start, ITERATIONS),
                    "numpy": lambda: E.np_kmeans(paths, start, ITERATIONS),
                    "floor": lambda: E.fl_kmeans(mem, start, ITERATIONS),
                }  # fmt: skip
                checks["kmeans"] = lambda a, b: np.testing.assert_allclose(
                    a, b, rtol=1e-9, atol=1e-9
                )
            if "pca" in apps:
                jobs["pca"] = {
                    **{
                        e: (lambda x=x: pca(ds, PCA_K, session=x))
                        for e, x in sessions.items()
                    },
                    "dask": lambda: E.dd_pca(dc, paths, PCA_K),
                    "dask_threads": lambda: E.dt_pca(paths, PCA_K),
                    "spark": lambda: E.sp_pca(sc, paths, PCA_K),
                    "numpy": lambda: E.np_pca(paths, PCA_K),
                    "floor": lambda: E.fl_pca(mem, PCA_K),
                }

                def check_pca(a: Any, b: Any) -> None:
                    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-9, atol=1e-12)
                    np.testing.assert_allclose(
                        a.explained_variance, b.explained_variance, rtol=1e-9
                    )
                    np.testing.assert_allclose(a.components, b.components, atol=1e-8)

                checks["pca"] = check_pca
            if "abrain" in apps:
                gx, gy, _ = genotypes_imaging(args.subjects, args.snps, args.voxels, planted=4,
                                              effect=0.9, seed=5)  # fmt: skip
                xt = np.ascontiguousarray(gx.T).astype(np.int8)
                firsts = list(range(0, args.snps, args.snp_block))
                bpaths = [
                    save(f"geno{i}.npy", xt[f : f + args.snp_block])
                    for i, f in enumerate(firsts)
                ]
                ypath = save("imaging.npy", gy.astype(np.float32))
                t0 = time.perf_counter()
                ab = load(s.tomus, gx, gy, snp_block=args.snp_block, objects=args.files)
                load_s["abrain"] = time.perf_counter() - t0
                P = args.permutations
                jobs["abrain"] = {
                    **{
                        e: (
                            lambda x=x: abrain(
                                ab, P, seed=SEED, alpha=E.ALPHA, session=x
                            )
                        )
                        for e, x in sessions.items()
                    },
                    "dask": lambda: E.dd_abrain(dc, bpaths, firsts, ypath, P, SEED),
                    "dask_threads": lambda: E.dt_abrain(bpaths, firsts, ypath, P, SEED),
                    "spark": lambda: E.sp_abrain(sc, bpaths, firsts, ypath, P, SEED),
                    "numpy": lambda: E.np_abrain(bpaths, ypath, P, SEED),
                    "floor": lambda: E.fl_abrain(
                        [xt[f : f + args.snp_block] for f in firsts], firsts,
                        gy.astype(np.float32), P, SEED,
                    ),
                }  # fmt: skip

                def check_ab(a: Any, b: Any) -> None:
                    assert [(x, v, p) for x, v, _, p in a.pairs] == [
                        (x, v, p) for x, v, _, p in b.pairs
                    ]
                    np.testing.assert_allclose(
                        [r for *_, r, _ in a.pairs],
                        [r for *_, r, _ in b.pairs],
                        rtol=1e-9,
                    )
                    np.testing.assert_allclose(a.null_max, b.null_max, rtol=1e-9)

                checks["abrain"] = check_ab
            if "pagerank" in apps:
                text = graph_text(args.edges, args.nodes, SEED)
                extra["pagerank_text_bytes"] = len(text)
                parts = cut_lines(text, args.files)
                gpaths = []
                for i, part in enumerate(parts):
                    p = Path(tmp, f"edges{i}.txt")
                    p.write_bytes(part)
                    gpaths.append(str(p))
                gblobs, load_s["pagerank"] = load_blobs(s.tomus, parts)
                texts = parts if "floor" in wanted else []
                del text, parts
                it = args.pagerank_iterations

                def tomus_pr(x: Session) -> Any:
                    r = pagerank(gblobs, it, DAMPING, session=x)
                    return r.nodes, r.ranks

                jobs["pagerank"] = {
                    **{e: (lambda x=x: tomus_pr(x)) for e, x in sessions.items()},
                    "dask": lambda: E.dd_pagerank(dc, gpaths, it, DAMPING),
                    "dask_threads": lambda: E.dt_pagerank(gpaths, it, DAMPING),
                    "spark": lambda: E.sp_pagerank(sc, gpaths, it, DAMPING),
                    "numpy": lambda: E.np_pagerank(gpaths, it, DAMPING),
                    "floor": lambda: E.fl_pagerank(texts, it, DAMPING),
                }

                def check_pr(a: Any, b: Any) -> None:
                    np.testing.assert_array_equal(a[0], b[0])
                    np.testing.assert_allclose(a[1], b[1], rtol=0, atol=1e-9)

                checks["pagerank"] = check_pr
            if any(a in apps for a in TEXT_APPS):
                tparts = cut_lines(stdlib_text(args.text_size), args.files)
                # The peers' splits: byte ranges of the local files.
                ranges: list[E.Range] = []
                for i, part in enumerate(tparts):
                    p = Path(tmp, f"text{i}.txt")
                    p.write_bytes(part)
                    start = 0
                    for piece in cut_lines(part, max(1, len(part) // args.text_split)):
                        ranges.append((str(p), start, start + len(piece)))
                        start += len(piece)
                tblobs, load_s["text"] = load_blobs(s.tomus, tparts)
                del tparts
                sp = args.text_split
                # No Spark and no floor here: the kernels hold the GIL, so two bare threads
                # would run them one at a time and bound nothing.
                jobs["wordcount"] = {
                    **{e: (lambda x=x: word_count(tblobs, session=x, split_size=sp).value)
                       for e, x in sessions.items()},
                    "dask": lambda: E.tx_decoded(E.dd_counts(dc, ranges)),
                    "dask_threads": lambda: E.tx_decoded(E.dt_counts(ranges)),
                    "numpy": lambda: E.np_word_count(ranges),
                }  # fmt: skip
                jobs["mfw"] = {
                    **{e: (lambda x=x: most_frequent_words(tblobs, TOP, session=x,
                                                           split_size=sp).value)
                       for e, x in sessions.items()},
                    "dask": lambda: E.top_k(E.dd_counts(dc, ranges), TOP),
                    "dask_threads": lambda: E.top_k(E.dt_counts(ranges), TOP),
                    "numpy": lambda: E.np_top_words(ranges, TOP),
                }  # fmt: skip
                jobs["grep"] = {
                    **{e: (lambda x=x: grep(tblobs, PATTERN, session=x, split_size=sp).value)
                       for e, x in sessions.items()},
                    "dask": lambda: E.dd_grep(dc, ranges, PATTERN),
                    "dask_threads": lambda: E.dt_grep(ranges, PATTERN),
                    "numpy": lambda: E.np_grep(ranges, PATTERN),
                }  # fmt: skip

                def check_same(got: Any, ref: Any) -> None:
                    assert got == ref, "the text apps' answers differ"

                for a in TEXT_APPS:
                    checks[a] = check_same
            extra["tomus_load_seconds"] = {k: round(v, 3) for k, v in load_s.items()}

            for rep in range(args.repeat):
                for app in apps:
                    order = wanted[rep % len(wanted) :] + wanted[: rep % len(wanted)]
                    answers: dict[str, Any] = {}
                    for eng in order:
                        if eng not in jobs[app]:
                            continue  # no such peer for this app (see where its jobs are)
                        t0 = time.perf_counter()
                        answers[eng] = jobs[app][eng]()
                        dt = time.perf_counter() - t0
                        runs.setdefault(app, {}).setdefault(eng, []).append(
                            round(dt, 3)
                        )
                        print(f"rep {rep} {app:8s} {eng:12s} {dt:8.3f}s", flush=True)
                    ref = answers.get("numpy")
                    for eng, got in answers.items():
                        if ref is not None and eng != "numpy":
                            checks[app](got, ref)
                report()
    if sc is not None:
        sc.stop()

    report()


if __name__ == "__main__":
    main()
