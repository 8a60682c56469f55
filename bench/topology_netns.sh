#!/usr/bin/env bash
# Storage-node selection on a real shaped network: 8 hosts in network namespaces behind 2
# bridges (80 Mbit/s host links, a 32 Mbit/s uplink, one 16 Mbit/s noisy host; needs root for
# `ip netns` and `tc`). Measures the matrix with `tomus topology measure`, then for Algorithm 2,
# random choice and latency clustering (5 seeds each) has every compute node write to its
# storage node at the same time and sums what arrived. JSON to bench/results/topology_netns.json.
#
#     bench/topology_netns.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/bench/results/topology_netns.json"
TOMUS_BENCH_OUT="$out" cargo test -p tomus-cli --test topology -- --ignored \
    bench_selection_strategies_on_shaped_switches --nocapture
