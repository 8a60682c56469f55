"""Figures of the dedicated-vs-collocated benchmarks (issue 13, DataSteward).

    python bench/plot_dedicated.py   # bench/results/dedicated_netns.png, dedicated_app.png

``dedicated_netns.json`` (bench/dedicated_netns.sh): MiB/s summed over N concurrent clients,
writes and reads, both modes. ``dedicated_app.json`` (bench/dedicated_app.sh): the
application's makespan per mode, median and every round.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

RESULTS = Path(__file__).parent / "results"


def clients() -> None:
    d = json.loads((RESULTS / "dedicated_netns.json").read_text())
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, op in zip(axes, ("write", "read"), strict=True):
        for mode, style in (("dedicated", "o-"), ("collocated", "s--")):
            pts = d[mode]
            ax.plot(
                [p["clients"] for p in pts],
                [p[f"{op}_mib_s"] for p in pts],
                style,
                label=mode,
            )
        ax.set_title(f"{op}s, {d['config']['file_mib_per_client']} MiB per client")
        ax.set_xlabel("concurrent clients (on 4 compute hosts)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("MiB/s, all clients (median of 3)")
    axes[0].legend()
    fig.suptitle(
        f"8 netns hosts, {d['config']['host_mbit']} Mbit/s links, "
        f"{d['config']['build_profile']} build, loaded 2-core machine",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(RESULTS / "dedicated_netns.png", dpi=110)


def app() -> None:
    path = RESULTS / "dedicated_app.json"
    if not path.exists():
        return
    d = json.loads(path.read_text())
    fig, ax = plt.subplots(figsize=(5, 3.5))
    modes = ["dedicated", "collocated"]
    ax.bar(modes, [d[m]["makespan_s"] for m in modes], color=["tab:blue", "tab:orange"])
    for i, m in enumerate(modes):
        ax.plot(
            [i] * len(d[m]["runs"]),
            d[m]["runs"],
            "k.",
            label="rounds" if i == 0 else None,
        )
    c = d["config"]
    ax.set_ylabel("makespan, s (median of 3)")
    ax.set_title(
        f"KMeans, {c['partition_mib_per_compute_host']} MiB per host; hosts "
        f"{c['host_cpu_percent']}% CPU, {c['host_mem_mib']} MiB",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "dedicated_app.png", dpi=110)


if __name__ == "__main__":
    clients()
    app()
