"""The in-memory / direct threshold on this machine (the AFM paper's scenario 1 found 15 MB on
Azure): per-file fetch time of a registered file with the ``memory`` module (the whole file in
one request, answered from the holder's in-memory copy when it has one) and the ``direct``
module (a stream of pieces, sendfile on the holder), by size, alternating, medians.

    python bench/workflow/threshold.py --out bench/results/workflow-threshold.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import tomus
from tomus import workflow

SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20, 12 << 20, 16 << 20, 24 << 20,
         32 << 20, 64 << 20]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--out", default="bench/results/workflow-threshold.json")
    args = ap.parse_args()
    rows = []
    with (
        tomus.local_cluster(providers=2, fsync=False) as cluster,
        tempfile.TemporaryDirectory(dir=cluster.data_dir) as tmp,
    ):
        client = cluster.connect()
        holder = min(p.addr for p in client.providers())
        for size in SIZES:
            src = Path(tmp) / f"src-{size}"
            src.write_bytes(os.urandom(size))
            path = f"/bench/threshold-{size}"
            workflow.register(client, src, path, provider=holder)
            workflow.registered(client, path)
            dest = Path(tmp) / "dest"
            times: dict[str, list[float]] = {"memory": [], "direct": []}
            workflow.fetch(
                client, path, dest, mode="direct"
            )  # warm: checksum known, cached
            for _ in range(args.repeat):
                for mode in ("memory", "direct"):  # alternating: noise hits both alike
                    t0 = time.perf_counter()
                    workflow.fetch(client, path, dest, mode=mode)
                    times[mode].append(time.perf_counter() - t0)
                    assert dest.stat().st_size == size
            row = {
                "size": size,
                "memory_median_s": statistics.median(times["memory"]),
                "direct_median_s": statistics.median(times["direct"]),
            }
            row["direct_over_memory"] = row["direct_median_s"] / row["memory_median_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "bench": "workflow-threshold",
        "note": "one machine (2 cores, shared and noisy), 2 providers on loopback, no fsync; "
        f"medians of {args.repeat} alternating fetches per size and module",
        "rows": rows,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
