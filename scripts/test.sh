#!/usr/bin/env bash
# The full test suite: Rust workspace tests, then the Python package (built from this checkout
# into .venv-test) with its linter, type checker and tests against real embedded clusters.
# The tests get a virtualenv of their own because they install a debug build of the extension:
# sharing .venv with scripts/demo.sh would leave a slow `tomus` there after every test run.
# Needs only Rust, Python >= 3.10 with pip and venv, and access to crates.io and PyPI (and,
# for the dashboard test, Debian's chromium, installed here when missing and run as root; for
# the Azure backup test, npm with the npm registry).
set -euo pipefail
cd "$(dirname "$0")/.."

# The Azure Blob emulator the Azure backup test starts (cached; a failed install only makes
# that test skip, saying why). fake-gcs-server is not installed here: its GCS test is ignored.
scripts/emulators.sh azurite || echo "emulators: Azurite not installed; its backup test will skip" >&2

# Every Rust test binary, built once and run three at a time: they mostly wait on the servers
# they start (scripts/rust_tests.py says more; --jobs or TOMUS_TEST_JOBS changes it).
scripts/rust_tests.py

python=${PYTHON:-python3}
venv=.venv-test
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
# uv installs the pinned wheels in about 30 s, where pip took 2m12 on 2 cores. Bytecode is
# compiled at install: where PYTHONDONTWRITEBYTECODE is set, every Python process the tests
# start (servers, Dask workers) would otherwise compile dask and pandas again (pytest took
# 2.5 min longer).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check uv==0.13.9
"$venv/bin/uv" pip install --quiet --compile-bytecode --python "$venv/bin/python" \
    -r python/requirements-test.txt
# A development build (the workspace dev profile) reusing the cargo build above.
VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop --quiet --locked -m python/Cargo.toml
"$venv/bin/ruff" check python
# Strict type checking of the package (configured in python/pyproject.toml), then the stubs of
# the native module against the module just built: its names, parameters and defaults.
(cd python && "../$venv/bin/mypy")
(cd python && "../$venv/bin/python" -m mypy.stubtest tomus._native)
# The dashboard test drives a real headless browser: Debian's chromium and its driver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "chromium and chromium-driver are missing (and not root): the dashboard test is skipped" >&2
    fi
fi
"$venv/bin/python" -m pytest -q python/tests
