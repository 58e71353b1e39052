# bench/lib.sh -- shared by the benchmark scripts (sourced): a scratch folder removed at
# exit, free loopback ports, and starting shale / redis-server processes that are
# stopped by pid when the script exits. Set BENCH_NAME before sourcing (for messages).
BENCH_NAME=${BENCH_NAME:-bench}
work=$(mktemp -d "/tmp/shale-$BENCH_NAME.XXXXXX")
bench_pids=""

bench_cleanup() {
  local c
  for c in $bench_clusters; do
    "${c%%|*}" down --dbpath "${c#*|}" >/dev/null 2>&1 || true
  done
  for pid in $bench_pids; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $bench_pids; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap bench_cleanup EXIT

# bench_build [BUILD]: the build under test -- BUILD (the argument: a folder, relative to the
# checkout unless absolute; default build-release), with SHALE and LOADGEN the shale binary and
# the load generator inside it. Needs `top` (the checkout) set by the script.
bench_build() {
  BUILD=${1:-build-release}
  case "$BUILD" in /*) ;; *) BUILD="$top/$BUILD" ;; esac
  SHALE="$BUILD/src/main/shale"
  LOADGEN="$BUILD/bench/loadgen"
}

# bench_need COMMAND...: stops the script (exit 1, one message naming it) unless every COMMAND
# -- a path or a name on PATH -- can be run.
bench_need() {
  local b
  for b in "$@"; do
    command -v "$b" >/dev/null || { echo "$BENCH_NAME: missing $b" >&2; exit 1; }
  done
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_port PORT PID: until something listens on 127.0.0.1:PORT (fails if PID exits).
wait_port() {
  for _ in $(seq 1 300); do
    kill -0 "$2" 2>/dev/null || { echo "$BENCH_NAME: server pid $2 exited" >&2; return 1; }
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "$BENCH_NAME: nothing listens on port $1" >&2
  return 1
}

# start_shale BIN [ARGS...]: a `shale node` in $work; sets sport, shale_pid and uri.
start_shale() {
  local bin=$1
  shift
  sport=$(free_port)
  mkdir -p "$work/shale-data"
  "$bin" node --bind_ip 127.0.0.1 --port "$sport" --dbpath "$work/shale-data" \
    --logpath "$work/shale.log" "$@" &
  shale_pid=$!
  bench_pids="$bench_pids $shale_pid"
  wait_port "$sport" "$shale_pid"
  uri="mongodb://127.0.0.1:$sport/"
}

# start_redis: a redis-server without persistence in $work; sets rport and redis_pid.
start_redis() {
  rport=$(free_port)
  redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no \
    --logfile "$work/redis.log" --dir "$work" &
  redis_pid=$!
  bench_pids="$bench_pids $redis_pid"
  wait_port "$rport" "$redis_pid"
  redis-cli -p "$rport" ping >/dev/null
}

# A port P such that P..P+5 are free on the loopback (a `shale up` cluster's router, config
# server and shards).
free_port_block() {
  /usr/bin/python3 - <<'PY'
import socket
for base in range(24000, 60000, 7):
    socks = []
    try:
        for p in range(base, base + 6):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
PY
}

# start_cluster BIN DIR SHARDS [ARGS...]: `shale up` a cluster of SHARDS shards in DIR (extra
# ARGS go to `shale up`); sets port and uri (the router's). The cluster is stopped with
# `shale down` when the script exits.
bench_clusters=""
start_cluster() {
  local bin=$1 dir=$2 shards=$3
  shift 3
  port=$(free_port_block)
  bench_clusters="$bench_clusters $bin|$dir"
  "$bin" up --shards "$shards" --dbpath "$dir" --port "$port" "$@" >/dev/null
  uri="mongodb://127.0.0.1:$port/"
}
