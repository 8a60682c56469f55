"""What reading a text split costs a task: ``read_text`` (the lines that start in a split,
as every text app and PageRank's edge parsing read them) next to the one ``blob.read`` of the
same bytes it cannot beat, and next to the local file read the text peers of ``real.py`` do.

One process, no Dask; the three reads alternate split by split, so the machine's noise hits
them alike. Per read: the median over every split of every round.

    $VENV/bin/python text_reads.py [--size 512MiB] [--split 32MiB] [--rounds 3]
        [--out results/text_reads.json]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import tomus
from common import machine, write_json
from tomus.compute.apps.synth import stdlib_text
from tomus.compute.demo import parse_size
from tomus.compute.splits import plan_splits, read_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=parse_size, default=parse_size("512MiB"))
    ap.add_argument("--split", type=parse_size, default=parse_size("32MiB"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).parent / "results" / "text_reads.json",
    )
    args = ap.parse_args()
    text = stdlib_text(args.size)
    ms: dict[str, list[float]] = {"read_text": [], "blob_read": [], "file_read": []}
    with (
        tomus.LocalCluster(providers=4, fsync=False) as cluster,
        tempfile.TemporaryDirectory() as tmp,
    ):
        client = cluster.connect()
        blob = client.create_blob()
        blob.write(0, text)
        path = Path(tmp, "text.txt")
        path.write_bytes(text)
        splits = plan_splits(client, [blob.id], split_size=args.split)
        owned = [read_text(client, s) for s in splits]
        assert b"".join(owned) == text
        starts = [0]
        for o in owned:
            starts.append(starts[-1] + len(o))
        del text
        for _ in range(args.rounds):
            for s, begin, end in zip(splits, starts[:-1], starts[1:], strict=True):
                t = time.perf_counter()
                a = read_text(client, s)
                ms["read_text"].append(time.perf_counter() - t)
                t = time.perf_counter()
                b = blob.read(begin, end - begin, version=s.version)
                ms["blob_read"].append(time.perf_counter() - t)
                t = time.perf_counter()
                with open(path, "rb") as f:
                    f.seek(begin)
                    c = f.read(end - begin)
                ms["file_read"].append(time.perf_counter() - t)
                assert a == b == c
                del a, b, c
    medians = {k: round(statistics.median(v) * 1e3, 2) for k, v in ms.items()}
    print(f"ms per {args.split >> 20} MiB split, medians: {medians}")
    write_json(args.out, {
        "benchmark": "text-split-reads", "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "size": args.size, "split": args.split, "splits": len(splits), "rounds": args.rounds,
        "median_ms": medians,
        "read_text_over_blob_read": round(medians["read_text"] / medians["blob_read"], 3),
        "read_text_over_file_read": round(medians["read_text"] / medians["file_read"], 3),
    })  # fmt: skip


if __name__ == "__main__":
    main()
