#!/usr/bin/env bash
# bench/migration.sh BUILD_DIR (issue 7 item 5): chunk migration speed. Starts a 2-shard
# cluster with `shale up`, loads a BENCH_MB chunk (1 KB documents, range-sharded on x) into
# two collections on shard0 and moves each to shard1 with moveChunk through the router:
#  - idle: MB/s and docs/s of the migration alone;
#  - loaded: the same while BENCH_WRITERS threads update and insert into the moving range
#    through the router; prints the migration's MB/s and docs/s, the writes' p50/p99 during
#    the migration, and the longest write (the critical section's stall shows there).
# Env: BENCH_MB (default 64), BENCH_WRITERS (default 4).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
MB=${BENCH_MB:-64}
WRITERS=${BENCH_WRITERS:-4}

BENCH_NAME=migration-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE"

start_cluster "$SHALE" "$work/cluster" 2
echo "== $(nproc) cores; 2-shard cluster, router port $port; ${MB} MB chunk, $WRITERS writers"

/usr/bin/python3 - "mongodb://127.0.0.1:$port/" "$MB" "$WRITERS" <<'PY'
import statistics, sys, threading, time
import pymongo

uri, mb, nwriters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = pymongo.MongoClient(uri)
ndocs = mb * 1024
pad = "x" * 960
names = [s["_id"] for s in c.admin.command("listShards")["shards"]]
c.admin.command("enableSharding", "bench", primaryShard=names[0])


def load(name):
    ns = "bench." + name
    c.admin.command("shardCollection", ns, key={"x": 1})
    coll = c.bench[name]
    batch = []
    for i in range(ndocs):
        batch.append({"_id": i, "x": i, "v": 0, "pad": pad})
        if len(batch) == 2000:
            coll.insert_many(batch, ordered=False)
            batch = []
    if batch:
        coll.insert_many(batch, ordered=False)
    return ns


def move(ns):
    t = time.monotonic()
    c.admin.command("moveChunk", ns, find={"x": 0}, to=names[1])
    return time.monotonic() - t


t0 = time.monotonic()
idle_ns, busy_ns = load("idle"), load("busy")
print("loaded 2 x %d documents (%d MB each) in %.1f s" % (ndocs, mb, time.monotonic() - t0))

secs = move(idle_ns)
print("idle:   %.2f s, %.1f MB/s, %.0f docs/s" % (secs, mb / secs, ndocs / secs))

stop = threading.Event()
lat, lock = [], threading.Lock()


def writer(k):
    wc = pymongo.MongoClient(uri)
    coll = wc.bench.busy
    i = 0
    mine = []
    while not stop.is_set():
        t = time.monotonic()
        if i % 2:
            coll.update_one({"x": (k * 7919 + i) % ndocs}, {"$inc": {"v": 1}})
        else:
            coll.insert_one({"_id": 10**9 + k * 10**7 + i, "x": (k * 104729 + i) % ndocs})
        mine.append((t, time.monotonic() - t))
        i += 1
    with lock:
        lat.extend(mine)


threads = [threading.Thread(target=writer, args=(k,)) for k in range(nwriters)]
for t in threads:
    t.start()
time.sleep(1)
start = time.monotonic()
secs = move(busy_ns)
end = time.monotonic()
stop.set()
for t in threads:
    t.join()
lat = sorted(dt for t, dt in lat if start <= t <= end)
p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")
print("loaded: %.2f s, %.1f MB/s, %.0f docs/s; %d writes, p50 %.1f ms, p99 %.1f ms, "
      "max %.1f ms" % (secs, mb / secs, ndocs / secs, len(lat), p(0.5), p(0.99),
                       lat[-1] * 1000 if lat else float("nan")))
assert c.bench.idle.count_documents({}) == ndocs
PY
