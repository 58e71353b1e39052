#!/usr/bin/env bash
# bench/cluster_time.sh BUILD_DIR: what signing and validating $clusterTime costs a point find
# through the router (issue 14 item 8), in one run. Starts a 2-shard cluster with `shale up`
# (test commands on), loads bench.findid (sharded on {_id: "hashed"}) through the router, then
# per round, interleaved (the order alternates), at each of BENCH_CONNS connections: loadgen
# findid (a driver's find_one by _id; the driver gossips the $clusterTime it got back on every
# request) with the router's test switch testTreatClientsAsUnauthorizedForClusterTime off
# (replies dummy-signed, nothing checked: MongoDB without authentication) and on (every reply
# signed with the current HMAC key, every request's $clusterTime validated: MongoDB with
# authentication). Prints medians, the router's CPU per operation and the ratio signed /
# unsigned throughput (target >= 0.95). Stops the cluster with `shale down`.
# Env: BENCH_SECONDS (3), BENCH_ROUNDS (3), BENCH_CONNS ("1 8"), BENCH_KEYS (20000).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-3}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNS:-"1 8"}
KEYS=${BENCH_KEYS:-20000}

BENCH_NAME=cluster-time-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE" "$LOADGEN"

cluster="$work/cluster"
start_cluster "$SHALE" "$cluster" 2 --setParameter enableTestCommands=1
router_pid=$(cat "$cluster/router.pid")
echo "== $(nproc) cores; 2-shard cluster, router port $port; ${SECS}s per run, $ROUNDS rounds," \
  "$KEYS keys"

"$LOADGEN" --uri "$uri" --threads 1 --seconds 0.2 --op findid --preload "$KEYS" \
  --shard hashed >/dev/null

switch() { # on|off: the router's test switch, and a check that replies are (un)signed
  /usr/bin/python3 - "$uri" "$1" <<'PY'
import sys
import pymongo
c = pymongo.MongoClient(sys.argv[1])
on = sys.argv[2] == "on"
c.admin.command("setParameter", 1, testTreatClientsAsUnauthorizedForClusterTime=on)
kid = c.admin.command("ping")["$clusterTime"]["signature"]["keyId"]
if (kid != 0) != on:
    sys.exit("router replies have keyId %d with the switch %s" % (kid, sys.argv[2]))
PY
}

results="$work/results.jsonl"
: >"$results"
run() { # LABEL THREADS: one findid run with the switch as LABEL says
  local label=$1 c=$2 before after
  switch "${label#findid }"
  before=$(awk '{print $14 + $15}' "/proc/$router_pid/stat")
  "$LOADGEN" --uri "$uri" --threads "$c" --seconds "$SECS" --op findid --keys "$KEYS" |
    sed -n '1p' >"$work/run.json"
  after=$(awk '{print $14 + $15}' "/proc/$router_pid/stat")
  /usr/bin/python3 -c '
import json, os, sys
r = json.load(open(sys.argv[2])); r["label"] = sys.argv[1]
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
r["router_cpu_us_per_op"] = round((int(sys.argv[4]) - int(sys.argv[3])) * tick_us /
                                  max(r["ops"], 1), 2)
if r.get("errors"):
    sys.exit("errors in the run: %s" % r)
print(json.dumps(r))
print("%-12s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; router CPU %.1f us/op"
      % (r["label"], r["threads"], r["ops_per_sec"], r["p50_us"], r["p99_us"],
         r["router_cpu_us_per_op"]), file=sys.stderr)' \
    "$label" "$work/run.json" "$before" "$after" >>"$results"
}

for round in $(seq 1 "$ROUNDS"); do
  for c in $CONNS; do
    if [ $((round % 2)) -eq 1 ]; then
      run "findid on" "$c"
      run "findid off" "$c"
    else
      run "findid off" "$c"
      run "findid on" "$c"
    fi
  done
done
switch off

echo "== results (JSON), medians and ratios"
PYTHONPATH="$top/bench" /usr/bin/python3 - "$results" <<'PY'
import sys
from benchlib import by_threads, load_medians
med = load_medians(sys.argv[1])
for k in by_threads(med):
    m = med[k]
    print("median of %d: %-12s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; router CPU %.1f us/op"
          % (m["rounds"], k[0], k[1], m["ops_per_sec"], m["p50_us"], m["p99_us"],
             m["router_cpu_us_per_op"]))
for c in sorted({k[1] for k in med}):
    on, off = med.get(("findid on", c)), med.get(("findid off", c))
    if on and off:
        r = on["ops_per_sec"] / off["ops_per_sec"]
        print("ratio c=%d signed+validated / unsigned throughput: %.3f = %.0f / %.0f (target >= "
              "0.95: %s); p50 %.1f vs %.1f us; router CPU %.1f vs %.1f us/op"
              % (c, r, on["ops_per_sec"], off["ops_per_sec"], "met" if r >= 0.95 else "NOT met",
                 on["p50_us"], off["p50_us"], on["router_cpu_us_per_op"],
                 off["router_cpu_us_per_op"]))
PY
