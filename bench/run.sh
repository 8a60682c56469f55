#!/usr/bin/env bash
# Runs every benchmark scenario on an embedded cluster (release build) and plots the results.
# Usage: bench/run.sh [extra `tomus bench` options, e.g. --clients 1,8 --runs 1]
# Output: bench/results/bench.json, bench/results/summary.json and one PNG per scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p tomus-cli
# iperf3 gives the conventional loopback figure next to the built-in socket-pair limit.
if ! command -v iperf3 >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq iperf3) >/dev/null 2>&1 || echo "iperf3 unavailable; skipping that baseline" >&2
fi
mkdir -p bench/results
./target/release/tomus bench --out bench/results/bench.json "$@" > /dev/null
python3 bench/summary.py bench/results/bench.json | tee bench/results/summary.json
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet matplotlib
fi
bench/.venv/bin/python bench/plot.py bench/results/bench.json
