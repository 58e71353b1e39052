#!/usr/bin/env python3
"""txn_router.py -- transactions through the router on a 2-shard cluster (issue 15 item 8):
p50/p99 of a transaction updating one document on each shard (two-phase commit) against one
updating two documents on one shard (single-shard commit), interleaved in one run, then the
throughput of two-shard transactions (pymongo's with_transaction) at 8 connections.
SHALE_BIN=build/src/main/shale; N (per round, default 200), ROUNDS (3), SECONDS (5)."""
import os
import statistics
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "integration"))
sys.path.insert(0, here)
from benchlib import median_p50_p99, p50_p99, two_shard_collection  # noqa: E402
from shale_fixtures import ShaleCluster  # noqa: E402

N = int(os.environ.get("N", "200"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SECONDS = float(os.environ.get("SECONDS", "5"))

c = ShaleCluster(shards=2)
c.start()
try:
    r = c.router.client()
    coll = two_shard_collection(r)
    coll.insert_many([{"_id": i, "x": i, "n": 0} for i in (-2, -1, 1, 2)])

    def run(xs, n):
        with r.start_session() as s:
            def txn():
                with s.start_transaction():
                    for x in xs:
                        coll.update_one({"x": x}, {"$inc": {"n": 1}}, session=s)
            return p50_p99(txn, n)

    run([-1, 1], 20)
    run([-1, -2], 20)
    two, one = [], []
    for _ in range(ROUNDS):
        two.append(run([-1, 1], N))
        one.append(run([-1, -2], N))
    m = {}
    for name, v in (("two_shards", two), ("one_shard", one)):
        m[name] = median_p50_p99(v)
        print("%s: p50 %.0f us p99 %.0f us" % (name, m[name][0], m[name][1]))
    print("two/one: p50 %.2fx p99 %.2fx" % (m["two_shards"][0] / m["one_shard"][0],
                                          m["two_shards"][1] / m["one_shard"][1]))

    # The floor, same run: MongoDB 7.0's two-phase commit makes three durable writes in a row
    # that a single-shard commit does not (the coordinator's participant list, the
    # participants' prepare, the decision; the commit itself both have). One durable write's
    # price on this machine is a j:true insert's latency minus a j:false one's, on a shard
    # directly; no implementation of the protocol can commit across shards faster than the
    # single-shard commit plus three of them.
    from pymongo.write_concern import WriteConcern
    direct = c.shard_client(0).benchfloor.t

    def insert_p50(j, n):
        wc = direct.with_options(write_concern=WriteConcern(w=1, j=j))
        return p50_p99(lambda: wc.insert_one({}), n)[0]

    insert_p50(True, 20)
    durable = statistics.median(insert_p50(True, N) - insert_p50(False, N) for _ in range(ROUNDS))
    floor = (m["one_shard"][0] + 3 * durable) / m["one_shard"][0]
    print("floor: one durable write %.0f us; single-shard p50 + 3 of them = %.2fx of the "
          "single-shard p50 (target 2.0x)" % (durable, floor))

    coll.insert_many([{"_id": 1000 + k, "x": -(100 + k), "n": 0} for k in range(8)] +
                     [{"_id": 2000 + k, "x": 100 + k, "n": 0} for k in range(8)])
    count, errors = [0] * 8, []
    stop = time.time() + SECONDS

    def worker(k):
        def body(s):
            coll.update_one({"x": -(100 + k)}, {"$inc": {"n": 1}}, session=s)
            coll.update_one({"x": 100 + k}, {"$inc": {"n": 1}}, session=s)
        with r.start_session() as s:
            while time.time() < stop:
                try:
                    s.with_transaction(body)
                except Exception as e:  # noqa: BLE001 -- counted and shown
                    errors.append(repr(e)[:200])
                    return
                count[k] += 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("8 connections, two-shard transactions: %.0f txn/s (errors %d)" %
          (sum(count) / SECONDS, len(errors)))
    for e in errors[:3]:
        print("  ", e)
finally:
    c.stop()
