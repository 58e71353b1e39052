#!/usr/bin/env bash
# bench/agg.sh BUILD_DIR (part of `make bench`): the aggregation engine against a plain
# collection scan of the same data, in one run (issue 5 item 7). Starts a release
# `shale node`, loads BENCH_DOCS documents {_id, k10: i % 10, k10k: i % 10000, v: i, pad}
# and times, BENCH_ROUNDS times each (median): a collection scan that returns nothing
# (find {nosuch: 1}: every document read and matched), $group by k10 and by k10k with
# $sum/$avg, and $sort by v descending + $limit 10. Prints docs/s and the ratio to the scan.
# Env: BENCH_DOCS (default 1000000), BENCH_ROUNDS (default 3).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
DOCS=${BENCH_DOCS:-1000000}
ROUNDS=${BENCH_ROUNDS:-3}

BENCH_NAME=agg-bench
# shellcheck source=bench/lib.sh
. "$top/bench/lib.sh"
bench_build "${1:-}"
bench_need "$SHALE"

start_shale "$SHALE" --replSet rs0
echo "== $(nproc) cores; shale pid $shale_pid port $sport; $DOCS documents, $ROUNDS rounds"
/usr/bin/python3 - "$uri" "$DOCS" "$ROUNDS" <<'PY'
import statistics, sys, time
import pymongo

uri, ndocs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = pymongo.MongoClient(uri)
coll = c.bench.agg
coll.drop()
t0 = time.monotonic()
batch = []
for i in range(ndocs):
    batch.append({"_id": i, "k10": i % 10, "k10k": i % 10000, "v": i, "pad": "x" * 40})
    if len(batch) == 10000:
        coll.insert_many(batch, ordered=False)
        batch = []
if batch:
    coll.insert_many(batch, ordered=False)
print("loaded %d documents in %.1f s" % (ndocs, time.monotonic() - t0))

def timed(fn):
    times = []
    for _ in range(rounds):
        t = time.monotonic()
        fn()
        times.append(time.monotonic() - t)
    return statistics.median(times)

def scan():
    assert list(coll.find({"nosuch": 1})) == []

def group(key, expect):
    def run():
        out = list(coll.aggregate([{"$group": {"_id": "$" + key, "n": {"$sum": 1},
                                               "avg": {"$avg": "$v"}}}]))
        assert len(out) == expect
    return run

def topk():
    out = list(coll.aggregate([{"$sort": {"v": -1}}, {"$limit": 10}]))
    assert [d["v"] for d in out] == list(range(ndocs - 1, ndocs - 11, -1))

base = timed(scan)
print("collection scan: %.0f docs/s (%.3f s)" % (ndocs / base, base))
for label, fn in (("$group 10 keys", group("k10", 10)),
                  ("$group 10k keys", group("k10k", min(10000, ndocs))),
                  ("$sort + $limit 10", topk)):
    t = timed(fn)
    print("%s: %.0f docs/s (%.3f s); ratio to scan %.2f" % (label, ndocs / t, t, base / t))
PY
