#!/usr/bin/env bash
# HDFS next to tomus: the S2-S5 access patterns on a MiniDFSCluster (Hadoop 3.4.1, 4 DataNodes,
# in one JVM, bench/hdfs/) and on tomus bench's embedded cluster (release build), the two
# alternating round by round under one lock so that the machine's noise hits both alike.
# Medians over the rounds and the tomus/HDFS ratios go to bench/results/hdfs.json.
#
# Usage: bench/hdfs.sh [--clients 1,8] [--per-client 64MiB] [--large 256MiB]
#                      [--large-clients 8] [--s5-clients 8] [--small-ops 3000] [--rounds 3]
#                      [--out bench/results/hdfs.json]
# Passes per round: S2 and S3/S4 at --per-client for --clients; S3/S4 at --large for
# --large-clients (omitted with --large 0); S5 for --s5-clients, --small-ops appends each (3,000:
# long enough that tomus's maintenance rounds, which count every new version, fall inside the
# measured window as they do in sustained use; at 1,000 most of that work came after it).
# Needs java (11+) and mvn: the Hadoop jars come from Maven Central once and are cached in
# ~/.m2. Without them it says so and exits 0. Everything both systems write is removed as
# each run ends.
set -euo pipefail
cd "$(dirname "$0")/.."

clients=1,8 per_client=64MiB large=256MiB large_clients=8 s5_clients=8 small_ops=3000
rounds=3 out=bench/results/hdfs.json
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) clients=$2 ;;
    --per-client) per_client=$2 ;;
    --large) large=$2 ;;
    --large-clients) large_clients=$2 ;;
    --s5-clients) s5_clients=$2 ;;
    --small-ops) small_ops=$2 ;;
    --rounds) rounds=$2 ;;
    --out) out=$2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "bench/hdfs.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null; then
    echo "bench/hdfs.sh: skipped: $tool not found (Debian: apt-get install openjdk-17-jdk-headless maven)" >&2
    exit 0
  fi
done

# Offline first: once ~/.m2 holds the jars and plugins this needs no network.
(cd bench/hdfs && { mvn -q -B -o -Dstyle.color=never package 2>/dev/null || mvn -q -B -Dstyle.color=never package; })
jar=bench/hdfs/target/hdfs-bench-0.1.0.jar
cargo build --release -p tomus-cli
tomus=./target/release/tomus

# One benchmark at a time on this machine: other users of the lock wait for us and we for them.
exec 9>/tmp/tomus-bench.lock
echo "bench/hdfs.sh: waiting for /tmp/tomus-bench.lock" >&2
flock 9

# The JVM's temp dir (the MiniDFSCluster's data) lives inside: an interrupted run leaves nothing.
work=$(mktemp -d /tmp/hdfs-vs-tomus.XXXXXX)
mkdir "$work/tmp"
trap 'rm -rf "$work"' EXIT

passes=("main:--clients $clients --per-client $per_client --scenarios s2,s3s4")
if [ "$large" != 0 ]; then
  passes+=("large:--clients $large_clients --per-client $large --scenarios s3s4")
fi
passes+=("small:--clients $s5_clients --small-ops $small_ops --scenarios s5")

for round in $(seq 1 "$rounds"); do
  # HDFS: every pass in one JVM, on one MiniDFSCluster (starting one takes tens of seconds).
  hdfs_args=()
  for pass in "${passes[@]}"; do
    name=${pass%%:*} opts=${pass#*:}
    [ ${#hdfs_args[@]} -eq 0 ] || hdfs_args+=(--then)
    # shellcheck disable=SC2206 # opts is a list of options
    hdfs_args+=(--runs 1 $opts --out "$work/hdfs-$name-$round.json")
  done
  echo "bench/hdfs.sh: round $round/$rounds: hdfs" >&2
  java -Xmx2g -Djava.io.tmpdir="$work/tmp" -jar "$jar" "${hdfs_args[@]}" >/dev/null
  for pass in "${passes[@]}"; do
    name=${pass%%:*} opts=${pass#*:}
    echo "bench/hdfs.sh: round $round/$rounds: tomus, $name" >&2
    # shellcheck disable=SC2086
    "$tomus" bench --runs 1 $opts --out "$work/tomus-$name-$round.json" >/dev/null
  done
  # After every round, so that an interrupted sitting still leaves the rounds it finished.
  mkdir -p "$(dirname "$out")"
  python3 bench/hdfs_compare.py "$work" "$out" >/dev/null
done
echo "bench/hdfs.sh: wrote $out; tomus/HDFS:" >&2
python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["ratios_tomus_over_hdfs"], indent=2))' "$out"
