#!/usr/bin/env bash
# Runs the pytest integration suite against real `shale` processes (Debian's pymongo).
# SHALE_BIN must point at the binary. Extra arguments go to pytest. SHALE_ROUTER_ARGS adds
# arguments to every router the tests start (e.g. "--setParameter serviceExecutor=shared").
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SHALE_BIN:?SHALE_BIN must point at the shale binary}"
export SHALE_BIN
bash "$top/tests/integration/node_deps.sh"
cd "$top/tests/integration"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=25 "$@"
