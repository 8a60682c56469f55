"""Merges the alternating HDFS and tomus runs of bench/hdfs.sh into one JSON: per system the
median over rounds of every point, and the tomus/HDFS ratio of every point both measured.

Input: a directory of ``SYSTEM-PASS-ROUND.json`` files (SYSTEM hdfs or tomus, PASS main, large
or small), each one run (``--runs 1``) of ``java -jar hdfs-bench.jar`` or ``tomus bench``, in
the shape of ``tomus bench``'s output. The large pass's S3 and S4 are renamed ``s3_large`` and
``s4_large`` so that both sizes sit side by side.

    python3 bench/hdfs_compare.py WORKDIR bench/results/hdfs.json
    python3 bench/hdfs_compare.py --recompute bench/results/hdfs.json   # ratios only
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

# (scenario, series) pairs compared; tomus's S5 also has read_4k_pinned, kept but not paired.
SERIES = [
    ("s2", "points"),
    ("s3", "write"),
    ("s3", "read"),
    ("s4", "points"),
    ("s3_large", "write"),
    ("s3_large", "read"),
    ("s4_large", "points"),
    ("s5", "append_4k"),
    ("s5", "read_4k"),
]
# What the ratios mean, and the targets of issue 15 they answer to.
TARGETS = {
    "s3_large.write.n8": 1.3,
    "s5.append_4k.n8": 1.5,
    "s2.points.n8": 1.5,
    "s3.read.n8": 1.5,
    "s3_large.read.n8": 1.5,
}


def load(work: Path, system: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """All rounds of one system, each merged over its passes: (config of the main pass with the
    large and small passes' sizes, rounds)."""
    rounds: dict[int, dict[str, Any]] = {}
    config: dict[str, Any] = {}
    large_bytes = None
    small: dict[str, Any] = {}
    for f in sorted(work.glob(f"{system}-*.json")):
        _, pass_name, round_no = f.stem.split("-")
        r = json.loads(f.read_text())
        merged = rounds.setdefault(int(round_no), {})
        for key, value in r.items():
            if key == "config":
                if pass_name == "main":
                    config = dict(value)
                elif pass_name == "large":
                    large_bytes = value.get("per_client_bytes")
                elif pass_name == "small":
                    small = {"s5_clients": value.get("clients"),
                             "s5_appends_per_client": value.get("small_ops")}  # fmt: skip
                continue
            if pass_name == "large" and key in ("s3", "s4"):
                key += "_large"
            merged[key] = value
    if large_bytes is not None:
        config["large_per_client_bytes"] = large_bytes
    # The main pass's small_ops is its unused default: S5 runs in the small pass.
    config.pop("small_ops", None)
    config.update(small)
    return config, [rounds[k] for k in sorted(rounds)]


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Every series' points with the median over rounds (each round ran once per point)."""
    out: dict[str, Any] = {}
    if not rounds:
        return out
    for scenario, body in rounds[0].items():
        if not isinstance(body, dict):
            out[scenario] = body
            continue
        merged: dict[str, Any] = {}
        for series, points in body.items():
            if not (isinstance(points, list) and points and "clients" in points[0]):
                if series != "growth_curve_last_run":
                    merged[series] = points
                continue
            merged[series] = []
            for p in points:
                runs = [
                    q["median"]
                    for r in rounds
                    for q in r.get(scenario, {}).get(series, [])
                    if q["clients"] == p["clients"]
                ]
                merged[series].append(
                    {
                        "clients": p["clients"],
                        "median": round(statistics.median(runs), 3),
                        "runs": runs,
                        "unit": p["unit"],
                    }
                )
        out[scenario] = merged
    return out


def ratios(tomus: dict[str, Any], hdfs: dict[str, Any]) -> dict[str, Any]:
    """Per point: the ratio of the medians ("value") and, as the machine's noise drifts
    between rounds, the ratio within each round (the two systems ran back to back) and its
    median."""
    out: dict[str, Any] = {}
    for scenario, series in SERIES:
        t = {p["clients"]: p for p in tomus.get(scenario, {}).get(series, [])}
        h = {p["clients"]: p for p in hdfs.get(scenario, {}).get(series, [])}
        for n in sorted(set(t) & set(h)):
            name = f"{scenario}.{series}.n{n}"
            per_round = [
                round(a / b, 3) for a, b in zip(t[n]["runs"], h[n]["runs"]) if b
            ]
            hm = h[n]["median"]
            entry: dict[str, Any] = {
                "value": round(t[n]["median"] / hm, 3) if hm else None,
                "per_round": per_round,
                "median_of_rounds": (
                    round(statistics.median(per_round), 3) if per_round else None
                ),
            }
            if name in TARGETS:
                entry["target"] = TARGETS[name]
            out[name] = entry
    return out


def recompute(path: str) -> None:
    """Recomputes the ratios of an existing hdfs.json (its points keep every round)."""
    r = json.loads(Path(path).read_text())
    r["ratios_tomus_over_hdfs"] = ratios(r["tomus"], r["hdfs"])
    Path(path).write_text(json.dumps(r, indent=2) + "\n")


def main(work: str, out: str) -> None:
    hdfs_config, hdfs_rounds = load(Path(work), "hdfs")
    tomus_config, tomus_rounds = load(Path(work), "tomus")
    hdfs = medians(hdfs_rounds)
    tomus = medians(tomus_rounds)
    result = {
        "note": (
            "HDFS (MiniDFSCluster, hsync after every write) and tomus (embedded cluster, "
            "fsync on) alternated round by round under one lock; each point is the median "
            "over rounds. The machine was shared with other work: compare the ratios, not "
            "the absolute figures. S4 on HDFS: appenders take turns on one file (the lease); "
            "S5 on HDFS: one file per client, on tomus one shared blob."
        ),
        "rounds": len(tomus_rounds),
        "ratios_tomus_over_hdfs": ratios(tomus, hdfs),
        "hdfs": {"config": hdfs_config, **hdfs},
        "tomus": {"config": tomus_config, **tomus},
    }
    text = json.dumps(result, indent=2)
    Path(out).write_text(text + "\n")
    print(json.dumps(result["ratios_tomus_over_hdfs"], indent=2))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--recompute":
        recompute(sys.argv[2])
    elif len(sys.argv) == 3:
        main(sys.argv[1], sys.argv[2])
    else:
        sys.exit("usage: hdfs_compare.py WORKDIR OUT.json | --recompute OUT.json")
