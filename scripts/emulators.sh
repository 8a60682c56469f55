#!/usr/bin/env bash
# Installs the cloud storage emulators the backup tests run against, from the package
# registries, into a cache directory reused across runs:
#   azurite          Microsoft's Azure Storage emulator, from the npm registry (needs node, npm)
#   fake-gcs-server  a Google Cloud Storage emulator, a Go module (needs go)
# Usage: scripts/emulators.sh [azurite|fake-gcs-server|all]   (default: all)
# Cache: $TOMUS_EMULATORS, else ${XDG_CACHE_HOME:-~/.cache}/tomus/emulators; prints nothing
# when an emulator is already there. Exits non-zero when one asked for could not be installed.
set -euo pipefail

AZURITE_VERSION=3.37.0
FAKE_GCS_VERSION=v1.56.1

dir=${TOMUS_EMULATORS:-${XDG_CACHE_HOME:-$HOME/.cache}/tomus/emulators}
mkdir -p "$dir"
what=${1:-all}
status=0

azurite() {
    [ -x "$dir/azurite/node_modules/.bin/azurite-blob" ] && return 0
    if ! command -v npm >/dev/null; then
        echo "emulators: npm not found, Azurite not installed" >&2
        return 1
    fi
    echo "emulators: installing azurite@$AZURITE_VERSION into $dir/azurite" >&2
    mkdir -p "$dir/azurite"
    npm install --prefix "$dir/azurite" --no-audit --no-fund --loglevel=error \
        "azurite@$AZURITE_VERSION" >&2
}

fake_gcs() {
    [ -x "$dir/bin/fake-gcs-server" ] && return 0
    local go
    go=$(command -v go || true)
    [ -z "$go" ] && [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go
    if [ -z "$go" ]; then
        echo "emulators: go not found, fake-gcs-server not installed" >&2
        return 1
    fi
    echo "emulators: building fake-gcs-server@$FAKE_GCS_VERSION into $dir/bin" >&2
    GOBIN="$dir/bin" "$go" install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION" >&2
}

case "$what" in
    azurite) azurite || status=1 ;;
    fake-gcs-server) fake_gcs || status=1 ;;
    all)
        azurite || status=1
        fake_gcs || status=1
        ;;
    *)
        echo "usage: $0 [azurite|fake-gcs-server|all]" >&2
        exit 2
        ;;
esac
exit $status
