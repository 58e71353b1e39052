#!/usr/bin/env bash
# bench/crud.sh BUILD_DIR (second part of `make bench`): Shale's CRUD path against its
# own baselines, in one run (issue 3 item 8). Starts a release `shale node --replSet rs0`
# and a redis-server on free loopback ports; runs loadgen (libmongoc) insert (j:false),
# insert100 (insert_many of 100) and findid (point find by _id on BENCH_KEYS preloaded
# documents) at 1 and 32 connections, the raw WiredTiger baseline (bench/wt_baseline:
# one insert per transaction, same 235-byte document, logged table, no sync per commit,
# like the oplog) at the same thread counts, and redis-benchmark GET on BENCH_KEYS
# preset keys; prints ops/s, p50/p99 and the ratios findid/GET (target >= 0.40 at 32)
# and insert/WiredTiger (target >= 0.25). Stops both servers by pid.
# Env: BENCH_SECONDS (default 5), BENCH_ROUNDS (default 3), BENCH_CONNS ("1 32"),
# BENCH_KEYS (default 100000), REDIS_REQUESTS (default 500000).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build-release}
case "$BUILD" in /*) ;; *) BUILD="$top/$BUILD" ;; esac
SHALE="$BUILD/src/main/shale"
LOADGEN="$BUILD/bench/loadgen"
WTB="$BUILD/bench/wt_baseline"
HOP_FLOOR="$BUILD/bench/hop_floor"
SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNS:-"1 32"}
KEYS=${BENCH_KEYS:-100000}
REQS=${REDIS_REQUESTS:-500000}
DOC_BYTES=235 # the benchmark document's BSON size (loadgen.c, wt_baseline.c)
for b in "$SHALE" "$LOADGEN" "$WTB" "$HOP_FLOOR" redis-server redis-benchmark redis-cli; do
  command -v "$b" >/dev/null || { echo "crud bench: missing $b" >&2; exit 1; }
done

BENCH_NAME=crud-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"

start_shale "$SHALE" --replSet rs0
start_redis

echo "== $(nproc) cores; shale --replSet rs0 pid $shale_pid port $sport; redis pid $redis_pid" \
  "port $rport; ${SECS}s per run, $ROUNDS rounds, $KEYS keys, ${DOC_BYTES}-byte documents"
# Point-read data: bench.findid with _id 0..KEYS-1, and Redis keys key:000000000000..
# (redis-benchmark's -r names) set by SET with -r KEYS, enough requests to fill nearly all.
"$LOADGEN" --uri "$uri" --threads 1 --seconds 0.2 --op findid --preload "$KEYS" >/dev/null
redis-benchmark -h 127.0.0.1 -p "$rport" -q -t set -r "$KEYS" -n $((KEYS * 8)) -d "$DOC_BYTES" \
  -c 32 >/dev/null
echo "redis keys: $(redis-cli -p "$rport" dbsize)"

results="$work/results.jsonl"
: >"$results"
tck=$(getconf CLK_TCK)
# CPU time (user + system, in clock ticks) a server process has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for round in $(seq 1 "$ROUNDS"); do
for c in $CONNS; do
  for op in insert insert100 findid; do
    extra=()
    [ "$op" = findid ] && extra=(--keys "$KEYS")
    t0=$(cpu_ticks "$shale_pid")
    out=$("$LOADGEN" --uri "$uri" --threads "$c" --seconds "$SECS" --op "$op" "${extra[@]}")
    t1=$(cpu_ticks "$shale_pid")
    echo "$out" | sed -n '1p' | /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
r["server_cpu_us_per_op"] = round((int(sys.argv[2]) - int(sys.argv[1])) * 1e6 / int(sys.argv[3])
                                  / max(r["ops"], 1), 2)
print(json.dumps(r))
print("shale %s x%d: %.0f ops/s (%.0f docs/s), p50 %.1f us, p99 %.1f us; CPU per op: server "
      "%.2f us, client %.2f us" % (r["op"], r["threads"], r["ops_per_sec"], r["docs_per_sec"],
                                   r["p50_us"], r["p99_us"], r["server_cpu_us_per_op"],
                                   r["client_cpu_us_per_op"]), file=sys.stderr)
' "$t0" "$t1" "$tck" >>"$results"
  done
  mkdir -p "$work/wt"
  wdir=$(mktemp -d "$work/wt/run.XXXXXX")
  TIMEFORMAT='%U %S'
  { time (cd "$wdir" && "$WTB" "$c" "$SECS" 1 >"$work/wt.out"); } 2>"$work/wt.time"
  rm -rf "$wdir"
  # Its CPU per insert (process user + system time, opening and closing included):
  # comparable with Shale's server CPU per op, which no client cost skews.
  /usr/bin/python3 -c '
import json, re, sys
c, secs = int(sys.argv[1]), float(sys.argv[2])
rate = float(re.search(r": ([0-9.]+) inserts/s", open(sys.argv[3]).read()).group(1))
cpu = sum(float(x) for x in open(sys.argv[4]).read().split()) * 1e6
r = {"tool": "wt_baseline", "op": "insert", "threads": c, "ops_per_sec": rate,
     "server_cpu_us_per_op": round(cpu / max(rate * secs, 1), 2)}
print(json.dumps(r))
print("wiredtiger insert x%d: %.0f ops/s (one insert per transaction, logged, no sync); "
      "CPU per op %.2f us" % (c, rate, r["server_cpu_us_per_op"]), file=sys.stderr)
' "$c" "$SECS" "$work/wt.out" "$work/wt.time" >>"$results"
  t0=$(cpu_ticks "$redis_pid")
  redis-benchmark -h 127.0.0.1 -p "$rport" -c "$c" -n "$REQS" -t get -r "$KEYS" --csv \
    >"$work/redis.csv"
  t1=$(cpu_ticks "$redis_pid")
  # CSV columns: test, rps, avg, min, p50, p95, p99, max (latencies in ms).
  /usr/bin/python3 -c '
import csv, json, sys
c, reqs, t0, t1, tck = (int(a) for a in sys.argv[1:6])
for row in (r for r in csv.reader(open(sys.argv[6])) if r and r[0] != "test"):
    r = {"tool": "redis-benchmark", "op": row[0], "threads": c, "ops": reqs,
         "ops_per_sec": float(row[1]), "p50_us": float(row[4]) * 1000,
         "p99_us": float(row[6]) * 1000,
         "server_cpu_us_per_op": round((t1 - t0) * 1e6 / tck / reqs, 2)}
    print(json.dumps(r))
    print("redis %s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; server CPU per op %.2f us"
          % (r["op"], c, r["ops_per_sec"], r["p50_us"], r["p99_us"], r["server_cpu_us_per_op"]),
          file=sys.stderr)
' "$c" "$REQS" "$t0" "$t1" "$tck" "$work/redis.csv" >>"$results"
done
done

# The floor under any networked insert: a bare request/reply round trip over loopback TCP
# with no work on either side (bench/hop_floor's "direct"), three runs.
for _ in 1 2 3; do "$HOP_FLOOR" 20000; done >"$work/hop.jsonl"

echo "== results (JSON), medians and ratios"
/usr/bin/python3 - "$results" "$work/hop.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
hops = [json.loads(l) for l in open(sys.argv[2])]
rtt = statistics.median(h["direct_p50_us"] for h in hops)
for r in rows:
    print(json.dumps(r))
med = {}
for r in rows:
    med.setdefault((r["tool"], r["op"], r["threads"]), []).append(r)
for k, rs in med.items():
    med[k] = {f: statistics.median(x[f] for x in rs) for f in rs[0]
              if isinstance(rs[0][f], (int, float)) and f != "threads"}
    m = med[k]
    line = "median of %d: %s %s x%d: %.0f ops/s" % (len(rs), k[0], k[1], k[2], m["ops_per_sec"])
    if k[0] == "loadgen" and k[1] == "insert100":
        line += " (%.0f docs/s)" % m["docs_per_sec"]
    if "p50_us" in m:
        line += ", p50 %.1f us, p99 %.1f us" % (m["p50_us"], m["p99_us"])
    if "server_cpu_us_per_op" in m:
        line += "; server CPU per op %.2f us" % m["server_cpu_us_per_op"]
    print(line)
def ratio(label, num, den, target, field_num="ops_per_sec"):
    if num and den:
        r = num[field_num] / den["ops_per_sec"]
        verdict = "" if target is None else (" (target >= %.2f: %s)"
                                             % (target, "met" if r >= target else "NOT met"))
        print("ratio %s: %.3f = %.0f / %.0f%s" % (label, r, num[field_num], den["ops_per_sec"],
                                                 verdict))
for c in sorted({r["threads"] for r in rows}):
    ratio("c=%d findid / redis GET" % c, med.get(("loadgen", "findid", c)),
          med.get(("redis-benchmark", "GET", c)), 0.40 if c == 32 else None)
    ratio("c=%d insert / wiredtiger" % c, med.get(("loadgen", "insert", c)),
          med.get(("wt_baseline", "insert", c)), 0.25)
    shale, wt = med.get(("loadgen", "insert", c)), med.get(("wt_baseline", "insert", c))
    if shale and wt:
        print("ratio c=%d insert CPU efficiency, wiredtiger CPU per insert / shale server CPU "
              "per insert: %.3f = %.2f / %.2f us" % (c, wt["server_cpu_us_per_op"]
                                                    / shale["server_cpu_us_per_op"],
                                                    wt["server_cpu_us_per_op"],
                                                    shale["server_cpu_us_per_op"]))
    if c == 1 and wt:
        budget = 1e6 / (0.25 * wt["ops_per_sec"])
        print("c=1 floor: the 0.25 target leaves %.1f us per acknowledged insert; a bare TCP "
              "request/reply round trip with no work on either side takes %.1f us at p50 here"
              % (budget, rtt))
    ratio("c=%d insert100 docs / wiredtiger" % c, med.get(("loadgen", "insert100", c)),
          med.get(("wt_baseline", "insert", c)), None, "docs_per_sec")
# Issue 22's node figures: server CPU per request against the references' in this run, and
# the tail over the median (targets at 32 connections).
def cpu_ratio(label, num, den, target):
    if num and den and den["server_cpu_us_per_op"] > 0:
        r = num["server_cpu_us_per_op"] / den["server_cpu_us_per_op"]
        print("issue 22 c=%d %s: %.2f = %.2f / %.2f us (target <= %.1f: %s)"
              % (c, label, r, num["server_cpu_us_per_op"], den["server_cpu_us_per_op"], target,
                 "met" if r <= target else "NOT met"))
for c in sorted({r["threads"] for r in rows}):
    cpu_ratio("server CPU per find / redis GET's", med.get(("loadgen", "findid", c)),
              med.get(("redis-benchmark", "GET", c)), 2.5)
    cpu_ratio("server CPU per insert / raw wiredtiger's", med.get(("loadgen", "insert", c)),
              med.get(("wt_baseline", "insert", c)), 4.0)
    for op in ("findid", "insert"):
        m = med.get(("loadgen", op, c))
        if m and m["p50_us"] > 0:
            r = m["p99_us"] / m["p50_us"]
            print("issue 22 c=%d %s p99/p50: %.1f = %.0f / %.0f us (target <= 4: %s)"
                  % (c, op, r, m["p99_us"], m["p50_us"], "met" if r <= 4 else "NOT met"))
PY
