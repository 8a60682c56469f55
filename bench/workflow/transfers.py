"""Per-file transfer time of registered files (memory/direct/swarm modules) against the
striped store, by size, on one embedded cluster: the measurements behind the in-memory
threshold. Writes JSON (medians of --repeat fetches per size and module).

    python bench/workflow/transfers.py --out bench/results/workflow-transfers.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import tomus
from tomus import workflow

SIZES = [64 << 10, 1 << 20, 4 << 20, 8 << 20, 15 << 20, 32 << 20, 64 << 20, 128 << 20]


def timed(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="bench/results/workflow-transfers.json")
    args = ap.parse_args()
    rows = []
    with (
        tomus.local_cluster(providers=3, fsync=False) as cluster,
        tempfile.TemporaryDirectory(dir=cluster.data_dir) as tmp,
    ):
        client = cluster.connect()
        provs = sorted(p.addr for p in client.providers())
        fs = client.fs()
        for size in SIZES:
            data = os.urandom(size)
            src = Path(tmp) / f"src-{size}"
            src.write_bytes(data)
            reg = f"/bench/reg-{size}"
            t_register = timed(
                functools.partial(
                    workflow.register, client, src, reg, provider=provs[0]
                )
            )
            for i, p in enumerate(provs[1:]):
                c = Path(tmp) / f"copy{i}-{size}"
                c.write_bytes(data)
                workflow.register(client, c, reg, provider=p)
            workflow.registered(client, reg)
            store = f"/bench/store-{size}"
            t_put = timed(functools.partial(fs.pipe, store, data))
            dest = Path(tmp) / "dest"
            res: dict[str, list[float]] = {
                "registered_direct": [],
                "swarm": [],
                "store": [],
            }
            for _ in range(args.repeat):
                res["registered_direct"].append(
                    timed(
                        functools.partial(
                            workflow.fetch, client, reg, dest, holders=[provs[0]]
                        )
                    )
                )
                res["swarm"].append(
                    timed(
                        functools.partial(
                            workflow.fetch, client, reg, dest, mode="swarm"
                        )
                    )
                )
                res["store"].append(
                    timed(
                        lambda dest=dest, store=store: dest.write_bytes(fs.cat(store))
                    )
                )
            row = {
                "size": size,
                "register_s": t_register,
                "put_s": t_put,
                **{f"{k}_median_s": statistics.median(v) for k, v in res.items()},
            }
            rows.append(row)
            print(json.dumps(row))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "bench": "workflow-transfers",
                "note": "one machine, loopback, 3 providers; registered files <= 15 MiB are "
                "served from the holder's memory",
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
