#!/usr/bin/env bash
# The demo main job from a fresh clone: builds the tomus Python package (the native extension
# and the `tomus` command, release profile) into .venv, then runs `tomus demo` — an embedded
# storage cluster and a Dask LocalCluster running MostFrequentWords, KMeans and A-Brain next to
# the data. Arguments go to `tomus demo` (e.g. --size 256MiB, --json).
# Needs only Rust, Python >= 3.10 with pip and venv, and access to crates.io and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r python/requirements-demo.txt
VIRTUAL_ENV="$PWD/.venv" .venv/bin/maturin develop --quiet --release --locked -m python/Cargo.toml
exec .venv/bin/tomus demo "$@"
