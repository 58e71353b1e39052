#!/usr/bin/env bash
# `make test`: the source checks (scripts/check.sh), unit tests, then integration tests.
# Exits non-zero if any fails.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$top/$BUILD" ;; esac
echo "== source checks"
bash "$top/scripts/check.sh"
echo "== unit tests"
bash "$top/scripts/unit.sh" "$BUILD"
echo "== integration tests"
SHALE_BIN="$BUILD/src/main/shale" bash "$top/scripts/integration.sh"
