#!/usr/bin/env bash
# Runs every C unit-test binary of a build tree (ctest), printing each binary's result.
set -euo pipefail
BUILD=${1:-build}
cd "$BUILD"
ctest --output-on-failure -j "$(nproc)"
