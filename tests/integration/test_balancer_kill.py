"""Kill -9 under the balancer (issue 16 item 6): with the balancer on and a writer inserting
through the router, the donor is killed in the middle of a balancer migration, then the
recipient, then the config server while a round waits on a migration. Each comes back on its
folder; afterwards every document is readable exactly once through the router, every
acknowledged insert is there (and nothing that was never attempted), config.chunks still tiles
the key space, and the balancer goes on to even the collection out. Migrations are caught in
progress with hang fail points."""

import threading

import bson
import pymongo
import pytest
from pymongo.errors import PyMongoError

from shale_fixtures import Background, config_db, fail_point, hang, module_cluster, wait_until

NCHUNKS = 12
PER_CHUNK = 20
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def kc(request):
    with module_cluster(request, shards=2,
                        shard_extra=["--setParameter", "orphanCleanupDelaySecs=0"]) as c:
        _fast_rounds(c)
        config_db(c).settings.update_one(
            {"_id": "balancer"}, {"$set": {"_waitForDelete": True, "policy": "chunkCount"}},
            upsert=True)
        c.router_client().admin.command("balancerStop")
        yield c


def _fast_rounds(c):
    fail_point(c.config_client(), "overrideBalanceRoundInterval", "alwaysOn", {"intervalMs": 200})


def _chunks(c, ns):
    cfg = config_db(c)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    return list(cfg.chunks.find({"uuid": uuid}).sort("min", 1))


def _counts(c, ns):
    out = {}
    for ch in _chunks(c, ns):
        out[ch["shard"]] = out.get(ch["shard"], 0) + 1
    return out


class Writer:
    """Inserts {_id: 10**6 + n, x: n % (NCHUNKS * PER_CHUNK)} (j: true) through the router until
    stopped; remembers which inserts were acknowledged and which failed (their outcome is
    unknown: the process they reached may have died)."""

    def __init__(self, c):
        self.client = pymongo.MongoClient(c.uri(), serverSelectionTimeoutMS=5000)
        # Journaled: an acknowledged insert must survive the kill -9 of the shard holding it.
        self.coll = self.client.kill.get_collection("c", write_concern=pymongo.WriteConcern(j=True))
        self.acked, self.failed = [], []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.bg = Background(self.run)

    def run(self):
        n = 0
        while not self.stop.is_set():
            i = 10**6 + n
            try:
                self.coll.insert_one({"_id": i, "x": n % (NCHUNKS * PER_CHUNK), "w": 1})
                with self.lock:
                    self.acked.append(i)
            except PyMongoError:
                with self.lock:
                    self.failed.append(i)
            n += 1
        return n

    def wait_more(self, k=20):
        with self.lock:
            base = len(self.acked)
        wait_until(lambda: len(self.acked) >= base + k, timeout=TIMEOUT,
                   what="%d more acknowledged inserts" % k)

    def finish(self):
        self.stop.set()
        self.bg.join(60)
        self.client.close()
        assert self.bg.error is None, self.bg.error
        return self.bg.result


def _kill_restart(c, proc_index=None, config=False):
    if config:
        c.config.kill()
        c.restart_config()
        _fast_rounds(c)
    else:
        c.shards[proc_index].kill()
        c.restart_shard(proc_index)


def test_kill_donor_recipient_and_config_under_balancer(kc):
    r = kc.router_client()
    ns = "kill.c"
    r.admin.command("enableSharding", "kill", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    n0 = NCHUNKS * PER_CHUNK
    r.kill.c.insert_many([{"_id": i, "x": i, "w": 0} for i in range(n0)])
    for k in range(1, NCHUNKS):
        r.admin.command("split", ns, middle={"x": k * PER_CHUNK})
    assert _counts(kc, ns) == {"shard0": NCHUNKS}

    w = Writer(kc)
    try:
        w.wait_more()
        # 1. The donor (shard0) dies in the middle of the balancer's first migration.
        at_donor = hang(kc.shard_client(0), "moveChunkHangAtStep4", "a migration off shard0")
        r.admin.command("balancerStart")
        at_donor()
        # The next migration will hang on the recipient: set it before the donor is back.
        at_recipient = hang(kc.shard_client(1), "migrateThreadHangAtStep3",
                            "a migration into shard1")
        _kill_restart(kc, 0)
        # 2. The balancer resumes with a new migration; the recipient (shard1) dies in it.
        at_recipient()
        at_donor2 = hang(kc.shard_client(0), "moveChunkHangAtStep3", "a migration off shard0")
        _kill_restart(kc, 1)
        w.wait_more()
        # 3. The config server dies while a round waits on a migration.
        at_donor2()
        assert r.admin.command("balancerStatus")["inBalancerRound"] is True
        _kill_restart(kc, config=True)
        fail_point(kc.shard_client(0), "moveChunkHangAtStep3", "off")
        # The balancer resumes and evens the collection out.
        wait_until(lambda: _counts(kc, ns) == {"shard0": NCHUNKS // 2, "shard1": NCHUNKS // 2},
                   timeout=TIMEOUT, what="the chunks spread evenly after the kills")
        w.wait_more()
    finally:
        n = w.finish()
        try:
            r.admin.command("balancerStop")
        except PyMongoError:
            pass
    assert n > 0 and w.acked
    # The catalog tiles the key space: contiguous chunks from MinKey to MaxKey.
    chunks = _chunks(kc, ns)
    assert isinstance(chunks[0]["min"]["x"], bson.min_key.MinKey)
    assert isinstance(chunks[-1]["max"]["x"], bson.max_key.MaxKey)
    for a, b in zip(chunks, chunks[1:]):
        assert a["max"] == b["min"]
    # Every document once through the router; every acknowledged insert is there.
    ids = [d["_id"] for d in kc.router_client().kill.c.find({}, {"_id": 1})]
    assert len(ids) == len(set(ids)), "duplicates read through the router"
    got = set(ids)
    assert set(range(n0)) <= got
    assert set(w.acked) <= got, "acknowledged inserts lost: %s" % sorted(set(w.acked) - got)[:10]
    assert got <= set(range(n0)) | set(w.acked) | set(w.failed)
    assert kc.router_client().kill.c.count_documents({}) == len(ids)
