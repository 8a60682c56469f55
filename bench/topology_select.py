"""Storage-node selection strategies compared on synthetic clouds (DataSteward, Fig. 5).

A MODEL, not a measurement of transfers: each instance is a throughput matrix of N nodes
(default 50) in fault domains (switches; fast inside, slow between, with jitter) plus a few
noisy multi-tenant nodes (slow, jittery links, normal latency), like the paper's Azure
deployment. For K storage nodes, ``tomus topology select --matrix`` picks them by Algorithm 2
(``datasteward``), at random, and by latency k-medoids; the figure of merit is the cumulative
compute-to-storage throughput the matrix predicts for the balanced assignment (the same
scoring for every strategy). Prints JSON with medians over seeds and the ratios to
datasteward's.

    cargo build -p tomus-cli
    python3 bench/topology_select.py [--nodes 50] [--domains 5] [--noisy 3] [--seeds 20]
        [--tomus target/debug/tomus] [--out bench/results/topology_select.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import tempfile
from pathlib import Path

STRATEGIES = ["datasteward", "random", "latency"]


def instance(n: int, domains: int, noisy: int, seed: int) -> dict[str, object]:
    """A planted cloud: throughput MiB/s (~200 Mbit/s links inside a domain), stddev, RTT."""
    rng = random.Random(seed)
    domain = [i * domains // n for i in range(n)]
    bad = set(rng.sample(range(n), noisy))
    t = [[0.0] * n for _ in range(n)]
    sd = [[0.0] * n for _ in range(n)]
    lat = [[0.0] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            same = domain[a] == domain[b]
            if a in bad or b in bad:
                mean = rng.uniform(3.0, 10.0)
            elif same:
                mean = rng.uniform(21.0, 25.0)
            else:
                mean = rng.uniform(8.0, 16.0)
            t[a][b] = mean
            sd[a][b] = mean * (0.4 if a in bad or b in bad else 0.03)
            lat[a][b] = rng.uniform(0.2, 0.5) if same else rng.uniform(0.8, 1.6)
    return {
        "nodes": [f"vm{i}" for i in range(n)],
        "throughput": t,
        "stddev": sd,
        "latency_ms": lat,
    }


def select(
    tomus: str, matrix: Path, k: int, strategy: str, seed: int, min_thr: float
) -> float:
    out = subprocess.run(
        [
            tomus,
            "--json",
            "topology",
            "select",
            "--matrix",
            str(matrix),
            "--storage-nodes",
            str(k),
            "--strategy",
            strategy,
            "--seed",
            str(seed),
            "--min-throughput",
            str(min_thr),
            "--max-variability",
            "0.2",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out)["cumulative_throughput"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=50)
    p.add_argument("--domains", type=int, default=5)
    p.add_argument("--noisy", type=int, default=3)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--tomus", default="target/debug/tomus")
    p.add_argument("--out", default="bench/results/topology_select.json")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in [a.domains, 2 * a.domains, 3 * a.domains]:
            got: dict[str, list[float]] = {s: [] for s in STRATEGIES}
            for seed in range(a.seeds):
                path = Path(tmp) / f"m{k}-{seed}.json"
                path.write_text(json.dumps(instance(a.nodes, a.domains, a.noisy, seed)))
                for s in STRATEGIES:
                    got[s].append(select(a.tomus, path, k, s, seed, 10.0))
            med = {s: statistics.median(v) for s, v in got.items()}
            wins = {
                s: sum(d >= o - 1e-9 for d, o in zip(got["datasteward"], got[s]))
                for s in STRATEGIES[1:]
            }
            rows.append(
                {
                    "storage_nodes": k,
                    "compute_nodes": a.nodes - k,
                    "median_cumulative_mib_s": med,
                    "datasteward_vs": {
                        s: med["datasteward"] / med[s] for s in STRATEGIES[1:]
                    },
                    "datasteward_at_least_as_good_on": {
                        s: f"{wins[s]}/{a.seeds}" for s in STRATEGIES[1:]
                    },
                }
            )
    report = {
        "what": "model: cumulative compute->storage throughput predicted by synthetic "
        "matrices (not measured transfers)",
        "nodes": a.nodes,
        "domains": a.domains,
        "noisy": a.noisy,
        "seeds": a.seeds,
        "results": rows,
    }
    text = json.dumps(report, indent=2)
    Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
