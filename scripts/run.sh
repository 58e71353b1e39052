#!/usr/bin/env bash
# `make run`: start a local sharded cluster with `shale up` -- a config server, $SHARDS
# shards and a router on $PORT, all in $DBPATH -- and print its connection string. The
# processes keep running in the background (logs in $DBPATH/*.log) until
# `shale down --dbpath $DBPATH`; running it again on a running cluster just prints the
# connection string, and after a `down` it restarts the same cluster with its data.
set -euo pipefail
BIN=${1:?usage: run.sh path/to/shale}
PORT=${PORT:-27017}
SHARDS=${SHARDS:-2}
DBPATH=${DBPATH:-./shale-data}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
uri=$("$BIN" up --port "$PORT" --shards "$SHARDS" --dbpath "$DBPATH")
cat <<MSG

Shale is running: $uri
  connect: mongosh "$uri"   (or any MongoDB driver)
  status:  $BIN status --dbpath $DBPATH
  stop:    $BIN down --dbpath $DBPATH
MSG
