#!/usr/bin/env bash
# `make bench`: Shale against Redis on this machine, in one run. Starts a `shale node`
# from BUILD_DIR (a release build) and a redis-server, each on a free loopback port,
# runs bench/loadgen (libmongoc) ping and hello, and redis-benchmark PING at the same
# concurrency, prints every result and the ratio Shale/Redis, and stops both by pid.
# Each result line also gives the CPU the server and the client spent per request:
# on a small shared machine the client's cost bounds what any server can show.
# The machine is shared, so the whole set runs BENCH_ROUNDS times interleaved and the
# ratios use the medians. Env: BENCH_SECONDS (per loadgen run, default 5),
# REDIS_REQUESTS (per redis test, default 500000), BENCH_ROUNDS (default 3),
# BENCH_CONNS (default "1 50").
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-5}
REQS=${REDIS_REQUESTS:-500000}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNS:-"1 50"}

BENCH_NAME=bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE" "$LOADGEN" redis-server redis-benchmark redis-cli

start_shale "$SHALE"
start_redis

redis_version=$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')
echo "== $(nproc) cores; shale pid $shale_pid port $sport;" \
  "redis $redis_version pid $redis_pid port $rport; ${SECS}s per loadgen run, $ROUNDS rounds"
results="$work/results.jsonl"
: >"$results"
tck=$(getconf CLK_TCK)
# CPU time (user + system, in clock ticks) a server process has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for round in $(seq 1 "$ROUNDS"); do
for c in $CONNS; do
  for op in ping hello; do
    t0=$(cpu_ticks "$shale_pid")
    out=$("$LOADGEN" --uri "mongodb://127.0.0.1:$sport/" --threads "$c" --seconds "$SECS" --op "$op")
    t1=$(cpu_ticks "$shale_pid")
    echo "$out" | sed -n '1p' | /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
r["server_cpu_us_per_op"] = round((int(sys.argv[2]) - int(sys.argv[1])) * 1e6 / int(sys.argv[3])
                                  / max(r["ops"], 1), 2)
print(json.dumps(r))
print("shale %s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; CPU per op: server %.2f us, "
      "client %.2f us" % (r["op"], r["threads"], r["ops_per_sec"], r["p50_us"], r["p99_us"],
                          r["server_cpu_us_per_op"], r["client_cpu_us_per_op"]), file=sys.stderr)
' "$t0" "$t1" "$tck" >>"$results"
  done
  t0=$(cpu_ticks "$redis_pid")
  TIMEFORMAT='%U %S'
  { time redis-benchmark -h 127.0.0.1 -p "$rport" -c "$c" -n "$REQS" -t ping --csv \
      >"$work/redis.csv"; } 2>"$work/redis.time"
  t1=$(cpu_ticks "$redis_pid")
  # CSV columns: test, rps, avg, min, p50, p95, p99, max (latencies in ms). Both tests
  # share the process times, split by their request counts (equal).
  /usr/bin/python3 -c '
import csv, json, sys
c, reqs, t0, t1, tck = (int(a) for a in sys.argv[1:6])
client = sum(float(x) for x in open(sys.argv[6]).read().split()) * 1e6
rows = [r for r in csv.reader(open(sys.argv[7])) if r and r[0] != "test"]
for row in rows:
    r = {"tool": "redis-benchmark", "op": row[0], "threads": c, "ops": reqs,
         "ops_per_sec": float(row[1]), "p50_us": float(row[4]) * 1000,
         "p99_us": float(row[6]) * 1000,
         "server_cpu_us_per_op": round((t1 - t0) * 1e6 / tck / (reqs * len(rows)), 2),
         "client_cpu_us_per_op": round(client / (reqs * len(rows)), 2)}
    print(json.dumps(r))
    print("redis %s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; CPU per op: server %.2f us, "
          "client %.2f us" % (r["op"], c, r["ops_per_sec"], r["p50_us"], r["p99_us"],
                              r["server_cpu_us_per_op"], r["client_cpu_us_per_op"]),
          file=sys.stderr)
 ' "$c" "$REQS" "$t0" "$t1" "$tck" "$work/redis.time" "$work/redis.csv" >>"$results"
done
done

echo "== results (JSON) and ratios Shale/Redis at the same connections"
/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(json.dumps(r))
keys = ("ops_per_sec", "p50_us", "p99_us", "server_cpu_us_per_op", "client_cpu_us_per_op")
med = {}
for r in rows:
    med.setdefault((r["tool"], r["op"], r["threads"]), []).append(r)
for k, rs in med.items():
    med[k] = {f: statistics.median(x[f] for x in rs) for f in keys}
    print("median of %d: %s %s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; CPU per op: "
          "server %.2f us, client %.2f us" % ((len(rs),) + k + tuple(med[k][f] for f in keys)))
for c in sorted({r["threads"] for r in rows}):
    shale = med.get(("loadgen", "ping", c))
    for test in ("PING_MBULK", "PING_INLINE"):
        redis = med.get(("redis-benchmark", test, c))
        if shale and redis:
            print("ratio c=%d shale ping / redis %s: %.2f (%.0f / %.0f ops/s); server CPU per "
                  "op %.2f / %.2f us, client CPU per op %.2f / %.2f us"
                  % (c, test, shale["ops_per_sec"] / redis["ops_per_sec"],
                     shale["ops_per_sec"], redis["ops_per_sec"],
                     shale["server_cpu_us_per_op"], redis["server_cpu_us_per_op"],
                     shale["client_cpu_us_per_op"], redis["client_cpu_us_per_op"]))
PY
