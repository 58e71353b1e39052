#!/usr/bin/env bash
# bench/ab_retryable.sh BUILD_A BUILD_B (issue 13, run by hand): the retryable / plain insert
# ratio of two builds in one run, on a shared machine. A `shale node --replSet rs0` of each
# build (minSnapshotHistoryWindowInSeconds BENCH_WINDOW, default 300); per round, each build
# in turn (the order alternating) gets one interleaved insert run at BENCH_CONNS (32)
# connections: loadgen insert_one with retryWrites=true and =false alternating every
# BENCH_SLICE (0.5) seconds for 2 x BENCH_SECONDS (--alt-uri), write concern {w: 1, j: false}
# given explicitly by loadgen, so the figure is the session's cost whatever the default
# concern. Prints per run and at the end per build the medians: throughput of each mode, the
# per-round ratio and the node's CPU per insert of each mode. Note `uptime` beside figures.
# Env: BENCH_ROUNDS (5), BENCH_SECONDS (5), BENCH_CONNS (32), BENCH_SLICE (0.5), BENCH_WINDOW.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
abs() { case "$1" in /*) echo "$1" ;; *) echo "$top/$1" ;; esac; }
A=$(abs "${1:?BUILD_A}")
B=$(abs "${2:?BUILD_B}")
ROUNDS=${BENCH_ROUNDS:-5}
SECS=${BENCH_SECONDS:-5}
CONNS=${BENCH_CONNS:-32}
SLICE=${BENCH_SLICE:-0.5}
WINDOW=${BENCH_WINDOW:-300}
LOADGEN="$B/bench/loadgen"
for b in "$A/src/main/shale" "$B/src/main/shale" "$LOADGEN"; do
  command -v "$b" >/dev/null || { echo "ab bench: missing $b" >&2; exit 1; }
done

BENCH_NAME=ab-retryable
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"

declare -A uri_of pid_of
for v in A B; do
  bin="${!v}/src/main/shale"
  port=$(free_port)
  mkdir -p "$work/data-$v"
  "$bin" node --bind_ip 127.0.0.1 --port "$port" --dbpath "$work/data-$v" \
    --logpath "$work/$v.log" --replSet rs0 \
    --setParameter "minSnapshotHistoryWindowInSeconds=$WINDOW" &
  pid_of[$v]=$!
  bench_pids="$bench_pids ${pid_of[$v]}"
  wait_port "$port" "${pid_of[$v]}"
  uri_of[$v]="mongodb://127.0.0.1:$port/?directConnection=true"
done
echo "== $(nproc) cores; A=$A B=$B; ${SECS}s x2 per run, $ROUNDS rounds, x$CONNS; $(uptime)"

results="$work/results.jsonl"
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for v in $order; do
    "$LOADGEN" --uri "${uri_of[$v]}&retryWrites=true" --alt-uri "${uri_of[$v]}&retryWrites=false" \
      --slice "$SLICE" --server-pid "${pid_of[$v]}" --threads "$CONNS" \
      --seconds $((2 * SECS)) --op insert | grep '^{' | /usr/bin/python3 -c '
import json, sys
rows = {}
for line in sys.stdin:
    r = json.loads(line)
    rows["retryable" if r["mode"] == "a" else "plain"] = r
on, off = rows["retryable"], rows["plain"]
load = float(open("/proc/loadavg").read().split()[0])
print(json.dumps({"build": sys.argv[1], "on": on["ops_per_sec"], "off": off["ops_per_sec"],
                  "cpu_on": on["server_cpu_us_per_op"], "cpu_off": off["server_cpu_us_per_op"],
                  "load": load}))
print("%s x%d: retryable %.0f, plain %.0f ops/s, ratio %.3f; server CPU per insert %.1f vs "
      "%.1f us (+%.1f); load %.1f" % (sys.argv[1], on["threads"], on["ops_per_sec"],
                                      off["ops_per_sec"], on["ops_per_sec"] / off["ops_per_sec"],
                                      on["server_cpu_us_per_op"], off["server_cpu_us_per_op"],
                                      on["server_cpu_us_per_op"] - off["server_cpu_us_per_op"],
                                      load), file=sys.stderr)' "$v" >>"$results"
  done
done

/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
for v in "AB":
    rs = [r for r in rows if r["build"] == v]
    print("median %s: retryable %.0f, plain %.0f ops/s; ratio %.3f (per round: %s); server CPU "
          "per insert %.1f vs %.1f us (+%.1f)"
          % (v, med([r["on"] for r in rs]), med([r["off"] for r in rs]),
             med([r["on"] / r["off"] for r in rs]),
             " ".join("%.3f" % (r["on"] / r["off"]) for r in rs),
             med([r["cpu_on"] for r in rs]), med([r["cpu_off"] for r in rs]),
             med([r["cpu_on"] - r["cpu_off"] for r in rs])))
PY
