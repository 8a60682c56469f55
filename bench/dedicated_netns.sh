#!/usr/bin/env bash
# Dedicated vs collocated storage in network namespaces (needs root for `ip netns` and `tc`):
# 8 hosts behind 2 switches, host links shaped, 4, 8, 16, 32 and 50 clients spread over the 4
# compute hosts writing then reading files at
# once against providers on the 3 storage hosts of a plan (dedicated) and against a provider
# on every host with local-first placement (collocated), alternating rounds. JSON to
# bench/results/dedicated_netns.json.
#
#     bench/dedicated_netns.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/bench/results/dedicated_netns.json"
TOMUS_BENCH_OUT="$out" cargo test -p tomus-cli --test dedicated_bench -- --ignored \
    bench_dedicated_vs_collocated_clients --nocapture
