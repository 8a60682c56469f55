"""Plot `tomus bench` JSON: one PNG per scenario, throughput against client count, with the
loopback TCP limit measured in the same run drawn as a reference line; and hdfs.png, the
tomus/HDFS ratios of bench/hdfs.sh, when its hdfs.json sits beside the run's JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def series(points: list[dict]) -> tuple[list[int], list[float]]:
    return [p["clients"] for p in points], [p["median"] for p in points]


def plot(
    title: str,
    lines: dict[str, list[dict]],
    unit: str,
    out: Path,
    references: dict[str, float],
) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in lines.items():
        xs, ys = series(points)
        ax.plot(xs, ys, marker="o", label=label)
    for (label, value), style in zip(references.items(), ["--", ":"]):
        ax.axhline(
            value, color="grey", linestyle=style, label=f"{label} ({value:.0f} MiB/s)"
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(path: str) -> None:
    results = json.loads(Path(path).read_text())
    out_dir = Path(path).parent
    loopback = results.get("loopback", {})
    # Reads are bounded by what loopback TCP can move; writes (fsynced) by the disk, so the
    # loopback references are drawn on the read plot only.
    references = {
        k: v
        for k, v in {
            "loopback socket-pair limit": loopback.get("limit_mib_s"),
            "iperf3, 4 streams": (loopback.get("iperf3") or {}).get("streams_4_mib_s"),
        }.items()
        if v
    }
    figures = {
        "s1": (
            "S1: one writer, growing blob",
            {"append 4 MiB": results.get("s1", {}).get("points", [])},
            "MiB/s",
        ),
        "s2": (
            "S2: N readers, distinct 64 MiB ranges of one blob",
            {
                "read": results.get("s2", {}).get("points", []),
                "bare sendfile, same reads (ceiling)": results.get("ceiling", {}).get(
                    "points", []
                ),
            },
            "MiB/s",
        ),
        "s3": (
            "S3: N writers, own blobs",
            {
                "write": results.get("s3", {}).get("write", []),
                "read back": results.get("s3", {}).get("read", []),
            },
            "MiB/s",
        ),
        "s4": (
            "S4: N appenders to one shared blob",
            {
                "append (shared blob)": results.get("s4", {}).get("points", []),
                "write (own blobs, S3)": results.get("s3", {}).get("write", []),
            },
            "MiB/s",
        ),
        "s5": (
            "S5: 4 KiB operations",
            {
                "append 4 KiB": results.get("s5", {}).get("append_4k", []),
                "read 4 KiB, latest": results.get("s5", {}).get("read_4k", []),
                "read 4 KiB, pinned version": results.get("s5", {}).get(
                    "read_4k_pinned", []
                ),
            },
            "ops/s",
        ),
    }
    for name, (title, lines, unit) in figures.items():
        lines = {k: v for k, v in lines.items() if v}
        if lines:
            target = out_dir / f"{name}.png"
            plot(title, lines, unit, target, references if name == "s2" else {})
            print(f"wrote {target}")
    if (out_dir / "hdfs.json").exists():
        plot_hdfs(out_dir / "hdfs.json", out_dir / "hdfs.png")


def plot_hdfs(hdfs: Path, out: Path) -> None:
    """One bar per compared point: tomus/HDFS (median of the per-round ratios), with 1
    (parity) and the targets marked."""
    ratios = json.loads(hdfs.read_text()).get("ratios_tomus_over_hdfs", {})
    names, values, targets = [], [], []
    for name, r in ratios.items():
        value = (r.get("median_of_rounds") or r["value"]) if isinstance(r, dict) else r
        if value is not None:
            names.append(name)
            values.append(value)
            targets.append(r.get("target") if isinstance(r, dict) else None)
    if not names:
        return
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(names) + 1.5))
    ys = list(range(len(names)))
    ax.barh(ys, values, color="tab:blue")
    for y, t in zip(ys, targets):
        if t:
            ax.plot([t, t], [y - 0.4, y + 0.4], color="tab:red")
    ax.axvline(1.0, color="grey", linestyle="--", label="parity")
    ax.plot([], [], color="tab:red", label="target")
    ax.set_xscale("log")  # ratios from 0.5 to 20+
    ax.set_yticks(ys, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tomus / HDFS (higher: tomus faster)")
    ax.set_title("tomus vs HDFS, alternating rounds, median ratio")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/bench.json")
