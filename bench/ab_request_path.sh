#!/usr/bin/env bash
# bench/ab_request_path.sh BUILD_A BUILD_B [node|cluster] (issue 22, run by hand): two builds
# of the request path compared in one run, interleaved round by round, as the issue asks on
# a shared machine. node: a `shale node --replSet rs0` of each build, point finds by _id
# (loadgen findid on BENCH_KEYS preloaded documents) at BENCH_CONNS (32) connections; prints
# per run ops/s, p50/p99 and the server's CPU per find (user + sys from /proc: steadier
# than throughput under load). cluster: a one-shard `shale up` cluster of each build,
# point finds through the router and directly on its shard at BENCH_CONNS (8); prints the
# router's and the shard's CPU per find and routed / direct throughput. Ends with the
# medians of each build. Note `uptime` beside the figures: the load is printed per run.
# cluster mode also runs two do-nothing relays (bench/wire_relay.c, thread per connection and
# --epoll) in front of build B's shard, the floor under a router in each executor model, and
# ends with the issue's router ratios: router CPU per routed find / shard CPU per direct find
# (target <= 1.0) and routed / direct throughput (target >= 0.75), the relays' beside them.
# Env: BENCH_ROUNDS (5), BENCH_SECONDS (4), BENCH_CONNS, BENCH_KEYS (10000); BENCH_ARGS_A and
# BENCH_ARGS_B: extra flags for that build's processes (e.g. one build with and without
# "--setParameter serviceExecutor=shared"; `shale up` passes --setParameter on).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
abs() { case "$1" in /*) echo "$1" ;; *) echo "$top/$1" ;; esac; }
A=$(abs "${1:?BUILD_A}")
B=$(abs "${2:?BUILD_B}")
MODE=${3:-node}
ROUNDS=${BENCH_ROUNDS:-5}
SECS=${BENCH_SECONDS:-4}
KEYS=${BENCH_KEYS:-10000}
LOADGEN="$B/bench/loadgen"
if [ "$MODE" = node ]; then CONNS=${BENCH_CONNS:-32}; else CONNS=${BENCH_CONNS:-8}; fi
for b in "$A/src/main/shale" "$B/src/main/shale" "$LOADGEN"; do
  command -v "$b" >/dev/null || { echo "ab bench: missing $b" >&2; exit 1; }
done

BENCH_NAME=ab-request-path
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"

declare -A uri_main uri_direct pid_main pid_shard
for v in A B; do
  bin="${!v}/src/main/shale"
  args_var=BENCH_ARGS_$v
  read -r -a extra <<<"${!args_var:-}"
  if [ "$MODE" = node ]; then
    port=$(free_port)
    mkdir -p "$work/data-$v"
    "$bin" node --bind_ip 127.0.0.1 --port "$port" --dbpath "$work/data-$v" \
      --logpath "$work/$v.log" --replSet rs0 ${extra[@]+"${extra[@]}"} &
    pid_main[$v]=$!
    pid_shard[$v]=${pid_main[$v]}
    bench_pids="$bench_pids ${pid_main[$v]}"
    wait_port "$port" "${pid_main[$v]}"
    uri="mongodb://127.0.0.1:$port/"
    uri_main[$v]=$uri
    "$LOADGEN" --uri "$uri" --threads 1 --seconds 0.2 --op findid --preload "$KEYS" >/dev/null
  else
    start_cluster "$bin" "$work/$v" 1 ${extra[@]+"${extra[@]}"}
    uri_main[$v]=$uri
    uri_direct[$v]="mongodb://127.0.0.1:$((port + 2))/"
    pid_main[$v]=$(cat "$work/$v/router.pid")
    pid_shard[$v]=$(cat "$work/$v/shard0.pid")
    "$LOADGEN" --uri "$uri" --threads 1 --seconds 0.2 --op findid --preload "$KEYS" \
      --shard hashed >/dev/null
  fi
done
declare -A uri_relay pid_relay
if [ "$MODE" = cluster ]; then
  sport=${uri_direct[B]%/}
  sport=${sport##*:}
  for kind in thread epoll; do
    rport=$(free_port)
    if [ "$kind" = epoll ]; then
      "$B/bench/wire_relay" "$rport" "$sport" /tmp --epoll >/dev/null &
    else
      "$B/bench/wire_relay" "$rport" "$sport" >/dev/null &
    fi
    pid_relay[$kind]=$!
    bench_pids="$bench_pids ${pid_relay[$kind]}"
    wait_port "$rport" "${pid_relay[$kind]}"
    uri_relay[$kind]="mongodb://127.0.0.1:$rport/"
  done
fi
echo "== $(nproc) cores; $MODE; A=$A B=$B; ${SECS}s per run, $ROUNDS rounds, x$CONNS; $(uptime)"

results="$work/results.jsonl"
: >"$results"
switches() { # PID: the context switches (voluntary and not) of its threads so far
  cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s + 0}'
}
run() { # BUILD PATH URI [MAIN_PID]: one loadgen run; its JSON line with the CPU per op of the
  # front process (the router, a relay, the node) and the shard
  local v=$1 path=$2 u=$3 front=${4:-${pid_main[$1]}} before after
  before=$(awk '{printf "%s %s ", $14, $15}' "/proc/$front/stat" "/proc/${pid_shard[$v]}/stat")
  before="$before $(switches "$front")"
  "$LOADGEN" --uri "$u" --threads "$CONNS" --seconds "$SECS" --op findid --keys "$KEYS" \
    | sed -n 1p >"$work/run.json"
  after=$(awk '{printf "%s %s ", $14, $15}' "/proc/$front/stat" "/proc/${pid_shard[$v]}/stat")
  after="$after $(switches "$front")"
  /usr/bin/python3 - "$v" "$path" "$work/run.json" "$before" "$after" >>"$results" <<'PY'
import json, os, sys
v, path, f, before, after = sys.argv[1:]
r = json.load(open(f))
d = [(int(b) - int(a)) * 1e6 / os.sysconf("SC_CLK_TCK") / max(r["ops"], 1)
     for a, b in zip(before.split(), after.split())]
r.update(build=v, path=path, main_user=d[0], main_sys=d[1], shard_user=d[2], shard_sys=d[3],
         main_switches=(int(after.split()[4]) - int(before.split()[4])) / max(r["ops"], 1),
         load=float(open("/proc/loadavg").read().split()[0]))
print(json.dumps(r))
print("%s %-6s x%d: %7.0f ops/s p50 %6.0f us p99 %6.0f us (%.1fx); CPU us/op %s %.1f+%.1f%s;"
      " load %.1f" % (v, path, r["threads"], r["ops_per_sec"], r["p50_us"], r["p99_us"],
                      r["p99_us"] / max(r["p50_us"], 1), path if path in ("router", "relay",
                      "relay-epoll") else "server", d[0] if path != "direct" else d[2],
                      d[1] if path != "direct" else d[3],
                      " shard %.1f+%.1f" % (d[2], d[3]) if path != "direct" else "", r["load"]),
      "switches/op %.2f" % r["main_switches"],
      file=sys.stderr)
PY
}

for round in $(seq 1 "$ROUNDS"); do
  for v in A B; do
    if [ "$MODE" = node ]; then
      run "$v" node "${uri_main[$v]}"
    else
      run "$v" router "${uri_main[$v]}"
      run "$v" direct "${uri_direct[$v]}"
      if [ "$v" = B ]; then
        run B relay "${uri_relay[thread]}" "${pid_relay[thread]}"
        run B relay-epoll "${uri_relay[epoll]}" "${pid_relay[epoll]}"
      fi
    fi
  done
done

/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs) if xs else float("nan")
for v in "AB":
    for path in ("node", "router", "direct", "relay", "relay-epoll"):
        rs = [r for r in rows if r["build"] == v and r["path"] == path]
        if not rs:
            continue
        user = "shard" if path == "direct" else "main"
        print("median %s %-6s: %7.0f ops/s, p50 %5.0f us, p99/p50 %.1f, CPU us/op %.1f+%.1f = %.1f"
              "%s" % (v, path, med([r["ops_per_sec"] for r in rs]), med([r["p50_us"] for r in rs]),
                      med([r["p99_us"] / max(r["p50_us"], 1) for r in rs]),
                      med([r[user + "_user"] for r in rs]), med([r[user + "_sys"] for r in rs]),
                      med([r[user + "_user"] + r[user + "_sys"] for r in rs]),
                      "" if path == "direct" else
                      ", switches/op %.2f" % med([r["main_switches"] for r in rs])))
    rt = [r["ops_per_sec"] for r in rows if r["build"] == v and r["path"] == "router"]
    dt = [r["ops_per_sec"] for r in rows if r["build"] == v and r["path"] == "direct"]
    if rt and dt:
        print("median %s routed/direct throughput: %.2f" % (v, med(rt) / med(dt)))
    # The issue's router figures as ratios (issue 22): CPU per find of the front process
    # over the shard's per direct find, and throughput over direct, for the router and the
    # do-nothing relays (the floor) in the same run.
    dc = med([r["shard_user"] + r["shard_sys"] for r in rows
              if r["build"] == v and r["path"] == "direct"])
    for path in ("router", "relay", "relay-epoll"):
        rs = [r for r in rows if r["build"] == v and r["path"] == path]
        if rs and dt:
            print("ratio %s %-11s: CPU per find / shard's direct %.2f (target <= 1.0); "
                  "throughput / direct %.2f (target >= 0.75)"
                  % (v, path, med([r["main_user"] + r["main_sys"] for r in rs]) / dc,
                     med([r["ops_per_sec"] for r in rs]) / med(dt)))
PY
