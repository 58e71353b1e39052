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
AUTH=${AUTH:-}
uri=$("$BIN" up --port "$PORT" --shards "$SHARDS" --dbpath "$DBPATH" ${AUTH:+--auth})
if [ -n "$AUTH" ] || [ -f "$DBPATH/keyfile" ]; then
  access="access control on (users required); bound to 127.0.0.1"
else
  access="no access control (anyone who reaches the port may do anything; AUTH=1 turns it on); bound to 127.0.0.1"
fi
cat <<MSG

Shale is running: $uri
  $access
  connect: mongosh "$uri"   (or any MongoDB driver)
  status:  $BIN status --dbpath $DBPATH
  stop:    $BIN down --dbpath $DBPATH
MSG
