#!/usr/bin/env bash
# Geo-replication lag under a steady write load over a rate-limited link: site A and site B
# (each a manager and a provider) in two network namespaces, B's link shaped with `tc` to
# LINK Mbit/s each way (needs root for `ip netns` and `tc`). For loads of 25%, 50% and 75% of
# the link, 20 appends per second on A for SECONDS while /runN is replicated to B; reports
# each version's delay (published on B minus published on A), the lag `tomus sites status`
# reported, and the catch-up time once the load stops. JSON to bench/results/geo_replication.json.
#
#     bench/geo_replication.sh [LINK_MBIT=40] [SECONDS=20]
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/bench/results/geo_replication.json"
TOMUS_BENCH_LINK_MBIT="${1:-40}" TOMUS_BENCH_SECONDS="${2:-20}" TOMUS_BENCH_OUT="$out" \
    cargo test -p tomus-cli --test sites_bench -- --ignored --nocapture
