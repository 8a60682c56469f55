"""MostFrequentWords: IterativeReduce (reduction tree, no barrier) vs classic MapReduce with a
final aggregator, as the input grows (the TomusBlobs paper's section 7.4 experiment, scaled to
one machine). Answers are cross-checked against each other and a single-process Counter.

    .venv/bin/python bench/compute/mfw_tree_vs_classic.py [--sizes 8MiB,32MiB,96MiB] [--out FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import engines, machine, timed, write_json
from tomus.compute.apps.synth import pieces, stdlib_text
from tomus.compute.apps.text import (
    most_frequent_words,
    most_frequent_words_classic,
    reference_top_words,
)
from tomus.compute.demo import parse_size
from tomus.compute.splits import plan_splits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="8MiB,32MiB,96MiB")
    ap.add_argument("--split", type=parse_size, default=parse_size("1MiB"))
    ap.add_argument("--ratio", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "mfw.json"
    )
    args = ap.parse_args()
    rows = []
    with engines() as s:
        for size in [parse_size(x) for x in args.sizes.split(",")]:
            text = stdlib_text(size)
            blobs = []
            for part in pieces(text, 4):
                b = s.tomus.create_blob(chunk_size=1 << 20)
                b.write(0, part)
                blobs.append(b.id)
            splits = plan_splits(s.tomus, blobs, args.split)
            expected = reference_top_words(text, 10)
            tree, t_tree = timed(
                lambda sp=splits: most_frequent_words(
                    sp, 10, ratio=args.ratio, session=s
                ),
                args.repeat,
            )
            flat, t_flat = timed(
                lambda sp=splits: most_frequent_words(
                    sp, 10, shape="classic", session=s
                ),
                args.repeat,
            )
            classic, t_classic = timed(
                lambda b=blobs: most_frequent_words_classic(
                    b, 10, session=s, split_size=args.split
                ),
                args.repeat,
            )
            assert tree.value == flat.value == classic.value == expected, (
                "answers differ"
            )
            row = {
                "bytes": len(text),
                "map_tasks": tree.map_tasks,
                "tree_seconds": round(t_tree, 3),
                "tree_reduce_tasks": tree.reduce_tasks,
                "all_maps_then_one_reduce_seconds": round(t_flat, 3),
                "mapreduce_plus_aggregator_seconds": round(t_classic, 3),
                "tree_vs_mapreduce_aggregator": round(t_tree / t_classic, 3),
                "tree_vs_all_maps_then_one_reduce": round(t_tree / t_flat, 3),
            }
            print(row)
            rows.append(row)
    write_json(args.out, {"benchmark": "most_frequent_words", "machine": machine(),
                          "ratio": args.ratio, "split_bytes": args.split, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
