"""The memory-hungry application of the dedicated-vs-collocated makespan benchmark.

Run by ``crates/cli/tests/memory_app_bench.rs`` (``bench/dedicated_app.sh``) on every compute
"host" (a network namespace with its own cgroup: a CPU quota and a memory limit). It runs
Lloyd's KMeans passes with tomus.compute's kernel (``pass_stats``) over the host's partition,
a tomus file of float32 points, the way a memory-aware framework (Spark's storage memory,
Dask's spilling) does: as much of the partition as fits in the memory the host has left is
kept in RAM after the first pass, the rest is read again from tomus on every pass. The room
is the cgroup's memory limit minus the resident memory already charged to it (in collocated
mode the provider on the same host with its memory-class data), minus this process's own,
minus a headroom for the kernel's buffers. Prints one JSON line: seconds, cached and streamed bytes.

    python bench/memory_app.py gen FILE MIB          # the points (deterministic)
    python bench/memory_app.py run --blob ID --passes 4 --k 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import tomus
from tomus.compute.apps.kmeans import pass_stats

DIM = 16
ROW = DIM * 4
#: Bytes read from tomus at a time when streaming (a whole number of points).
BLOCK = (8 << 20) // ROW * ROW
#: Memory kept free for the kernel's buffers, the reads in flight and Python itself.
HEADROOM = 48 << 20


def room() -> int:
    """Bytes this host can still give the application: its memory limit minus what its
    cgroup held before the application started (``TOMUS_BENCH_MEM_LIMIT`` and
    ``TOMUS_BENCH_MEM_USED``, read by the benchmark outside the network namespace, whose
    /sys has no cgroups) minus this process's resident memory and a headroom."""
    limit = os.environ.get("TOMUS_BENCH_MEM_LIMIT", "max")
    if limit == "max" or not limit.isdigit():
        return 1 << 62
    used = int(os.environ.get("TOMUS_BENCH_MEM_USED") or 0)
    own = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            own = int(line.split()[1]) * 1024
    return max(0, int(limit) - used - own - HEADROOM)


def gen(path: str, mib: int) -> None:
    """Points around 8 centers, float32, ``mib`` MiB."""
    rng = np.random.default_rng(13)
    n = (mib << 20) // ROW
    centers = rng.normal(0, 10, (8, DIM)).astype(np.float32)
    with open(path, "wb") as f:
        for s in range(0, n, 1 << 18):
            m = min(1 << 18, n - s)
            pts = centers[rng.integers(0, 8, m)] + rng.normal(0, 1, (m, DIM)).astype(
                np.float32
            )
            f.write(pts.tobytes())


def run(blob_id: int, passes: int, k: int) -> dict[str, float | int]:
    start = time.monotonic()
    secret = os.environ.get("TOMUS_SECRET_FILE")
    key = Path(secret).read_bytes().strip() if secret else None
    client = tomus.connect(secret=key)
    blob = client.open_blob(blob_id)
    size = blob.size() // ROW * ROW
    cache_bytes = min(size, room() // BLOCK * BLOCK)
    cache = np.empty(cache_bytes // 4, dtype=np.float32)
    buf = np.empty(BLOCK // 4, dtype=np.float32)
    centers: np.ndarray | None = None
    streamed = 0
    for p in range(passes):
        sums = np.zeros((k, DIM))
        counts = np.zeros(k, dtype=np.int64)
        off = 0
        while off < size:
            n = min(BLOCK, size - off)
            if off + n <= cache_bytes and p > 0:
                pts = cache[off // 4 : (off + n) // 4].reshape(-1, DIM)
            else:
                view = buf[: n // 4].data.cast("B")  # n bytes
                blob.read_into(view, off)
                streamed += n
                pts = buf[: n // 4].reshape(-1, DIM)
                if off + n <= cache_bytes:
                    cache[off // 4 : (off + n) // 4] = buf[: n // 4]
            if centers is None:
                centers = pts[:k].astype(np.float64)
            s, c, _ = pass_stats(pts, centers)
            sums += s
            counts += c
            off += n
        assert centers is not None
        nonempty = counts > 0
        centers[nonempty] = sums[nonempty] / counts[nonempty, None]
    return {
        "seconds": time.monotonic() - start,
        "bytes": size,
        "cached_bytes": cache_bytes,
        "streamed_bytes": streamed,
        "passes": passes,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("file")
    g.add_argument("mib", type=int)
    r = sub.add_parser("run")
    r.add_argument("--blob", type=int, required=True)
    r.add_argument("--passes", type=int, default=4)
    r.add_argument("--k", type=int, default=8)
    a = ap.parse_args(argv)
    if a.cmd == "gen":
        gen(a.file, a.mib)
    else:
        print(json.dumps(run(a.blob, a.passes, a.k)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
