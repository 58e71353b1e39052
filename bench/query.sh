#!/usr/bin/env bash
# bench/query.sh BUILD_DIR (third part of `make bench`): secondary indexes against their
# own baselines (issue 4 item 9). Starts a release `shale node --replSet rs0` on a free
# loopback port; loads BENCH_DOCS documents {_id, a (unique), b (100 values), pad} into
# bench.qidx (index {a: 1}) and bench.qscan (no index), then measures with loadgen:
# (a) equality find on 'a', indexed vs collection scan, and the speed-up; (b) range
# scans of BENCH_SPAN documents through the index (docs/s); (c) insert_one (j:false) at
# 1 and 8 connections into collections with 0, 1 and 3 secondary indexes, as ratios to
# 0 indexes; (d) through pymongo, on bench.qplan (BENCH_PLAN_DOCS documents {_id, a
# (unique), b (1000 values), s, t (strings)}, indexes a, b and {s, t}): an $or over a and
# b (OR of two IXSCANs) vs the same $or as a collection scan, and a range on s projected
# to {s, t} covered by the index (PROJECTION_COVERED, no document read) vs the same query
# with _id in the projection (FETCH). Stops the server by pid.
# Env: BENCH_SECONDS (default 5), BENCH_ROUNDS (default 3), BENCH_DOCS (default 100000),
# BENCH_SPAN (default 1000), BENCH_CONNS (insert connections, default "1 8"),
# BENCH_PLAN_DOCS (default 100000).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
DOCS=${BENCH_DOCS:-100000}
SPAN=${BENCH_SPAN:-1000}
CONNS=${BENCH_CONNS:-"1 8"}

BENCH_NAME=query-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE" "$LOADGEN"

start_shale "$SHALE" --replSet rs0

echo "== $(nproc) cores; shale --replSet rs0 pid $shale_pid port $sport; ${SECS}s per run," \
  "$ROUNDS rounds, $DOCS documents, range of $SPAN"
t0=$(date +%s.%N)
"$LOADGEN" --uri "$uri" --threads 1 --seconds 0.2 --op findeq --preload "$DOCS" >/dev/null
echo "loaded bench.qidx and bench.qscan in $(echo "$(date +%s.%N) - $t0" | bc) s"

results="$work/results.jsonl"
: >"$results"
tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run LABEL LOADGEN-ARGS...: one loadgen run, its JSON line (with "label" and the
# server's CPU per op) appended to the results.
run() {
  local label=$1 t0 t1 out
  shift
  t0=$(cpu_ticks "$shale_pid")
  out=$("$LOADGEN" --uri "$uri" --seconds "$SECS" "$@")
  t1=$(cpu_ticks "$shale_pid")
  echo "$out" | sed -n '1p' | /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
r["label"] = sys.argv[4]
r["server_cpu_us_per_op"] = round((int(sys.argv[2]) - int(sys.argv[1])) * 1e6 / int(sys.argv[3])
                                  / max(r["ops"], 1), 2)
print(json.dumps(r))
print("%s: %.0f ops/s (%.0f docs/s), p50 %.1f us, p99 %.1f us; server CPU per op %.2f us"
      % (r["label"], r["ops_per_sec"], r["docs_per_sec"], r["p50_us"], r["p99_us"],
         r["server_cpu_us_per_op"]), file=sys.stderr)
' "$t0" "$t1" "$tck" "$label" >>"$results"
}

for round in $(seq 1 "$ROUNDS"); do
  run "findeq indexed x1" --threads 1 --op findeq --coll qidx --keys "$DOCS"
  run "findeq collscan x1" --threads 1 --op findeq --coll qscan --keys "$DOCS"
  run "range $SPAN x1" --threads 1 --op range --coll qidx --keys "$DOCS" --span "$SPAN"
  for c in $CONNS; do
    for n in 0 1 3; do
      run "insert $n indexes x$c" --threads "$c" --op insertidx --coll "insidx$n" --indexes "$n"
    done
  done
done

# (d) planner shapes, timed in one client: each query repeated for SECS seconds.
/usr/bin/python3 - "$uri" "$SECS" "$ROUNDS" "${BENCH_PLAN_DOCS:-100000}" "$shale_pid" "$tck" \
  >>"$results" <<'PY'
import json, sys, time
import pymongo
uri, secs, rounds, ndocs, pid, tck = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
db = pymongo.MongoClient(uri).bench
db.qplan.drop()
for k in range(0, ndocs, 1000):
    db.qplan.insert_many([{"_id": i, "a": i, "b": i % 1000, "s": "k%08d" % i, "t": "v%d" % (i % 7)}
                          for i in range(k, min(k + 1000, ndocs))], ordered=False)
db.qplan.create_index("a")
db.qplan.create_index("b")
db.qplan.create_index([("s", 1), ("t", 1)])

def cpu():
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])

def shape(q):
    cmd = {"find": "qplan", "filter": q["filter"]}
    if "projection" in q:
        cmd["projection"] = q["projection"]
    if "hint" in q:
        cmd["hint"] = dict(q["hint"])
    e = db.command("explain", cmd)["queryPlanner"]["winningPlan"]
    out = []
    while e:
        out.append(e["stage"])
        e = e.get("inputStage") or (e.get("inputStages") or [None])[0]
    return ",".join(out)

def timed(label, q):
    lat, n, docs = [], 0, 0
    c0, t0 = cpu(), time.time()
    while time.time() - t0 < secs:
        s = time.time()
        docs += len(list(db.qplan.find(**q)))
        lat.append((time.time() - s) * 1e6)
        n += 1
    el = time.time() - t0
    lat.sort()
    r = {"label": label, "ops": n, "ops_per_sec": n / el, "docs_per_sec": docs / el,
         "p50_us": lat[len(lat) // 2], "p99_us": lat[min(len(lat) - 1, int(len(lat) * .99))],
         "server_cpu_us_per_op": round((cpu() - c0) * 1e6 / tck / max(n, 1), 2),
         "plan": shape(q)}
    print(json.dumps(r))
    print("%s: %.0f ops/s (%.0f docs/s), p50 %.1f us; plan %s"
          % (label, r["ops_per_sec"], r["docs_per_sec"], r["p50_us"], r["plan"]), file=sys.stderr)

orq = {"$or": [{"a": ndocs // 3}, {"b": 7}]}
lo = "k%08d" % (ndocs // 2)
hi = "k%08d" % (ndocs // 2 + 100)
for _ in range(rounds):
    timed("or indexed", {"filter": orq})
    timed("or collscan", {"filter": orq, "hint": [("$natural", 1)]})
    timed("range covered", {"filter": {"s": {"$gte": lo, "$lt": hi}},
                            "projection": {"_id": 0, "s": 1, "t": 1}})
    timed("range fetch", {"filter": {"s": {"$gte": lo, "$lt": hi}},
                          "projection": {"s": 1, "t": 1}})
PY

echo "== results (JSON), medians and ratios"
/usr/bin/python3 - "$results" "$CONNS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(json.dumps(r))
med = {}
for r in rows:
    med.setdefault(r["label"], []).append(r)
for k, rs in med.items():
    med[k] = {f: statistics.median(x[f] for x in rs)
              for f in ("ops_per_sec", "docs_per_sec", "p50_us", "p99_us", "server_cpu_us_per_op")}
    m = med[k]
    print("median of %d: %s: %.0f ops/s (%.0f docs/s), p50 %.1f us, p99 %.1f us; server CPU "
          "per op %.2f us" % (len(rs), k, m["ops_per_sec"], m["docs_per_sec"], m["p50_us"],
                              m["p99_us"], m["server_cpu_us_per_op"]))
ix, cs = med.get("findeq indexed x1"), med.get("findeq collscan x1")
if ix and cs:
    print("speed-up of the index on an equality find: %.0fx (%.0f / %.1f ops/s; p50 %.1f / "
          "%.1f us)" % (ix["ops_per_sec"] / cs["ops_per_sec"], ix["ops_per_sec"],
                        cs["ops_per_sec"], ix["p50_us"], cs["p50_us"]))
for a, b, what in (("or indexed", "or collscan", "an $or over two indexed fields"),
                  ("range covered", "range fetch", "a covered range (no FETCH)")):
    if a in med and b in med:
        print("speed-up of %s: %.1fx (%.0f / %.0f ops/s; p50 %.1f / %.1f us)"
              % (what, med[a]["ops_per_sec"] / med[b]["ops_per_sec"], med[a]["ops_per_sec"],
                 med[b]["ops_per_sec"], med[a]["p50_us"], med[b]["p50_us"]))
for k in med:
    if k.startswith("range") and k not in ("range covered", "range fetch"):
        print("range scan through the index: %.0f docs/s (%s)" % (med[k]["docs_per_sec"], k))
for c in sys.argv[2].split():
    base = med.get("insert 0 indexes x%s" % c)
    for n in (1, 3):
        m = med.get("insert %d indexes x%s" % (n, c))
        if base and m:
            print("ratio c=%s insert with %d secondary index%s / none: %.2f (%.0f / %.0f ops/s)"
                  % (c, n, "" if n == 1 else "es", m["ops_per_sec"] / base["ops_per_sec"],
                     m["ops_per_sec"], base["ops_per_sec"]))
PY
