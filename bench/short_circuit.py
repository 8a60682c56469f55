"""Short-circuit reads and writes against the same chunks through the providers' sockets.

Runs ``tomus bench`` (release build) on the S2 (parallel reads), S3 (parallel writes of one
blob each, fsync on, then read back) and S4 (appends to one blob) scenarios, alternating
round by round between the default (chunks of providers on this host read from and written
to their files) and ``TOMUS_LOCAL_READS=0 TOMUS_LOCAL_WRITES=0`` (every chunk through the
providers' sockets), so that the machine's noise hits both alike. Prints and writes JSON
with every run, the medians and the ratios default / sockets.

    cargo build --release -p tomus-cli
    python3 bench/short_circuit.py [--clients 8] [--per-client 256MiB] [--rounds 3]
        [--providers 4] [--out bench/results/short-circuit.json]

Not a test: it takes minutes and wants the machine to itself; ``tomus bench`` removes what
it wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {
    "short_circuit": {},
    "sockets": {"TOMUS_LOCAL_READS": "0", "TOMUS_LOCAL_WRITES": "0"},
}


def run(args: argparse.Namespace, env_extra: dict[str, str]) -> dict[str, float]:
    cmd = [args.tomus, "bench", "--json", "--scenarios", "s2,s3s4", "--runs", "1"]
    cmd += ["--clients", str(args.clients), "--per-client", args.per_client]
    cmd += ["--providers", str(args.providers)]
    env = {**os.environ, **env_extra}
    out = json.loads(
        subprocess.run(cmd, capture_output=True, check=True, env=env).stdout
    )
    return {
        "s2_read_mib_s": out["s2"]["points"][0]["median"],
        "s3_write_mib_s": out["s3"]["write"][0]["median"],
        "s3_read_back_mib_s": out["s3"]["read"][0]["median"],
        "s4_append_mib_s": out["s4"]["points"][0]["median"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tomus", default=str(ROOT / "target" / "release" / "tomus"))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--per-client", default="256MiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not Path(args.tomus).exists():
        sys.exit(f"{args.tomus} missing: cargo build --release -p tomus-cli")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        order = list(MODES) if r % 2 == 0 else list(MODES)[::-1]
        for mode in order:
            runs[mode].append(run(args, MODES[mode]))
            print(f"round {r + 1} {mode}: {runs[mode][-1]}", file=sys.stderr)
    keys = list(runs["short_circuit"][0])
    medians = {
        m: {k: statistics.median(x[k] for x in rs) for k in keys}
        for m, rs in runs.items()
    }
    report = {
        "config": {
            "clients": args.clients,
            "per_client": args.per_client,
            "rounds": args.rounds,
            "providers": args.providers,
            "fsync": True,
            "cores": os.cpu_count(),
        },
        "runs": runs,
        "median": medians,
        "ratio_short_circuit_to_sockets": {
            k: medians["short_circuit"][k] / medians["sockets"][k] for k in keys
        },
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
