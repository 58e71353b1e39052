#!/usr/bin/env bash
# bench/txn_node.sh BUILD_DIR: what a multi-document transaction costs on one data node
# (issue 15 items 1 and 8, the participant's part), in one run. Starts a release
# `shale node --replSet rs0`; per round, interleaved, at 1 and 8 connections (BENCH_CONNS):
# loadgen ins2 (two insert_one, j:false) against txn2 (a driver's start_transaction, the same
# two inserts, commit). Prints medians of throughput and p50/p99 and the ratios txn2 / ins2.
# The router's cross-shard comparison (issue 15 item 8) runs the same ops through a router.
# Env: BENCH_SECONDS (default 3), BENCH_ROUNDS (default 3), BENCH_CONNS ("1 8").
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-3}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNS:-"1 8"}

BENCH_NAME=txn-node-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE" "$LOADGEN"

start_shale "$SHALE" --replSet rs0
echo "== $(nproc) cores; shale --replSet rs0 pid $shale_pid port $sport; ${SECS}s per run," \
  "$ROUNDS rounds"
results="$work/results.jsonl"
: >"$results"
for _ in $(seq 1 "$ROUNDS"); do
  for c in $CONNS; do
    for op in ins2 txn2; do
      "$LOADGEN" --uri "${uri}?directConnection=true" --threads "$c" --seconds "$SECS" \
        --op "$op" 2>/dev/null | grep "^{" >>"$results" || true
    done
  done
done
/usr/bin/python3 - "$results" "$CONNS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for c in sys.argv[2].split():
    m = {}
    for op in ("ins2", "txn2"):
        rs = [r for r in rows if r["op"] == op and r["threads"] == int(c)]
        m[op] = {k: statistics.median(r[k] for r in rs) for k in ("ops_per_sec", "p50_us", "p99_us")}
        m[op]["errors"] = sum(r["errors"] for r in rs)
        print("%s x%s: %.0f ops/s p50 %.0f us p99 %.0f us (errors %d)" % (
            op, c, m[op]["ops_per_sec"], m[op]["p50_us"], m[op]["p99_us"], m[op]["errors"]))
    print("txn2/ins2 x%s: throughput %.2f, p50 %.2f, p99 %.2f" % (
        c, m["txn2"]["ops_per_sec"] / m["ins2"]["ops_per_sec"],
        m["txn2"]["p50_us"] / m["ins2"]["p50_us"], m["txn2"]["p99_us"] / m["ins2"]["p99_us"]))
EOF
