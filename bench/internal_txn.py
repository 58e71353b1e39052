#!/usr/bin/env python3
"""internal_txn.py -- internal transactions on a 2-shard cluster (issue 15 item 5): p50/p99
of updateOne by the full shard key (one shard, no transaction) against updateOne without the
shard key (MongoDB 7.0's two-phase write in an internal transaction, query on both shards,
write on one) and an update moving its document to the other shard (WouldChangeOwningShard:
an internal two-shard transaction), interleaved in one run. Retryable writes (pymongo's
default). SHALE_BIN=build/src/main/shale; N (per round, default 200), ROUNDS (3)."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "integration"))
sys.path.insert(0, here)
from benchlib import median_p50_p99, p50_p99, two_shard_collection  # noqa: E402
from shale_fixtures import ShaleCluster  # noqa: E402

N = int(os.environ.get("N", "200"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))

c = ShaleCluster(shards=2)
c.start()
try:
    r = c.router.client()
    coll = two_shard_collection(r)
    coll.insert_many([{"_id": 1, "x": -1, "k": "a", "n": 0}, {"_id": 2, "x": 5, "k": "m"}])
    flip = [5]

    def keyed():
        coll.update_one({"x": -1}, {"$inc": {"n": 1}})

    def no_key():
        coll.update_one({"k": "a"}, {"$inc": {"n": 1}})

    def move():
        flip[0] = -flip[0]
        res = coll.update_one({"_id": 2, "x": -flip[0]}, {"$set": {"x": flip[0]}})
        assert res.modified_count == 1

    for fn in (keyed, no_key, move):
        p50_p99(fn, 20)
    res = {"keyed": [], "no_key": [], "move": []}
    for _ in range(ROUNDS):
        for name, fn in (("keyed", keyed), ("no_key", no_key), ("move", move)):
            res[name].append(p50_p99(fn, N))
    base = median_p50_p99(res["keyed"])[0]
    for name, v in res.items():
        p50, p99 = median_p50_p99(v)
        print("%s: p50 %.0f us p99 %.0f us (%.2fx keyed p50)" % (name, p50, p99, p50 / base))
finally:
    c.stop()
