"""The storage core's headline figures from one `tomus bench` run, as ratios against the
baselines measured in the same run, next to the targets they must meet; with the tomus/HDFS
ratios of bench/hdfs.sh when its hdfs.json sits beside the run's JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def at(points: list[dict], clients: int) -> float | None:
    for p in points:
        if p["clients"] == clients:
            return float(p["median"])
    return None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def main(path: str) -> None:
    r = json.loads(Path(path).read_text())
    limit = r.get("loopback", {}).get("limit_mib_s")
    iperf = r.get("loopback", {}).get("iperf3", {}) or {}
    iperf4 = iperf.get("streams_4_mib_s")
    s2 = at(r.get("s2", {}).get("points", []), 8)
    ceiling = at(r.get("ceiling", {}).get("points", []), 8)
    s3w = at(r.get("s3", {}).get("write", []), 8)
    s4 = at(r.get("s4", {}).get("points", []), 8)
    s5 = at(r.get("s5", {}).get("append_4k", []), 8)
    read_latest = at(r.get("s5", {}).get("read_4k", []), 8)
    read_pinned = at(r.get("s5", {}).get("read_4k_pinned", []), 8)
    mgr = r.get("manager", {}).get("in_process_ops_s")
    summary = {
        "loopback_tcp_limit_mib_s": limit,
        "s2_read_n8_mib_s": s2,
        "s2_n8_fraction_of_loopback": {"value": ratio(s2, limit), "target": 0.6},
        "iperf3_4_streams_mib_s": iperf4,
        "s2_n8_fraction_of_iperf3_4_streams": ratio(s2, iperf4),
        "serving_ceiling_n8_mib_s": ceiling,
        "serving_ceiling_n8_fraction_of_loopback": ratio(ceiling, limit),
        "s2_n8_fraction_of_serving_ceiling": ratio(s2, ceiling),
        "s4_append_n8_mib_s": s4,
        "s3_write_n8_mib_s": s3w,
        "s4_over_s3_n8": {"value": ratio(s4, s3w), "target": 0.8},
        "s5_append_4k_n8_ops_s": {"value": s5, "target": 5000},
        "s5_read_4k_latest_n8_ops_s": read_latest,
        "s5_read_4k_pinned_n8_ops_s": read_pinned,
        "s5_pinned_over_latest_read_n8": ratio(read_pinned, read_latest),
        "manager_in_process_ops_s": {"value": mgr, "target": 50000},
        "manager_rpc_ops_s": r.get("manager", {}).get("rpc_ops_s"),
    }
    hdfs = Path(path).parent / "hdfs.json"
    if hdfs.exists():
        # Measured in another sitting than this run: only its own ratios are meaningful.
        summary["tomus_over_hdfs"] = json.loads(hdfs.read_text()).get(
            "ratios_tomus_over_hdfs"
        )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/bench.json")
