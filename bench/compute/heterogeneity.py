"""MATE's heterogeneity claim: with workers of unequal speed, pull-based assignment (an idle
worker takes the next queued task) keeps every worker busy, where static assignment (task i
pinned to worker i mod W up front) waits for the slow worker's share.

One of the 2 Dask workers is put in a cgroup (v1 ``cpu`` controller, so this needs root) that
caps it at ``--quota`` of one core; the job is one KMeans-style pass over points in tomus (32
tasks of one chunk each, every task running the distance kernel ``--work`` times so the tasks
are CPU-bound), run with ``assignment="pull"`` and ``"static"`` alternately, ``--repeat``
times. Reports the makespans (medians) and how many map tasks each worker ran.

    python bench/compute/heterogeneity.py [--quota 0.25] [--repeat 3] [--out results/heterogeneity.json]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np
from common import engines, machine, write_json
from tomus.compute import Dataset
from tomus.compute.apps.kmeans import assign, cluster_sums
from tomus.compute.apps.synth import clustered_points
from tomus.compute.dataset import Task
from tomus.compute.engine import tomus_client
from tomus.compute.iterative import IterativeReduce

CGROUP = Path("/sys/fs/cgroup/cpu/tomus-bench-slow")


def _task(work: int, centers: np.ndarray, task: Task) -> tuple[np.ndarray, np.ndarray]:
    x = task.chunks[0].read(tomus_client())
    for _ in range(work):
        labels, _ = assign(x, centers)
    return cluster_sums(x, labels, len(centers)), np.bincount(
        labels, minlength=len(centers)
    )


def _add(objs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return functools.reduce(lambda a, b: (a[0] + b[0], a[1] + b[1]), objs)


def limit(pid: int, quota: float) -> None:
    CGROUP.mkdir(exist_ok=True)
    period = 100_000
    (CGROUP / "cpu.cfs_period_us").write_text(str(period))
    (CGROUP / "cpu.cfs_quota_us").write_text(str(int(period * quota)))
    (CGROUP / "cgroup.procs").write_text(str(pid))


def unlimit(pid: int) -> None:
    try:
        (CGROUP.parent / "cgroup.procs").write_text(str(pid))
    except OSError:
        pass  # the worker is gone
    CGROUP.rmdir()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument(
        "--quota", type=float, default=0.25, help="CPU share of the slow worker"
    )
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--work", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).parent / "results" / "heterogeneity.json",
    )
    args = ap.parse_args()
    points, _ = clustered_points(args.tasks * 100_000, 8, 16, seed=1)
    centers = points[:16].astype(np.float64)
    runs: dict[str, list[float]] = {"pull": [], "static": []}
    per_worker: dict[str, list[dict[str, int]]] = {"pull": [], "static": []}
    with engines() as s:
        ds = Dataset.write(s.tomus, points, objects=4, chunk_records=100_000)
        tasks = ds.tasks(1)
        pids = s.dask.run(os.getpid)
        slow = min(pids)
        limit(pids[slow], args.quota)
        try:
            job = IterativeReduce(functools.partial(_task, args.work, centers), _add, 4)
            expected = None
            for rep in range(args.repeat):
                for mode in ("pull", "static") if rep % 2 == 0 else ("static", "pull"):
                    t0 = time.perf_counter()
                    res = job.run_in(s, tasks, assignment=mode)  # type: ignore[arg-type]
                    dt = time.perf_counter() - t0
                    if expected is None:
                        expected = res.value
                    np.testing.assert_allclose(res.value[0], expected[0], rtol=1e-9)
                    assert (res.value[1] == expected[1]).all()
                    runs[mode].append(round(dt, 3))
                    counts = Counter(t.worker for t in res.timeline if t.kind == "map")
                    per_worker[mode].append(
                        {
                            ("slow" if w == slow else "fast"): n
                            for w, n in counts.items()
                        }
                    )
                    print(
                        f"rep {rep} {mode:6s} {dt:7.3f}s maps per worker {per_worker[mode][-1]}",
                        flush=True,
                    )
        finally:
            unlimit(pids[slow])
    med = {m: round(statistics.median(v), 3) for m, v in runs.items()}
    print(
        "median makespan", med, "static / pull", round(med["static"] / med["pull"], 3)
    )
    write_json(args.out, {
        "benchmark": "heterogeneity", "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "slow_worker_cpu_quota": args.quota, "tasks": args.tasks, "work": args.work,
        "runs": runs, "maps_per_worker": per_worker, "median_seconds": med,
        "static_over_pull": round(med["static"] / med["pull"], 3),
    })  # fmt: skip


if __name__ == "__main__":
    main()
