#!/usr/bin/env bash
# bench/snapshot_read.sh BUILD_DIR: what readConcern "snapshot" costs a read through the router
# (issue 14 item 8), in one run. Starts a 2-shard cluster with `shale up`, loads bench.findid
# and bench.qidx (sharded on {_id: "hashed"}) through the router, then per round, interleaved
# (the order alternates), at each of BENCH_CONNS connections: loadgen findid (a driver's
# find_one by _id: one targeted shard) and range (a find of BENCH_SPAN documents on the
# indexed field 'a': both shards, a router cursor) with readConcernLevel=snapshot (the router
# picks atClusterTime, both shards read at it, the reply names it) and with the default
# (local). Prints medians, the router's and shards' CPU per operation and the ratios snapshot /
# local throughput (target >= 0.8). Stops the cluster with `shale down`.
# Env: BENCH_SECONDS (3), BENCH_ROUNDS (3), BENCH_CONNS ("1 8"), BENCH_KEYS (20000),
# BENCH_SPAN (100).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-3}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNS:-"1 8"}
KEYS=${BENCH_KEYS:-20000}
SPAN=${BENCH_SPAN:-100}

BENCH_NAME=snapshot-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE" "$LOADGEN"

cluster="$work/cluster"
start_cluster "$SHALE" "$cluster" 2
pids="$(cat "$cluster/router.pid") $(cat "$cluster/shard0.pid") $(cat "$cluster/shard1.pid")"
echo "== $(nproc) cores; 2-shard cluster, router port $port; ${SECS}s per run, $ROUNDS rounds," \
  "$KEYS keys, range span $SPAN"

"$LOADGEN" --uri "$uri" --threads 1 --seconds 0.2 --op findid --preload "$KEYS" \
  --shard hashed >/dev/null
"$LOADGEN" --uri "$uri" --threads 1 --seconds 0.2 --op range --preload "$KEYS" \
  --shard hashed >/dev/null

results="$work/results.jsonl"
: >"$results"
# cpu_ticks: utime + stime of the router, then of both shards, in clock ticks.
cpu_ticks() {
  local pid r=0 s=0 first=1
  for pid in $pids; do
    t=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    if [ $first -eq 1 ]; then r=$t; first=0; else s=$((s + t)); fi
  done
  echo "$r $s"
}

run() { # LABEL URI_OPTIONS THREADS ARGS...: one loadgen run, its JSON line tagged with LABEL
  local label=$1 opts=$2 c=$3 before after
  shift 3
  before=$(cpu_ticks)
  "$LOADGEN" --uri "${uri}${opts}" --threads "$c" --seconds "$SECS" "$@" | sed -n '1p' \
    >"$work/run.json"
  after=$(cpu_ticks)
  /usr/bin/python3 -c '
import json, os, sys
r = json.load(open(sys.argv[2])); r["label"] = sys.argv[1]
b, a = sys.argv[3].split(), sys.argv[4].split()
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
r["router_cpu_us_per_op"] = round((int(a[0]) - int(b[0])) * tick_us / max(r["ops"], 1), 2)
r["shards_cpu_us_per_op"] = round((int(a[1]) - int(b[1])) * tick_us / max(r["ops"], 1), 2)
if r.get("errors"):
    sys.exit("errors in the run: %s" % r)
print(json.dumps(r))
print("%-16s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; CPU us/op router %.1f, shards %.1f"
      % (r["label"], r["threads"], r["ops_per_sec"], r["p50_us"], r["p99_us"],
         r["router_cpu_us_per_op"], r["shards_cpu_us_per_op"]), file=sys.stderr)' \
    "$label" "$work/run.json" "$before" "$after" >>"$results"
}

for round in $(seq 1 "$ROUNDS"); do
  for c in $CONNS; do
    for op in findid range; do
      args=(--op "$op" --keys "$KEYS")
      [ "$op" = range ] && args+=(--span "$SPAN")
      if [ $((round % 2)) -eq 1 ]; then
        run "$op snapshot" "?readConcernLevel=snapshot" "$c" "${args[@]}"
        run "$op local" "" "$c" "${args[@]}"
      else
        run "$op local" "" "$c" "${args[@]}"
        run "$op snapshot" "?readConcernLevel=snapshot" "$c" "${args[@]}"
      fi
    done
  done
done

echo "== results (JSON), medians and ratios"
PYTHONPATH="$top/bench" /usr/bin/python3 - "$results" <<'PY'
import sys
from benchlib import by_threads, load_medians
med = load_medians(sys.argv[1])
for k in by_threads(med):
    m = med[k]
    print("median of %d: %-16s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; CPU us/op router "
          "%.1f, shards %.1f" % (m["rounds"], k[0], k[1], m["ops_per_sec"], m["p50_us"],
                                 m["p99_us"], m["router_cpu_us_per_op"],
                                 m["shards_cpu_us_per_op"]))
for c in sorted({k[1] for k in med}):
    for op in ("findid", "range"):
        s, l = med.get((op + " snapshot", c)), med.get((op + " local", c))
        if s and l:
            r = s["ops_per_sec"] / l["ops_per_sec"]
            print("ratio c=%d %s snapshot / local throughput: %.3f = %.0f / %.0f (target >= 0.8: "
                  "%s); CPU us/op router %.1f vs %.1f, shards %.1f vs %.1f"
                  % (c, op, r, s["ops_per_sec"], l["ops_per_sec"],
                     "met" if r >= 0.8 else "NOT met", s["router_cpu_us_per_op"],
                     l["router_cpu_us_per_op"], s["shards_cpu_us_per_op"],
                     l["shards_cpu_us_per_op"]))
PY
