#!/usr/bin/env bash
# `make run`: start a single `shale node` in ./shale-data and print its connection string.
set -euo pipefail
BIN=${1:?usage: run.sh path/to/shale}
PORT=${PORT:-27017}
mkdir -p shale-data
echo "Shale node listening: mongodb://127.0.0.1:${PORT}/  (Ctrl-C to stop)"
exec "$BIN" node --port "$PORT" --dbpath ./shale-data --replSet rs0
