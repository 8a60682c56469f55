"""Grouped compression as a data service vs compressing each result file alone.

DataSteward compresses the results of many application nodes together on a storage node and
gains up to 20% in ratio over compressing each alone. This runs that scenario on one machine:
a tomus cluster (4 providers) and a Dask cluster with one compute worker and one storage worker
(``storage`` resource), many similar result files (one CSV schema; rows from a shared template
except a fraction drawn anew per file, 2% to 100%: python/tests/services/similar.py) written to tomus, then for each dataset:

  per_file      each file compressed alone with zstd (same level), in this process: what an
                application does if it compresses its own results (bytes, seconds)
  solid, dict   ``tomus service submit compress`` (``--mode solid`` / ``dict``): the grouped
                archive's bytes, the service's compression seconds, its end-to-end seconds
                (submit -> done, reading the files from tomus and writing the archive), and
                the seconds ``submit`` kept the application waiting

Ratios are input bytes / compressed bytes; ``gain`` = 1 - grouped / per-file bytes. Medians of
--runs runs. Prints JSON; --out writes it too.

    python3 bench/services.py [--runs 3] [--level 9] [--out bench/results/services.json]

Not a test: it takes a minute or two and wants a quiet machine (timings here are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import zstandard as zstd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python" / "tests" / "services"))

import tomus
from similar import similar_files
from tomus import services

DATASETS = {
    # name: (files, bytes each, fraction of rows drawn anew per file; the rest are shared)
    "1000x8KiB-2%": (1000, 8 << 10, 0.02),
    "1000x8KiB-100%": (1000, 8 << 10, 1.0),
    "200x128KiB-2%": (200, 128 << 10, 0.02),
    "200x128KiB-50%": (200, 128 << 10, 0.5),
    "200x128KiB-100%": (200, 128 << 10, 1.0),
}


def dask_cluster() -> Any:
    from distributed import Client, Nanny, Scheduler, SpecCluster

    def worker(resources: dict[str, float]) -> dict[str, Any]:
        return {
            "cls": Nanny,
            "options": {"nthreads": 1, "host": "127.0.0.1", "resources": resources},
        }

    cluster = SpecCluster(
        scheduler={
            "cls": Scheduler,
            "options": {"host": "127.0.0.1", "dashboard_address": ":0"},
        },
        workers={"compute-0": worker({}), "storage-0": worker({"storage": 1})},
        silence_logs=50,
    )
    client = Client(cluster, set_as_default=False)
    client.wait_for_workers(2, timeout=60)
    return cluster, client


def per_file(files: list[bytes], level: int) -> dict[str, float]:
    cctx = zstd.ZstdCompressor(level=level, write_checksum=True)
    t = time.perf_counter()
    out = sum(len(cctx.compress(f)) for f in files)
    return {"bytes": out, "seconds": time.perf_counter() - t}


def grouped(
    client: tomus.Client, dask: Any, prefix: str, mode: str, level: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    svc = services.submit_compress(
        client, dask, [f"/{prefix}/*"], f"/{prefix}-{mode}.tzst", mode=mode, level=level
    )
    handed = time.perf_counter() - t0
    st = services.wait(client, svc.id, timeout=600, poll=0.05)
    end_to_end = time.perf_counter() - t0
    if st.state != "done":
        raise RuntimeError(f"service {svc.id} {st.state}: {st.error}")
    r = st.result
    return {
        "bytes": r["grouped_bytes"],
        "archive_bytes": r["archive_bytes"],
        "seconds": r["grouped_seconds"],
        "end_to_end_seconds": end_to_end,
        "submit_seconds": handed,
        "service_per_file_bytes": r["per_file_bytes"],
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--level", type=int, default=9)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    results: dict[str, Any] = {}
    cluster, dask = dask_cluster()
    try:
        with tomus.local_cluster(providers=4, fsync=False) as tc:
            client = tc.connect()
            fs = client.fs()
            for name, (n, size, fresh) in DATASETS.items():
                files = similar_files(n, size, fresh=fresh)
                prefix = "bench-" + name.replace("%", "pct")
                for i, d in enumerate(files):
                    fs.pipe_file(f"{prefix}/r-{i:05}.csv", d)
                total = sum(len(f) for f in files)
                row: dict[str, Any] = {
                    "files": n,
                    "file_bytes": size,
                    "fresh": fresh,
                    "input_bytes": total,
                }
                row["per_file"] = median_of(
                    [per_file(files, args.level) for _ in range(args.runs)]
                )
                for mode in ("solid", "dict"):
                    runs = [
                        grouped(client, dask, prefix, mode, args.level)
                        for _ in range(args.runs)
                    ]
                    row[mode] = median_of(runs)
                pf = row["per_file"]["bytes"]
                row["per_file"]["ratio"] = total / pf
                for mode in ("solid", "dict"):
                    g = row[mode]
                    g["ratio"] = total / g["bytes"]
                    g["gain_vs_per_file"] = 1 - g["bytes"] / pf
                    g["time_vs_per_file"] = g["seconds"] / row["per_file"]["seconds"]
                results[name] = row
                print(
                    f"{name}: per-file x{total / pf:.2f}, solid x{row['solid']['ratio']:.2f} "
                    f"({row['solid']['gain_vs_per_file']:+.0%}), dict x{row['dict']['ratio']:.2f} "
                    f"({row['dict']['gain_vs_per_file']:+.0%})",
                    file=sys.stderr,
                )
    finally:
        dask.close()
        cluster.close()
    out = {
        "benchmark": "services.grouped_compression",
        "level": args.level,
        "runs": args.runs,
        "zstandard": zstd.__version__,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "note": "one machine, 2 cores shared with other jobs while measured: times are noisy; "
        "bytes and ratios are exact",
        "datasets": results,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
