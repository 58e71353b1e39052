#!/usr/bin/env bash
# `make test`: unit tests, then integration tests. Exits non-zero if any fails.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$top/$BUILD" ;; esac
echo "== unit tests"
bash "$top/scripts/unit.sh" "$BUILD"
echo "== integration tests"
SHALE_BIN="$BUILD/src/main/shale" bash "$top/scripts/integration.sh"
