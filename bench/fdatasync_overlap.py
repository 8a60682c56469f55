"""Whether this machine's disk runs fdatasyncs side by side, as a log that keeps two groups
syncing at once would need.

A provider's group-committed log (crates/provider/src/group_commit.rs) syncs one group at a
time: a small write that arrives while a group syncs waits for that sync, then for its own
group's, about two sync times in all. Letting the next group sync before the previous one ends
only helps if the disk serves overlapping syncs in about the time of one. This script measures
that, with logs like the provider's (4 KiB records appended into zeros written ahead, so a sync
writes data and no file-size change): one thread syncing alone, then 2 and 4 threads each on a
file of its own, then 2 threads on one file. Prints and writes JSON with the median sync time
and the syncs per second of each.

    python3 bench/fdatasync_overlap.py [--dir DIR] [--syncs 1500] [--out FILE]

DIR (default: a new directory under /tmp) must be on the disk to measure; the files are removed
at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

RECORD = 4096 + 200  # a 4 KiB append and its node record, roughly
AHEAD = 16 << 20  # zeros written ahead of the records, as the provider's logs keep


def sync_loop(path: Path, offset: int, syncs: int, out: list[float]) -> None:
    """Appends a record and syncs it, `syncs` times, from `offset` in the file at `path`."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        record = os.urandom(RECORD)
        for i in range(syncs):
            os.pwrite(fd, record, offset + i * RECORD)
            started = time.perf_counter()
            os.fdatasync(fd)
            out.append(time.perf_counter() - started)
    finally:
        os.close(fd)


def zeroed(path: Path) -> None:
    with path.open("wb") as f:
        f.write(b"\0" * AHEAD)
        f.flush()
        os.fdatasync(f.fileno())


def case(dir: Path, threads: int, one_file: bool, syncs: int) -> dict[str, float | int | bool]:
    files = [dir / ("log" if one_file else f"log-{k}") for k in range(threads)]
    for f in set(files):
        zeroed(f)
    times: list[list[float]] = [[] for _ in range(threads)]
    # On one file the threads append to regions of their own, as two groups would.
    span = syncs * RECORD
    workers = [
        threading.Thread(
            target=sync_loop, args=(files[k], k * span if one_file else 0, syncs, times[k])
        )
        for k in range(threads)
    ]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    for f in set(files):
        f.unlink()
    every = [t for ts in times for t in ts]
    return {
        "threads": threads,
        "one_file": one_file,
        "median_sync_us": round(statistics.median(every) * 1e6),
        "syncs_per_s": round(len(every) / elapsed),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--dir", type=Path, help="directory on the disk to measure (default: under /tmp)"
    )
    p.add_argument("--syncs", type=int, default=1500, help="syncs per thread (default 1500)")
    p.add_argument("--out", type=Path, help="write the JSON here as well")
    a = p.parse_args()
    if a.syncs * RECORD * 2 > AHEAD:
        p.error(
            f"--syncs at most {AHEAD // (2 * RECORD)}: two threads' records fit the zeros ahead"
        )
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="fdatasync-overlap-") as d:
        cases = [
            case(Path(d), n, one, a.syncs)
            for n, one in ((1, False), (2, False), (4, False), (2, True))
        ]
    result = {"date": time.strftime("%Y-%m-%d"), "syncs_per_thread": a.syncs, "cases": cases}
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
