"""The load policy (issue 16 item 4, beyond MongoDB): shards keep decayed per-chunk read and
write counters (_shardsvrGetChunkLoad); with config.settings {_id: "balancer", policy: "load"}
the balancer moves load, not chunk counts, from the busiest shard to the least busy. Here the
chunks are even by count (4/4) but 80 % of the operations go to two chunks of shard0: the
balancer moves one of them, and afterwards no shard serves more than 60 % of the operations
(measured with each shard's serverStatus opcounters)."""

import random
import threading

import pymongo
import pytest

from shale_fixtures import Background, config_db, fail_point, module_cluster, wait_until

PER_CHUNK = 100
NCHUNKS = 8


@pytest.fixture(scope="module")
def lc(request):
    with module_cluster(request, shards=2) as c:
        fail_point(c.config_client(), "overrideBalanceRoundInterval", "alwaysOn",
                   {"intervalMs": 200})
        config_db(c).settings.update_one({"_id": "balancer"},
                                         {"$set": {"_waitForDelete": True}}, upsert=True)
        c.router_client().admin.command("balancerStop")
        yield c


def _owner(c, ns, x):
    cfg = config_db(c)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    for ch in cfg.chunks.find({"uuid": uuid}):
        lo, hi = ch["min"]["x"], ch["max"]["x"]
        if (not isinstance(lo, int) or lo <= x) and (not isinstance(hi, int) or x < hi):
            return ch["shard"]
    raise AssertionError("no chunk holds x=%r" % x)


def _ops(c, i):
    oc = c.shard_client(i).admin.command("serverStatus")["opcounters"]
    return oc["query"] + oc["update"]


class Skewed:
    """Reads and updates through the router: 80 % on x in [0, 200) (two chunks), the rest
    spread over the whole key space."""

    def __init__(self, c, coll="c", hot=2 * PER_CHUNK, nchunks=NCHUNKS):
        self.hot = hot
        self.nchunks = nchunks
        self.client = pymongo.MongoClient(c.uri())
        # One collection, or several taking turns.
        self.colls = [self.client.load[n] for n in (coll if isinstance(coll, tuple) else (coll,))]
        self.stop = threading.Event()
        self.bg = Background(self.run)

    def run(self):
        rnd = random.Random(16)
        n = 0
        while not self.stop.is_set():
            if rnd.random() < 0.8:
                x = rnd.randrange(0, self.hot)
            else:
                x = rnd.randrange(0, self.nchunks * PER_CHUNK)
            coll = self.colls[(n // 2) % len(self.colls)]
            if n % 2:
                coll.update_one({"x": x}, {"$inc": {"n": 1}})
            else:
                coll.find_one({"x": x})
            n += 1
        return n

    def finish(self):
        self.stop.set()
        self.bg.join(60)
        self.client.close()
        assert self.bg.error is None, self.bg.error


def _shares(c, seconds_of_ops=400):
    """Each shard's share of the operations while the workload makes ~seconds_of_ops more."""
    before = [_ops(c, i) for i in range(2)]
    wait_until(lambda: sum(_ops(c, i) for i in range(2)) - sum(before) >= seconds_of_ops,
               what="%d more operations on the shards" % seconds_of_ops)
    deltas = [_ops(c, i) - before[i] for i in range(2)]
    return [d / float(sum(deltas)) for d in deltas]


def _layout(r, ns, nchunks, to_shard1):
    """ns sharded on x with nchunks chunks of PER_CHUNK documents, chunks to_shard1 on shard1."""
    db, coll = ns.split(".")
    r.admin.command("shardCollection", ns, key={"x": 1})
    r[db][coll].insert_many([{"_id": i, "x": i, "n": 0} for i in range(nchunks * PER_CHUNK)])
    for k in range(1, nchunks):
        r.admin.command("split", ns, middle={"x": k * PER_CHUNK})
    for k in to_shard1:
        r.admin.command("moveChunk", ns, find={"x": k * PER_CHUNK}, to="shard1",
                        _waitForDelete=True)


def _balanced_under(c, w, done, what, label, timeout=40, before_start=None):
    """With workload w running (shard0 serving most operations), start the balancer under the
    load policy, wait for done(), and check no shard serves more than 60 % afterwards."""
    r = c.router_client()
    config_db(c).settings.update_one({"_id": "balancer"}, {"$set": {"policy": "load"}})
    try:
        before = _shares(c)
        assert before[0] > 0.75, before  # the skew: shard0 serves most operations
        if before_start is not None:
            before_start()
        r.admin.command("balancerStart")
        wait_until(done, timeout=timeout, what=what)
        after = _shares(c)
        print("%s: op shares before %s after %s" % (label, before, after))
        assert max(after) <= 0.6, after
    finally:
        w.finish()
        r.admin.command("balancerStop")


def test_load_policy_moves_a_hot_chunk(lc):
    r = lc.router_client()
    ns = "load.c"
    r.admin.command("enableSharding", "load", primaryShard="shard0")
    _layout(r, ns, NCHUNKS, range(NCHUNKS // 2, NCHUNKS))

    def counters():
        # The shard reports its chunks' decayed loads, hot ones highest.
        loads = lc.shard_client(0).admin.command("_shardsvrGetChunkLoad", ns)["chunks"]
        assert len(loads) == NCHUNKS // 2
        assert max(loads, key=lambda e: e["load"])["max"]["x"] in (PER_CHUNK, 2 * PER_CHUNK)
    _balanced_under(lc, Skewed(lc), lambda: _owner(lc, ns, 0) != _owner(lc, ns, PER_CHUNK),
                    "the two hot chunks on different shards", "load policy",
                    before_start=counters)
    # The count policy would have moved nothing: the chunks were even by count.
    assert r.load.c.count_documents({}) == NCHUNKS * PER_CHUNK


def test_load_policy_splits_a_hot_chunk_at_its_load_median(lc):
    r = lc.router_client()
    ns = "load.h"
    _layout(r, ns, 4, (2, 3))
    cfg = config_db(lc)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]

    def hot_halves_apart():
        # The hot chunk [MinKey, PER_CHUNK) split inside (at its load median, perhaps more than
        # once) and its two ends on different shards.
        inside = [c for c in cfg.chunks.find({"uuid": uuid})
                  if isinstance(c["min"]["x"], int) and 0 < c["min"]["x"] < PER_CHUNK]
        return bool(inside) and _owner(lc, ns, 0) != _owner(lc, ns, PER_CHUNK - 1)
    # 80 % of the operations on the first chunk alone: moving it would only move the problem.
    _balanced_under(lc, Skewed(lc, coll="h", hot=PER_CHUNK), hot_halves_apart,
                    "the hot chunk split inside and its halves on different shards",
                    "load policy split", timeout=50)
    entry = cfg.changelog.find_one({"what": {"$in": ["split", "multi-split"]}, "ns": ns,
                                    "details.left.max.x": {"$gt": 0, "$lt": PER_CHUNK}})
    assert entry is not None
    assert r.load.h.count_documents({}) == 4 * PER_CHUNK


def test_load_policy_balances_the_shards_total_across_collections(lc):
    """Two collections, each even by count (2/2) and each hot on its first chunk, both first
    chunks on shard0. Judged one collection at a time, each hot chunk alone carries its
    collection's whole difference, so each would be split; judged by the shards' total load,
    moving one whole hot chunk -- of either collection -- evens the cluster."""
    r = lc.router_client()
    cfg = config_db(lc)
    names = ("ta", "tb")
    for name in names:
        _layout(r, "load." + name, 4, (2, 3))

    def hot_owners():
        return sorted(_owner(lc, "load." + name, 0) for name in names)
    _balanced_under(lc, Skewed(lc, coll=names, hot=PER_CHUNK, nchunks=4),
                    lambda: hot_owners() == ["shard0", "shard1"],
                    "one of the two hot chunks moved to shard1",
                    "load policy across collections", timeout=30)
    for name in names:
        uuid = cfg.collections.find_one({"_id": "load." + name})["uuid"]
        # Moved whole: no hot chunk was split.
        assert cfg.chunks.count_documents({"uuid": uuid}) == 4
        assert r.load[name].count_documents({}) == 4 * PER_CHUNK


def test_unversioned_reads_count_in_the_chunk_load(lc):
    """A find sent straight to the shard (no shardVersion: no orphan filter) counts in the
    load of the chunk holding each document it examines, as a read through the router does."""
    r = lc.router_client()
    ns = "load.u"
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.load.u.insert_many([{"_id": i, "x": i} for i in list(range(20)) + list(range(100, 120))])
    r.admin.command("split", ns, middle={"x": 100})
    config_db(lc).settings.update_one({"_id": "balancer"}, {"$set": {"policy": "load"}})
    direct = lc.shard_client(0).load.u

    def loads():
        per = {}
        for e in lc.shard_client(0).admin.command("_shardsvrGetChunkLoad", ns)["chunks"]:
            per[e["max"]["x"] if isinstance(e["max"]["x"], int) else "max"] = e["load"]
        return per

    def hot_first_chunk():
        for k in range(100):
            assert direct.find_one({"x": k % 20}) is not None
        per = loads()
        return per.get(100, 0) >= 100 and per.get("max", 0) < 40
    # The shard learns the policy at its next settings refresh (every 2-5 s).
    wait_until(hot_first_chunk, timeout=20, what="direct reads counted in the first chunk")
