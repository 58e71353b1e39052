#!/usr/bin/env bash
# bench/retryable.sh BUILD_DIR: what retryable writes cost (issue 13 item 9), in one run.
# Starts a release `shale node --replSet rs0`; per round, interleaved, at 1 and 32
# connections (BENCH_CONNS): loadgen insert (a driver's insert_one, j:false) with
# retryWrites=true (the driver sends lsid + txnNumber; the node records each statement in
# its session's history and config.transactions) and with retryWrites=false; then the cost
# of answering a retry: rawins (the insert command with an explicit lsid and a new txnNumber
# each time: first executions) against retryins (the same command again and again: each one
# answered from the session's history, nothing written). Prints medians, server CPU per op
# (user + system of the node, from /proc) and the ratios: retryable / plain throughput
# (target >= 0.90) and retry answer / first execution. Stops the node by pid.
# Env: BENCH_SECONDS (default 5), BENCH_ROUNDS (default 5), BENCH_CONNS ("1 32").
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build-release}
case "$BUILD" in /*) ;; *) BUILD="$top/$BUILD" ;; esac
SHALE="$BUILD/src/main/shale"
LOADGEN="$BUILD/bench/loadgen"
SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-5}
CONNS=${BENCH_CONNS:-"1 32"}
for b in "$SHALE" "$LOADGEN"; do
  command -v "$b" >/dev/null || { echo "retryable bench: missing $b" >&2; exit 1; }
done

BENCH_NAME=retryable-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"

start_shale "$SHALE" --replSet rs0
echo "== $(nproc) cores; shale --replSet rs0 pid $shale_pid port $sport; ${SECS}s per run," \
  "$ROUNDS rounds"
results="$work/results.jsonl"
: >"$results"
tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run LABEL URI_OPTIONS OP THREADS: one loadgen run, its JSON line tagged with LABEL and the
# node's CPU per op.
run() {
  local label=$1 opts=$2 op=$3 c=$4 t0 t1 out
  t0=$(cpu_ticks "$shale_pid")
  out=$("$LOADGEN" --uri "${uri}?directConnection=true${opts}" --threads "$c" \
    --seconds "$SECS" --op "$op")
  t1=$(cpu_ticks "$shale_pid")
  echo "$out" | sed -n '1p' | /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
r["label"] = sys.argv[4]
r["server_cpu_us_per_op"] = round((int(sys.argv[2]) - int(sys.argv[1])) * 1e6 / int(sys.argv[3])
                                  / max(r["ops"], 1), 2)
print(json.dumps(r))
print("%s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; CPU per op: server %.2f us, client %.2f us"
      % (r["label"], r["threads"], r["ops_per_sec"], r["p50_us"], r["p99_us"],
         r["server_cpu_us_per_op"], r["client_cpu_us_per_op"]), file=sys.stderr)
if r.get("errors"):
    sys.exit("errors in the run: %s" % r)
' "$t0" "$t1" "$tck" "$label" >>"$results"
}

for round in $(seq 1 "$ROUNDS"); do
  for c in $CONNS; do
    # Alternate which goes first, so drift in the machine's speed hits both alike.
    if [ $((round % 2)) -eq 1 ]; then
      run retryable "&retryWrites=true" insert "$c"
      run plain "&retryWrites=false" insert "$c"
    else
      run plain "&retryWrites=false" insert "$c"
      run retryable "&retryWrites=true" insert "$c"
    fi
    run first-execution "" rawins "$c"
    run retry-answer "" retryins "$c"
  done
done

echo "== results (JSON), medians and ratios"
/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(json.dumps(r))
med = {}
for r in rows:
    med.setdefault((r["label"], r["threads"]), []).append(r)
for k in sorted(med, key=lambda k: (k[1], k[0])):
    rs = med[k]
    m = med[k] = {f: statistics.median(x[f] for x in rs) for f in rs[0]
                  if isinstance(rs[0][f], (int, float)) and f != "threads"}
    print("median of %d: %s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us; server CPU per op "
          "%.2f us, client %.2f us" % (len(rs), k[0], k[1], m["ops_per_sec"], m["p50_us"],
                                       m["p99_us"], m["server_cpu_us_per_op"],
                                       m["client_cpu_us_per_op"]))
for c in sorted({k[1] for k in med}):
    on, off = med.get(("retryable", c)), med.get(("plain", c))
    if on and off:
        r = on["ops_per_sec"] / off["ops_per_sec"]
        print("ratio c=%d retryable / plain insert throughput: %.3f = %.0f / %.0f (target >= "
              "0.90: %s); server CPU per insert %.2f vs %.2f us (+%.2f)"
              % (c, r, on["ops_per_sec"], off["ops_per_sec"], "met" if r >= 0.90 else "NOT met",
                 on["server_cpu_us_per_op"], off["server_cpu_us_per_op"],
                 on["server_cpu_us_per_op"] - off["server_cpu_us_per_op"]))
        # The driver's own share: with retryWrites it does more per insert (a session per
        # operation, a txnNumber, the retry bookkeeping), and on 2 cores the client and the
        # server share the CPUs. Were the server's extra work zero, throughput could reach at
        # most (client + server CPU off) / (client CPU on + server CPU off).
        bound = ((off["client_cpu_us_per_op"] + off["server_cpu_us_per_op"])
                 / (on["client_cpu_us_per_op"] + off["server_cpu_us_per_op"]))
        print("ratio c=%d bound from the driver alone (server work unchanged): %.3f; client CPU "
              "per insert %.2f (on) vs %.2f us (off)"
              % (c, bound, on["client_cpu_us_per_op"], off["client_cpu_us_per_op"]))
    first, retry = med.get(("first-execution", c)), med.get(("retry-answer", c))
    if first and retry:
        print("ratio c=%d retry answer / first execution: throughput %.3f (%.0f / %.0f ops/s), "
              "server CPU per op %.2f / %.2f us"
              % (c, retry["ops_per_sec"] / first["ops_per_sec"], retry["ops_per_sec"],
                 first["ops_per_sec"], retry["server_cpu_us_per_op"],
                 first["server_cpu_us_per_op"]))
PY
