#!/usr/bin/env bash
# Makespan of a memory-hungry application (KMeans passes, bench/memory_app.py) with collocated
# storage (a provider with memory-class data on every host) against dedicated storage
# (providers on 3 storage hosts), 8 hosts in network namespaces with shaped links, each host
# with its own CPU quota and memory limit in a cgroup. Needs root (`ip netns`, `tc`, cgroups)
# and a Python with tomus and numpy: TOMUS_BENCH_PYTHON (default .venv-test/bin/python, made
# by scripts/test.sh). JSON to bench/results/dedicated_app.json.
#
#     bench/dedicated_app.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/bench/results/dedicated_app.json"
TOMUS_BENCH_OUT="$out" cargo test -p tomus-cli --test memory_app_bench -- --ignored \
    bench_memory_app_dedicated_vs_collocated --nocapture
