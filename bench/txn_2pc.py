#!/usr/bin/env python3
"""txn_2pc.py -- two-phase commit cost on a 2-shard cluster, without a router: a transaction
writing one document on each shard committed by coordinateCommitTransaction (the coordinator on
shard0) against one writing two documents on shard0 committed by commitTransaction, same run,
same sessions. Prints p50/p99 of each and the ratios. SHALE_BIN=build/src/main/shale, N=200."""
import os, sys, time, uuid
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from bson import Binary, Int64
from bson.binary import UUID_SUBTYPE
import wire_util
from shale_fixtures import ShaleCluster

def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs)-1, int(p*len(xs)))]

c = ShaleCluster(shards=2).start()
try:
    socks = [wire_util.connect(c.shards[i].port) for i in range(2)]
    def cmd(i, db, body, lsid, txn, start=False):
        b = dict(body); b.update(lsid=lsid, txnNumber=Int64(txn), autocommit=False)
        if start: b["startTransaction"] = True
        b["$db"] = db
        r = wire_util.command(socks[i], b); assert r["ok"] == 1, r; return r
    for i in range(2):
        c.shard_client(i).test.b.insert_one({"_id": "seed"})
    two, one = [], []
    N = int(os.environ.get("N", "200"))
    for k in range(N):
        lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
        # one shard, two documents, plain commit
        t0 = time.perf_counter()
        cmd(0, "test", {"insert": "b", "documents": [{"_id": "o%d" % k}]}, lsid, 1, True)
        cmd(0, "test", {"insert": "b", "documents": [{"_id": "p%d" % k}]}, lsid, 1)
        cmd(0, "admin", {"commitTransaction": 1, "writeConcern": {"w": "majority"}}, lsid, 1)
        one.append(time.perf_counter() - t0)
        # two shards, one document each, two-phase commit
        t0 = time.perf_counter()
        cmd(0, "test", {"insert": "b", "documents": [{"_id": "t%d" % k}]}, lsid, 2, True)
        cmd(1, "test", {"insert": "b", "documents": [{"_id": "t%d" % k}]}, lsid, 2, True)
        cmd(0, "admin", {"coordinateCommitTransaction": 1,
                         "participants": [{"shardId": "shard0"}, {"shardId": "shard1"}]}, lsid, 2)
        two.append(time.perf_counter() - t0)
    for name, xs in (("1 shard, 2 docs, commit", one), ("2 shards, 1 doc each, 2PC", two)):
        print("%-28s p50 %.2f ms  p99 %.2f ms" % (name, pct(xs, .5)*1e3, pct(xs, .99)*1e3))
    print("ratio p50 %.2fx  p99 %.2fx" % (pct(two, .5)/pct(one, .5), pct(two, .99)/pct(one, .99)))
finally:
    c.cleanup()
