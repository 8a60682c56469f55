"""PNG plots of the compute benchmarks' JSON results (matplotlib, no display needed):

- ``results/mfw.png``: MostFrequentWords time against input size, IterativeReduce tree vs
  all maps then one reduce vs classic MapReduce + final aggregator (from ``mfw.json``);
- ``results/peers.png``: time per system per application, grouped bars, log scale (from
  ``peers.json``); a skipped peer simply has no bar.

    python bench/compute/plot.py [--results DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SYSTEMS = ("tomus", "dask", "spark", "single_process")
LABELS = {"tomus": "tomus.compute", "dask": "Dask", "spark": "Spark local[2]",
          "single_process": "one process"}  # fmt: skip


def plot_mfw(doc: dict, out: Path) -> None:
    rows = doc["rows"]
    mib = [r["bytes"] / 2**20 for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label, marker in (
        ("tree_seconds", f"IterativeReduce tree (ratio {doc['ratio']})", "o"),
        ("all_maps_then_one_reduce_seconds", "all maps, then one reduce", "s"),
        ("mapreduce_plus_aggregator_seconds", "MapReduce + final aggregator", "^"),
    ):
        ax.plot(mib, [r[key] for r in rows], marker=marker, label=label)
    ax.set_xlabel("input (MiB)")
    ax.set_ylabel("seconds (best of runs)")
    ax.set_title(f"MostFrequentWords (top 10), {doc['machine']['cpus']} CPUs")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"wrote {out}")


def plot_peers(doc: dict, out: Path) -> None:
    secs = doc["seconds"]
    apps = list(secs)
    systems = [s for s in SYSTEMS if any(s in secs[a] for a in apps)]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, sys_ in enumerate(systems):
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(apps))]
        ys = [secs[a].get(sys_, 0.0) for a in apps]
        bars = ax.bar(xs, ys, width, label=LABELS.get(sys_, sys_))
        for b, y in zip(bars, ys):
            if y:
                ax.annotate(f"{y:.2g}", (b.get_x() + b.get_width() / 2, y), ha="center",
                            va="bottom", fontsize=6)  # fmt: skip
    ax.set_xticks(range(len(apps)), apps)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log scale)")
    title = f"Same inputs, answers cross-checked, {doc['machine']['cpus']} CPUs"
    if doc.get("spark_skipped"):
        title += " (Spark skipped)"
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    for name, fn in (("mfw", plot_mfw), ("peers", plot_peers)):
        src = args.results / f"{name}.json"
        if src.exists():
            fn(json.loads(src.read_text()), args.results / f"{name}.png")
        else:
            print(f"no {src}, skipped")


if __name__ == "__main__":
    main()
