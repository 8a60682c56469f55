#!/usr/bin/env bash
# How long the manager's other writers wait while one big blob is deleted or its old versions
# expire. Starts `tomus up` (release build unless --bin), fills one blob with VERSIONS
# versions (S5's 8 clients, durable 4 KiB appends), then, while a client appends to another
# blob and creates blobs in a loop (one `tomus blob append` + `tomus blob create` per
# iteration, timed), either deletes the big blob (`blob delete`) or sets `--keep-last 3` on
# it. Prints one JSON object per scenario: the operation's time and the loop's iterations.
#
#   bench/manager_stalls.sh [--bin PATH] [--versions 100000] [--loop 60]
#       [--out bench/results/manager-stalls.json]
#
# Not a test: it takes a few minutes; it removes its data directories.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="" versions=100000 loop=60 out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin="$2"; shift 2 ;;
        --versions) versions="$2"; shift 2 ;;
        --loop) loop="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$bin" ]; then
    cargo build --release -p tomus-cli >&2
    bin=./target/release/tomus
fi
per_client=$(( (versions + 7) / 8 ))
work=$(mktemp -d /tmp/tomus-stalls.XXXX)
trap 'kill "${up:-0}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
head -c 4096 /dev/urandom > "$work/4k"
port=$(( 20000 + RANDOM % 20000 ))
results=()
for scenario in delete expire; do
    data="$work/data-$scenario"
    "$bin" up --addr "127.0.0.1:$port" --data "$data" > "$work/up-$scenario.log" 2>&1 &
    up=$!
    export TOMUS_ADDR="127.0.0.1:$port"
    for _ in $(seq 1 100); do "$bin" status > /dev/null 2>&1 && break; sleep 0.2; done
    echo "manager_stalls: $scenario: filling a blob with $versions versions" >&2
    "$bin" bench --cluster "$TOMUS_ADDR" --scenarios s5 --clients 8 --small-ops "$per_client" \
        --keep-data --runs 1 > /dev/null 2>&1
    big=$("$bin" blob list | awk 'NR==2 {print $1}')
    stored=$("$bin" blob list | awk 'NR==2 {print $2}')
    other=$("$bin" blob create)
    sleep 8  # let maintenance count the appends first
    (for _ in $(seq 1 "$loop"); do
        s=$(date +%s%N)
        "$bin" blob append "$other" "$work/4k" > /dev/null
        "$bin" blob create > /dev/null
        echo $(( ($(date +%s%N) - s) / 1000000 ))
    done > "$work/loop-$scenario.txt") &
    looping=$!
    sleep 0.5
    s=$(date +%s%N)
    if [ "$scenario" = delete ]; then
        "$bin" blob delete "$big" > /dev/null
    else
        "$bin" blob retention "$big" --keep-last 3 > /dev/null
        while [ "$("$bin" blob versions "$big" | wc -l)" -gt 10 ]; do sleep 0.02; done
    fi
    took=$(( ($(date +%s%N) - s) / 1000000 ))
    wait "$looping"
    sleep 3
    purge=$("$bin" status 2>/dev/null | grep -i "row purge" | sed 's/  */ /g' || true)
    results+=("$(python3 - "$scenario" "$stored" "$took" "$work/loop-$scenario.txt" "$purge" <<'PY'
import json, statistics, sys
scenario, stored, took, loop, purge = sys.argv[1:]
ms = [int(x) for x in open(loop).read().split()]
print(json.dumps({"scenario": scenario, "versions": int(stored), "operation_ms": int(took),
                  "loop_ms": {"max": max(ms), "median": statistics.median(ms), "all": ms},
                  "row_purge": purge.strip()}))
PY
)")
    echo "${results[-1]}" | cut -c1-200 >&2
    kill "$up"; wait "$up" 2>/dev/null || true
    rm -rf "$data"
    port=$((port + 1))
done
json="[$(IFS=,; echo "${results[*]}")]"
echo "$json"
if [ -n "$out" ]; then echo "$json" > "$out"; fi
