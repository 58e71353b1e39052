#!/usr/bin/env bash
# bench/default_wc.sh BUILD_DIR: what the implicit default write concern costs (issues 13/15/18).
# A driver that sends no writeConcern gets {w: "majority"}: on a replica set of one, each write
# waits for a journal fsync (grouped: one fsync for all the writers waiting at the time). Per
# round, at 1 and 32 connections (BENCH_CONNS), loadgen insert with the URI's write concern
# (--wc uri): "default" (the URI has no w=, the driver sends none) against "w1" (w=1 in the
# URI), interleaved in one run (loadgen --alt-uri, BENCH_SLICE seconds per slice) on a
# `shale node --replSet rs0` and, when BENCH_ROUTER=1 (default), through a one-shard
# `shale up` cluster's router. Prints each run, medians and default / w1 throughput ratios
# with the node's journal fsyncs per insert (serverStatus wiredTiger.log).
# Env: BENCH_SECONDS (default 5), BENCH_ROUNDS (default 3), BENCH_CONNS ("1 32"),
# BENCH_SLICE (0.5), BENCH_ROUTER (1).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNS:-"1 32"}
SLICE=${BENCH_SLICE:-0.5}
ROUTER=${BENCH_ROUTER:-1}

BENCH_NAME=default-wc-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE" "$LOADGEN"

start_shale "$SHALE" --replSet rs0
node_uri="${uri}?directConnection=true"
targets="node|$node_uri|$node_uri"
if [ "$ROUTER" = 1 ]; then
  start_cluster "$SHALE" "$work/cluster" 1
  # the shard's port: config.shards host "shard0/127.0.0.1:P"
  shard=$(/usr/bin/python3 -c '
import sys, pymongo
c = pymongo.MongoClient(sys.argv[1])
print(c.config.shards.find_one()["host"].split("/")[1])' "$uri")
  targets="$targets router|$uri|mongodb://$shard/?directConnection=true"
fi
echo "== $(nproc) cores; $(uptime); ${SECS}s per mode per run, $ROUNDS rounds"
results="$work/results.jsonl"
: >"$results"

syncs() {
  /usr/bin/python3 -c '
import sys, pymongo
c = pymongo.MongoClient(sys.argv[1])
print(c.admin.command("serverStatus")["wiredTiger"]["log"]["log sync operations"])' "$1"
}

sep() { case "$1" in *\?*) echo "&" ;; *) echo "?" ;; esac; }

for round in $(seq 1 "$ROUNDS"); do
  for t in $targets; do
    IFS='|' read -r name turi suri <<<"$t"
    for c in $CONNS; do
      s0=$(syncs "$suri")
      out=$("$LOADGEN" --uri "$turi" --alt-uri "${turi}$(sep "$turi")w=1" --wc uri \
        --slice "$SLICE" --threads "$c" --seconds $((2 * SECS)) --op insert)
      s1=$(syncs "$suri")
      echo "$out" | grep '^{' | /usr/bin/python3 -c '
import json, sys
labels = {"a": "default", "b": "w1"}
for line in sys.stdin:
    r = json.loads(line)
    r["label"] = "%s %s" % (sys.argv[1], labels[r["mode"]])
    r["syncs"] = int(sys.argv[3]) - int(sys.argv[2])
    print(json.dumps(r))
    print("%s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us (load %s)"
          % (r["label"], r["threads"], r["ops_per_sec"], r["p50_us"], r["p99_us"],
             open("/proc/loadavg").read().split()[0]), file=sys.stderr)
    if r.get("errors"):
        sys.exit("errors in the run: %s" % r)
' "$name" "$s0" "$s1" >>"$results"
    done
  done
done

echo "== medians and ratios; load now: $(cut -d' ' -f1-3 /proc/loadavg)"
PYTHONPATH="$top/bench" /usr/bin/python3 - "$results" <<'PY'
import json, sys
from benchlib import load_medians
med = load_medians(sys.argv[1])
rows = [json.loads(l) for l in open(sys.argv[1])]
for k in sorted(med):
    m = med[k]
    print("median of %d: %s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us"
          % (m["rounds"], k[0], k[1], m["ops_per_sec"], m["p50_us"], m["p99_us"]))
for name in sorted({k[0].split()[0] for k in med}):
    for c in sorted({k[1] for k in med}):
        d, w = med.get(("%s default" % name, c)), med.get(("%s w1" % name, c))
        if d and w:
            ops = sum(r["ops"] for r in rows if r["label"].startswith(name + " ")
                      and r["threads"] == c)
            syncs = sum(r["syncs"] for r in rows if r["label"] == name + " default"
                        and r["threads"] == c)
            print("%s c=%d default / w1 throughput %.3f (%.0f / %.0f ops/s), p50 %.0f vs %.0f us;"
                  " journal fsyncs per insert (both modes) %.3f"
                  % (name, c, d["ops_per_sec"] / w["ops_per_sec"], d["ops_per_sec"],
                     w["ops_per_sec"], d["p50_us"], w["p50_us"], syncs / max(ops, 1)))
PY
