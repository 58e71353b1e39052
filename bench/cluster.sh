#!/usr/bin/env bash
# bench/cluster.sh BUILD_DIR (part of `make bench`): the router's cost and the cluster's
# scaling, in one run (issue 6 item 6). Starts two local clusters with `shale up` -- one
# shard and two shards -- and runs loadgen (libmongoc) against them:
#  - point find by shard key (findid, bench.findid sharded by {_id: "hashed"}) through the
#    1-shard cluster's router vs directly on its shard (same data, same process): prints the
#    router's added latency in us and the ratio (target: router adds <= 30% at p50), and
#    through a do-nothing router (bench/wire_relay.c) in the same place: the floor any
#    router pays for the extra hop on this machine;
#  - a scatter find (range over a non-key indexed field, so every shard answers) on 2 shards
#    vs 1 shard;
#  - inserts through the router (bench.insert sharded by {_id: "hashed"}) with 1 and 2 shards.
#  - the same point finds through wire_relay --epoll (the shared executor's model, issue 22),
#    and the issue's router ratios: router CPU per routed find / shard CPU per direct find
#    (target <= 1.0) and routed / direct throughput (target >= 0.75), the relays' beside them.
# Env: BENCH_SECONDS (default 5), BENCH_KEYS (default 100000), BENCH_CONNS ("1 8"),
# BENCH_ROUNDS (default 3: interleaved router/relay/direct point-find runs, medians compared),
# BENCH_CLUSTER_ARGS (extra `shale up` flags, e.g. "--setParameter serviceExecutor=shared").
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build-release}
case "$BUILD" in /*) ;; *) BUILD="$top/$BUILD" ;; esac
SHALE="$BUILD/src/main/shale"
LOADGEN="$BUILD/bench/loadgen"
HOP_FLOOR="$BUILD/bench/hop_floor"
WIRE_RELAY="$BUILD/bench/wire_relay"
SECS=${BENCH_SECONDS:-5}
KEYS=${BENCH_KEYS:-100000}
CONNS=${BENCH_CONNS:-"1 8"}
ROUNDS=${BENCH_ROUNDS:-3}
for b in "$SHALE" "$LOADGEN" "$HOP_FLOOR" "$WIRE_RELAY"; do
  command -v "$b" >/dev/null || { echo "cluster bench: missing $b" >&2; exit 1; }
done

BENCH_NAME=cluster-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"

# up NAME SHARDS: start a cluster in $work/NAME; sets port_NAME.
up() {
  local extra
  read -r -a extra <<<"${BENCH_CLUSTER_ARGS:-}"
  start_cluster "$SHALE" "$work/$1" "$2" ${extra[@]+"${extra[@]}"}
  eval "port_$1=$port"
}

up one 1
up two 2
r1="mongodb://127.0.0.1:$port_one/"
r2="mongodb://127.0.0.1:$port_two/"
s1="mongodb://127.0.0.1:$((port_one + 2))/" # the one-shard cluster's shard
router1_pid=$(cat "$work/one/router.pid")
shard1_pid=$(cat "$work/one/shard0.pid")
# The floor in the real topology: a do-nothing router (bench/wire_relay.c) between the same
# driver and the same shard, on the shard's Unix socket as the router connects.
relay_port=$(free_port)
"$WIRE_RELAY" "$relay_port" "$((port_one + 2))" >/dev/null &
relay_pid=$!
bench_pids="$bench_pids $relay_pid"
wait_port "$relay_port" "$relay_pid"
rl="mongodb://127.0.0.1:$relay_port/"
# The same with one epoll set and a worker per core (the shared executor's model).
erelay_port=$(free_port)
"$WIRE_RELAY" "$erelay_port" "$((port_one + 2))" /tmp --epoll >/dev/null &
erelay_pid=$!
bench_pids="$bench_pids $erelay_pid"
wait_port "$erelay_port" "$erelay_pid"
rle="mongodb://127.0.0.1:$erelay_port/"
echo "== $(nproc) cores; 1-shard cluster router $port_one (shard $((port_one + 2))), 2-shard" \
  "cluster router $port_two; ${SECS}s per run, $KEYS keys"

results="$work/results.jsonl"
: >"$results"
# cpu_ticks PID...: "utime stime" clock ticks of each process, space-separated.
cpu_ticks() {
  local pid
  for pid in "$@"; do
    awk '{printf "%s %s ", $14, $15}' "/proc/$pid/stat"
  done
}

run() { # LABEL URI ARGS...: one loadgen run, its JSON line tagged with LABEL
  local label=$1 uri=$2 before after
  shift 2
  # The CPU the one-shard cluster's router and shard spend per operation (kernel and user
  # time from /proc, so the router's share can be told from the VM's wake-up costs).
  before=$(cpu_ticks "$router1_pid" "$shard1_pid" "$relay_pid" "$erelay_pid")
  "$LOADGEN" --uri "$uri" --seconds "$SECS" "$@" | sed -n '1p' >"$work/run.json"
  after=$(cpu_ticks "$router1_pid" "$shard1_pid" "$relay_pid" "$erelay_pid")
  /usr/bin/python3 -c '
import json, os, sys
r = json.load(open(sys.argv[2])); r["label"] = sys.argv[1]
before, after = sys.argv[3].split(), sys.argv[4].split()
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
names = ["router_user", "router_sys", "shard_user", "shard_sys", "relay_user", "relay_sys",
         "erelay_user", "erelay_sys"]
for i, n in enumerate(names):
    r[n + "_us_per_op"] = round((int(after[i]) - int(before[i])) * tick_us / max(r["ops"], 1), 2)
print(json.dumps(r))
print("%-26s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; CPU us/op router %.1f+%.1f, "
      "relay %.1f+%.1f, shard %.1f+%.1f (user+sys)" % (r["label"], r["threads"],
      r["ops_per_sec"], r["p50_us"], r["p99_us"], r["router_user_us_per_op"],
      r["router_sys_us_per_op"], r["relay_user_us_per_op"], r["relay_sys_us_per_op"],
      r["shard_user_us_per_op"], r["shard_sys_us_per_op"]), file=sys.stderr)' \
    "$label" "$work/run.json" "$before" "$after" >>"$results"
}

# Point finds: load through the router (sharded, all chunks on the one shard), then read
# the same documents through the router and directly.
"$LOADGEN" --uri "$r1" --threads 1 --seconds 0.2 --op findid --preload "$KEYS" \
  --shard hashed >/dev/null
"$LOADGEN" --uri "$r1" --threads 1 --seconds 0.2 --op range --preload "$KEYS" \
  --shard hashed >/dev/null
"$LOADGEN" --uri "$r2" --threads 1 --seconds 0.2 --op range --preload "$KEYS" \
  --shard hashed >/dev/null
for c in $CONNS; do
  # Router and direct alternate, ROUNDS times: the VM's speed drifts within minutes, so
  # the comparison uses the medians of interleaved runs.
  for _ in $(seq "$ROUNDS"); do
    run "findid router" "$r1" --threads "$c" --op findid --keys "$KEYS"
    run "findid relay" "$rl" --threads "$c" --op findid --keys "$KEYS"
    run "findid relay-epoll" "$rle" --threads "$c" --op findid --keys "$KEYS"
    run "findid direct" "$s1" --threads "$c" --op findid --keys "$KEYS"
  done
  run "scatter range 1 shard" "$r1" --threads "$c" --op range --keys "$KEYS" --span 100
  run "scatter range 2 shards" "$r2" --threads "$c" --op range --keys "$KEYS" --span 100
  run "insert 1 shard" "$r1" --threads "$c" --op insert --shard hashed
  run "insert 2 shards" "$r2" --threads "$c" --op insert --shard hashed
done

# The floor: what one extra process hop that does no work adds on this machine, now
# (three runs, median), so the router's overhead can be read against it.
for _ in 1 2 3; do "$HOP_FLOOR" 20000; done >"$work/hop.jsonl"

echo "== results (JSON) and ratios"
/usr/bin/python3 - "$results" "$work/hop.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
hops = [json.loads(l) for l in open(sys.argv[2])]
for h in hops:
    print(json.dumps(h))
floor = statistics.median(h["hop_p50_us"] for h in hops)
echo = statistics.median(h["direct_p50_us"] for h in hops)
by = {}
for r in rows:
    by.setdefault((r["label"], r["threads"]), []).append(r)
# Medians of the repeated runs (point finds), the single run otherwise.
fields = ("p50_us", "p99_us", "ops_per_sec", "router_user_us_per_op", "router_sys_us_per_op",
          "shard_user_us_per_op", "shard_sys_us_per_op", "relay_user_us_per_op",
          "relay_sys_us_per_op", "erelay_user_us_per_op", "erelay_sys_us_per_op",
          "client_cpu_us_per_op")
by = {k: {f: statistics.median(x.get(f, 0) for x in rs) for f in fields} for k, rs in by.items()}
for r in rows:
    print(json.dumps(r))
for c in sorted({r["threads"] for r in rows}):
    rt, d = by.get(("findid router", c)), by.get(("findid direct", c))
    if rt and d:
        add = rt["p50_us"] - d["p50_us"]
        pct = 100.0 * add / d["p50_us"]
        runs = sum(1 for r in rows if r["label"] == "findid router" and r["threads"] == c)
        print("c=%d router overhead on a targeted point find: +%.1f us at p50 (%.0f%%; target "
              "<= 30%%: %s); throughput router/direct %.2f (medians of %d interleaved runs)" % (
                  c, add, pct, "met" if pct <= 30 else "NOT met",
                  rt["ops_per_sec"] / d["ops_per_sec"], runs))
        rl = by.get(("findid relay", c))
        if rl:
            radd = rl["p50_us"] - d["p50_us"]
            print("c=%d a do-nothing router (wire_relay) in the same place adds +%.1f us at p50 "
                  "(%.0f%% of the direct find): Shale's router adds %.1f us above it; relay CPU "
                  "%.1f+%.1f us per find (user+sys)" % (
                      c, radd, 100.0 * radd / d["p50_us"], add - radd,
                      rl["relay_user_us_per_op"], rl["relay_sys_us_per_op"]))
        print("c=%d CPU per point find (medians, us, user+sys): router %.1f+%.1f; shard %.1f+%.1f "
              "via the router vs %.1f+%.1f direct; client %.1f vs %.1f" % (
                  c, rt["router_user_us_per_op"], rt["router_sys_us_per_op"],
                  rt["shard_user_us_per_op"], rt["shard_sys_us_per_op"],
                  d["shard_user_us_per_op"], d["shard_sys_us_per_op"],
                  rt["client_cpu_us_per_op"], d["client_cpu_us_per_op"]))
        # The issue's router figures as ratios (issue 22), the relays' (the floor) beside.
        dcpu = d["shard_user_us_per_op"] + d["shard_sys_us_per_op"]
        for label, who in (("router", "router"), ("relay", "relay"),
                           ("relay-epoll", "erelay")):
            x = by.get(("findid " + label, c))
            if x and dcpu > 0:
                print("c=%d ratio %-11s: CPU per find / shard's per direct find %.2f (target <= "
                      "1.0); throughput / direct %.2f (target >= 0.75)" % (
                          c, label, (x[who + "_user_us_per_op"] + x[who + "_sys_us_per_op"]) /
                          dcpu, x["ops_per_sec"] / d["ops_per_sec"]))
        if c == 1:
            print("c=1 floor: one extra hop doing no work adds %.1f us at p50 here (a bare TCP "
                  "round trip is %.1f us) = %.0f%% of the direct find on its own; the router "
                  "adds %.1f us above that floor" % (floor, echo, 100.0 * floor / d["p50_us"],
                                                      add - floor))
    for what in ("scatter range", "insert"):
        one, two = by.get((what + " 1 shard", c)), by.get((what + " 2 shards", c))
        if one and two:
            print("c=%d %s: 2 shards / 1 shard = %.2f (%.0f vs %.0f ops/s)" % (
                c, what, two["ops_per_sec"] / one["ops_per_sec"], two["ops_per_sec"],
                one["ops_per_sec"]))
PY
