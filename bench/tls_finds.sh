#!/usr/bin/env bash
# bench/tls_finds.sh BUILD_DIR: point finds over TLS against plain (issue 19 item 8, target
# >= 0.7x at 32 connections). One release `shale node --tlsMode preferTLS` (it accepts both
# on its port) with a CA, server and client certificates made here with openssl; loadgen
# (libmongoc) loads bench.findid, then runs findid at BENCH_CONNS connections over plain
# TCP and over TLS (tls=true, tlsCAFile, tlsCertificateKeyFile), interleaved BENCH_ROUNDS
# times; prints each run's JSON line and the median ratio per connection count. Stops the
# server by pid. Env: BENCH_SECONDS (default 5), BENCH_ROUNDS (default 3), BENCH_CONNS
# (default "32"), BENCH_KEYS (default 10000).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNS:-"32"}
KEYS=${BENCH_KEYS:-10000}

BENCH_NAME=tls-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE" "$LOADGEN"

# Certificates: a CA, a server certificate for 127.0.0.1, a client certificate.
(
  cd "$work"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /O=Shale/CN=bench-ca \
    -keyout ca.key -out ca.crt 2>/dev/null
  for who in server client; do
    openssl req -newkey rsa:2048 -nodes -subj "/O=Shale/OU=$who/CN=localhost" \
      -keyout "$who.key" -out "$who.csr" 2>/dev/null
    echo "subjectAltName=DNS:localhost,IP:127.0.0.1" >"$who.ext"
    openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile "$who.ext" -out "$who.crt" 2>/dev/null
    cat "$who.crt" "$who.key" >"$who.pem"
  done
)
start_shale "$SHALE" --tlsMode preferTLS --tlsCertificateKeyFile "$work/server.pem" \
  --tlsCAFile "$work/ca.crt"
tls_uri="${uri}?tls=true&tlsCAFile=$work/ca.crt&tlsCertificateKeyFile=$work/client.pem"

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); shale pid $shale_pid port" \
  "$sport; ${SECS}s per run, $ROUNDS rounds, $KEYS documents"
"$LOADGEN" --uri "$uri" --threads 1 --seconds 0.2 --op findid --preload "$KEYS" >/dev/null
results="$work/results.jsonl"
for c in $CONNS; do
  for _ in $(seq "$ROUNDS"); do
    for mode in plain tls; do
      u=$uri
      [ "$mode" = tls ] && u=$tls_uri
      "$LOADGEN" --uri "$u" --threads "$c" --seconds "$SECS" --op findid --keys "$KEYS" |
        sed -n '1p' | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin); r["label"] = sys.argv[1]; print(json.dumps(r))' "$mode" >>"$results"
    done
  done
done
echo "== results (JSON) and ratios; load now $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(json.dumps(r))
for c in sorted({r["threads"] for r in rows}):
    med = {m: statistics.median(r["ops_per_sec"] for r in rows
                                if r["label"] == m and r["threads"] == c)
           for m in ("plain", "tls")}
    print("findid at %d connections: plain %.0f/s, TLS %.0f/s, TLS/plain %.2fx"
          % (c, med["plain"], med["tls"], med["tls"] / med["plain"]))
PY
