"""Retryable writes across chunk migration and movePrimary (issue 13 item 5): the donor sends
the history of the range's retryable writes (_getNextSessionMods) -- what was written before
the migration and what is written during it -- and the recipient answers a retry of any of
them from it after the commit, applying nothing. Writes are sent straight to the shard that
owns the document (raw OP_MSG with the exact lsid); the retries go to the new owner."""

import uuid

import pytest
from bson import Binary, Int64
from pymongo.errors import PyMongoError

import wire_util
from shale_fixtures import Background, fail_point, hang, module_cluster, wait_until


@pytest.fixture(scope="module")
def mc(request):
    with module_cluster(request, shards=2, routers=2,
                        shard_extra=["--setParameter", "orphanCleanupDelaySecs=0"]) as c:
        yield c


class Session:
    """Raw commands with one lsid, on connections to any shard (or router: on_router)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
        self.socks = {}

    def on(self, shard, cmd, db="rw"):
        if shard not in self.socks:
            self.socks[shard] = wire_util.connect(self.cluster.shards[shard].port)
        body = dict(cmd, lsid=self.lsid)
        body["$db"] = db
        r = wire_util.command(self.socks[shard], body)
        for k in ("$clusterTime", "operationTime", "retriedStmtIds", "retriedStmtId"):
            r.pop(k, None)
        return r

    def on_router(self, i, cmd, db="rw"):
        key = "router%d" % i
        if key not in self.socks:
            self.socks[key] = wire_util.connect(self.cluster.routers[i].port)
        body = dict(cmd, lsid=self.lsid)
        body["$db"] = db
        r = wire_util.command(self.socks[key], body)
        for k in ("$clusterTime", "operationTime", "retriedStmtIds", "retriedStmtId"):
            r.pop(k, None)
        return r

    def drop(self, shard):
        """Forget the connection to 'shard' (its process is gone)."""
        s = self.socks.pop(shard, None)
        if s is not None:
            s.close()

    def close(self):
        for s in self.socks.values():
            s.close()


def _sharded(mc, name):
    r = mc.router_client()
    ns = "rw." + name
    r.admin.command("enableSharding", "rw", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.admin.command("split", ns, middle={"x": 100})
    return r, ns


def test_history_moves_with_the_chunk_and_back(mc):
    r, ns = _sharded(mc, "moved")
    s = Session(mc)
    ins = {"insert": "moved", "documents": [{"_id": 1, "x": 150, "n": 0}, {"_id": 2, "x": 160}],
           "txnNumber": Int64(1)}
    upd = {"update": "moved", "updates": [{"q": {"x": 150}, "u": {"$inc": {"n": 1}}},
                                          {"q": {"x": 170}, "u": {"$set": {"n": 5}},
                                           "upsert": True}],
           "txnNumber": Int64(2)}
    assert s.on(0, ins)["n"] == 2
    first_upd = s.on(0, upd)
    s2 = Session(mc)
    fam = {"findAndModify": "moved", "query": {"x": 150}, "update": {"$inc": {"n": 10}},
           "new": True, "txnNumber": Int64(3)}
    first_fam = s2.on(0, fam)
    s3 = Session(mc)
    rem = {"findAndModify": "moved", "query": {"x": 160}, "remove": True, "txnNumber": Int64(4)}
    first_rem = s3.on(0, rem)
    r.admin.command("moveChunk", ns, find={"x": 150}, to="shard1")
    # On the recipient: the same replies, nothing applied again.
    assert s.on(1, upd) == first_upd
    assert s2.on(1, fam) == first_fam
    assert s3.on(1, rem) == first_rem
    assert s.on(1, dict(ins, txnNumber=Int64(1)))["code"] == 225  # older than txnNumber 2
    docs = {d["x"]: d for d in mc.shard_client(1).rw.moved.find()}
    assert docs[150]["n"] == 11 and 160 not in docs and docs[170]["n"] == 5
    # And back again: the recipient's history (migrated no-ops) goes with it.
    r.admin.command("moveChunk", ns, find={"x": 150}, to="shard0")
    assert s2.on(0, fam) == first_fam
    assert s.on(0, upd) == first_upd
    assert mc.shard_client(0).rw.moved.find_one({"_id": 1})["n"] == 11
    s.close()
    s2.close()
    s3.close()


def test_writes_made_during_the_migration_go_too(mc):
    r, ns = _sharded(mc, "during")
    recipient = mc.shard_client(1)
    s = Session(mc)
    wait = hang(recipient, "migrateThreadHangAtStep3")
    try:
        t = Background(lambda: mc.router_client().admin.command(
            "moveChunk", ns, find={"x": 150}, to="shard1"), catch=PyMongoError)
        wait()
        # The recipient has cloned; these writes reach it as transferred changes, and their
        # history as new session entries.
        first = s.on(0, {"insert": "during", "documents": [{"_id": 1, "x": 150}],
                         "txnNumber": Int64(1)})
        upd = {"update": "during", "updates": [{"q": {"_id": 1, "x": 150},
                                               "u": {"$inc": {"n": 1}}}],
               "txnNumber": Int64(2)}
        first_upd = s.on(0, upd)
    finally:
        fail_point(recipient, "migrateThreadHangAtStep3", "off")
    t.join(120)
    assert t.error is None, t.error
    assert first["n"] == 1
    assert s.on(1, upd) == first_upd
    assert recipient.rw.during.find_one({"_id": 1})["n"] == 1
    s.close()


def test_a_truncated_donor_history_makes_the_recipient_refuse_unknown_statements(request):
    """The donor's oplog lost the session's entries: it sends a dead end, and a retry the
    recipient cannot answer is IncompleteTransactionHistory (217), not a second write."""
    with module_cluster(request, shards=2, shard_extra=["--oplogSize", "1"]) as c:
        r, ns = _sharded(c, "trunc")
        s = Session(c)
        upd = {"update": "trunc", "updates": [{"q": {"x": 150}, "u": {"$inc": {"n": 1}},
                                               "upsert": True}],
               "txnNumber": Int64(1)}
        s.on(0, upd)
        donor = c.shard_client(0)
        pad = "x" * 10000
        for _ in range(30):
            donor.rw.filler.insert_many([{"p": pad} for _ in range(20)])
        donor.admin.command("fsync")
        assert donor.local.oplog.rs.count_documents({"ns": "rw.trunc", "txnNumber": 1}) == 0
        r.admin.command("moveChunk", ns, find={"x": 150}, to="shard1")
        res = s.on(1, upd)
        assert res["code"] == 217, res
        assert c.shard_client(1).rw.trunc.find_one({"x": 150})["n"] == 1
        s.close()


def test_history_moves_with_move_primary(mc):
    r = mc.router_client()
    r.admin.command("enableSharding", "rwmp", primaryShard="shard0")
    r.rwmp.u.insert_one({"_id": 0})
    s = Session(mc)
    ins = {"insert": "u", "documents": [{"_id": 1}, {"_id": 2}], "txnNumber": Int64(1)}
    assert s.on(0, ins, db="rwmp")["n"] == 2
    rem = {"findAndModify": "u", "query": {"_id": 1}, "remove": True, "txnNumber": Int64(2)}
    first = s.on(0, rem, db="rwmp")
    r.admin.command("movePrimary", "rwmp", to="shard1")
    assert s.on(1, rem, db="rwmp") == first
    assert sorted(d["_id"] for d in mc.shard_client(1).rwmp.u.find()) == [0, 2]
    wait_until(lambda: mc.shard_client(0).rwmp.u.count_documents({}) == 0,
               what="the old primary's copy to be dropped")
    s.close()


def test_a_retry_through_another_router_after_the_chunk_moved(mc):
    """Issue 13 item 8: the write through one router, moveChunk, the retry through a second
    router (which may still route by the old table: the donor answers StaleConfig and the
    router retries on the new owner, where the history now is)."""
    r, ns = _sharded(mc, "viarouter")
    assert mc.router_client(1).rw.viarouter.count_documents({}) == 0  # router 1 caches
    s = Session(mc)
    ins = {"insert": "viarouter", "documents": [{"_id": 1, "x": 150, "n": 0},
                                                {"_id": 2, "x": 50, "n": 0}],
           "txnNumber": Int64(1)}
    assert s.on_router(0, ins)["n"] == 2
    upd = {"update": "viarouter", "updates": [{"q": {"x": 150}, "u": {"$inc": {"n": 1}}},
                                              {"q": {"x": 50}, "u": {"$inc": {"n": 1}}}],
           "txnNumber": Int64(2)}
    first = s.on_router(0, upd)
    assert first["n"] == 2 and first["nModified"] == 2
    fam = {"findAndModify": "viarouter", "query": {"x": 150}, "update": {"$inc": {"n": 10}},
           "txnNumber": Int64(3)}
    s2 = Session(mc)
    first_fam = s2.on_router(0, fam)
    r.admin.command("moveChunk", ns, find={"x": 150}, to="shard1")
    assert s.on_router(1, upd) == first
    assert s2.on_router(1, fam) == first_fam
    docs = {d["_id"]: d["n"] for d in mc.router_client(1).rw.viarouter.find()}
    assert docs == {1: 11, 2: 1}
    s.close()
    s2.close()


def test_a_retry_after_the_shard_was_killed_and_restarted(mc):
    """Issue 13 items 6 and 8: a j:true retryable write through the router, kill -9 of the
    shard that did it, restart; the retry through the router is answered from the history
    the shard rebuilt, applying nothing."""
    r = mc.router_client()
    r.admin.command("enableSharding", "rwkill", primaryShard="shard1")
    s = Session(mc)
    upd = {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}, "upsert": True}],
           "txnNumber": Int64(1), "writeConcern": {"j": True}}
    first = s.on_router(0, upd, db="rwkill")
    assert first["n"] == 1 and first["upserted"][0]["_id"] == 1
    mc.shards[1].kill()
    mc.restart_shard(1)
    again = s.on_router(0, upd, db="rwkill")
    assert again == first, again
    assert r.rwkill.c.find_one({"_id": 1})["n"] == 1
    s.close()
