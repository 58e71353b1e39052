"""Retryable writes through the router (issue 13 items 4, 7 and 8): the router forwards the
client's lsid and txnNumber and, per sub-batch, the statement ids of exactly the statements
it carries, so each shard deduplicates its own statements -- a write sent twice has one
effect, single- and multi-shard; the router repeats a shard request after a retriable
failure as mongos does (at most three more times) and answers an unreachable shard with
MongoDB's write errors; labels are attached as mongos attaches them (a router labels only
its own shutdown, and the shards' labels do not pass); failCommand on the router with the
fields drivers use, and pymongo's own retries applying once; bad session arguments get
MongoDB's errors and write nothing. Real processes: a config server, two shards and a
router; collection rr.c is sharded on {x: 1} with x < 0 on one shard and x >= 0 on the
other, each shard read directly to check what landed where."""

import uuid

import pymongo
import pytest
from bson import Binary, Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from pymongo.errors import OperationFailure

import wire_util
from shale_fixtures import fail_point
from test_router_writes import HandCluster

DB = "rr"


def _lsid():
    return {"id": Binary(uuid.uuid4().bytes, 4)}


class Raw:
    """Raw commands on one connection to the router, each with this session's lsid."""

    def __init__(self, proc, lsid=None):
        self.sock = wire_util.connect(proc.port)
        self.lsid = lsid or _lsid()

    def __call__(self, cmd, db=DB, **kw):
        body = dict(cmd)
        body.update(kw)
        body.setdefault("lsid", self.lsid)
        body["$db"] = db
        r = wire_util.command(self.sock, body)
        for k in ("$clusterTime", "operationTime"):
            r.pop(k, None)
        return r

    def close(self):
        self.sock.close()


def _same(first, second):
    """A retry's reply is the original's plus retriedStmtIds."""
    second = dict(second)
    second.pop("retriedStmtIds", None)
    return first == second


class Cluster:
    """test_router_writes' HandCluster (the sharding catalog written by hand on the config
    server, so no migration is needed to place chunks) with the names these tests use."""

    def __init__(self):
        self.hand = HandCluster()
        self.router = self.hand.router
        self.shards = self.hand.shards
        self.neg, self.pos = 0, 1  # x < 0 on shard0, x >= 0 on shard1
        self.hand.add_db(DB, "shard0")
        for name in ("c", "twice"):
            self.hand.shard_collection("%s.%s" % (DB, name), {"x": 1},
                                       [({"x": MinKey()}, {"x": 0}, "shard0"),
                                        ({"x": 0}, {"x": MaxKey()}, "shard1")])

    def router_client(self, **kw):
        return self.router.client(**kw)

    def shard_client(self, i, **kw):
        return self.shards[i].client(**kw)


@pytest.fixture(scope="module")
def mc(request):
    c = Cluster()
    yield c
    c.hand.close(getattr(request.node, "rep_failed", False))


def _on(mc, shard, coll="c"):
    """What shard 'shard' (index) holds of rr.<coll>, read directly."""
    return mc.shard_client(shard)[DB][coll]


def _shard_fail(mc, shard, mode, **data):
    """failCommand on a shard for the router's (internal) requests; returns how often it had
    fired so far (configureFailPoint's count is the total since the process started)."""
    data.setdefault("failInternalCommands", True)
    return fail_point(mc.shard_client(shard), "failCommand", mode, data)["count"]


def _router_fail(mc, mode, **data):
    return fail_point(mc.router_client(), "failCommand", mode, data)["count"]


def _fired(client, since):
    """Turn failCommand off on a process; how often it fired after count 'since'."""
    return fail_point(client, "failCommand", "off")["count"] - since


# ---------------------------------------------------------------- sent twice, applied once


def test_each_write_kind_sent_twice_applies_once_across_shards(mc):
    raw = Raw(mc.router)
    coll = mc.router_client()[DB].twice
    ins = {"insert": "twice", "documents": [{"_id": 1, "x": -1, "v": 0}, {"_id": 2, "x": 1, "v": 0},
                                            {"_id": 3, "x": -2, "v": 0}, {"_id": 4, "x": 2, "v": 0}],
           "txnNumber": Int64(1)}
    first = raw(ins)
    again = raw(ins)
    assert first == {"n": 4, "ok": 1.0}
    assert _same(first, again) and sorted(again["retriedStmtIds"]) == [0, 1, 2, 3]
    assert _on(mc, mc.neg, "twice").count_documents({}) == 2
    assert _on(mc, mc.pos, "twice").count_documents({}) == 2

    upd = {"update": "twice", "updates": [
        {"q": {"x": -1}, "u": {"$inc": {"v": 1}}},
        {"q": {"x": 1}, "u": {"$inc": {"v": 1}}},
        {"q": {"x": 5}, "u": {"$inc": {"v": 5}}, "upsert": True},
        {"q": {"x": -5}, "u": {"$inc": {"v": 5}}, "upsert": True}],
        "ordered": False, "txnNumber": Int64(2)}
    first = raw(upd)
    again = raw(upd)
    assert first["n"] == 4 and first["nModified"] == 2
    assert [u["index"] for u in first["upserted"]] == [2, 3]
    assert _same(first, again) and sorted(again["retriedStmtIds"]) == [0, 1, 2, 3]
    assert sorted((d["x"], d["v"]) for d in coll.find()) == [
        (-5, 5), (-2, 0), (-1, 1), (1, 1), (2, 0), (5, 5)]

    dele = {"delete": "twice", "deletes": [{"q": {"x": -2}, "limit": 1},
                                           {"q": {"x": 2}, "limit": 1}], "txnNumber": Int64(3)}
    first = raw(dele)
    again = raw(dele)
    assert first["n"] == 2 and _same(first, again)
    assert coll.count_documents({}) == 4

    fam = {"findAndModify": "twice", "query": {"x": 1}, "update": {"$inc": {"v": 10}},
           "new": True, "txnNumber": Int64(4)}
    first = raw(fam)
    again = raw(fam)
    assert first["value"]["v"] == 11 and again["value"] == first["value"]
    assert again["retriedStmtId"] == 0 and "retriedStmtId" not in first
    assert coll.find_one({"x": 1})["v"] == 11
    rem = {"findAndModify": "twice", "query": {"x": -1}, "remove": True, "txnNumber": Int64(5)}
    first = raw(rem)
    again = raw(rem)
    assert first["value"]["_id"] == 1 and again["value"] == first["value"]
    assert coll.count_documents({}) == 3
    raw.close()


def test_single_shard_batches_sent_twice_apply_once(mc):
    raw = Raw(mc.router)
    coll = mc.router_client()[DB].c
    ins = {"insert": "c", "documents": [{"_id": "s%d" % i, "x": -10 - i} for i in range(5)],
           "txnNumber": Int64(1)}
    assert raw(ins)["n"] == 5
    again = raw(ins)
    assert again["n"] == 5 and again["retriedStmtIds"] == [0, 1, 2, 3, 4]
    upd = {"update": "c", "updates": [{"q": {"x": -10}, "u": {"$inc": {"k": 1}}}],
           "txnNumber": Int64(2)}
    assert raw(upd)["nModified"] == 1
    assert raw(upd)["retriedStmtIds"] == [0]
    assert coll.find_one({"x": -10})["k"] == 1
    assert _on(mc, mc.neg).count_documents({"_id": {"$regex": "^s"}}) == 5
    raw.close()


def test_a_multi_shard_statement_keeps_its_id_on_every_shard(mc):
    """A delete by a non-shard-key field reaches both shards with the same statement id; a
    retry is answered by the shard that deleted and matches nothing on the other."""
    raw = Raw(mc.router)
    coll = mc.router_client()[DB].c
    coll.insert_many([{"_id": "m1", "x": -30, "tag": "m"}, {"_id": "m2", "x": 30, "tag": "m"},
                      {"_id": "m3", "x": 31, "tag": "keep"}])
    dele = {"delete": "c", "deletes": [{"q": {"x": 31}, "limit": 1},
                                       {"q": {"_id": "m2"}, "limit": 1}], "txnNumber": Int64(1)}
    first = raw(dele)
    assert first["n"] == 2
    coll.insert_one({"_id": "m3", "x": 31, "tag": "again"})
    again = raw(dele)
    # Statement 0 is answered from history (the new m3 stays), statement 1 too.
    assert again["n"] == 2 and sorted(again["retriedStmtIds"]) == [0, 1]
    assert coll.find_one({"_id": "m3"})["tag"] == "again"
    raw.close()


def test_an_ordered_batch_stopped_by_an_error_runs_the_rest_on_retry(mc):
    raw = Raw(mc.router)
    coll = mc.router_client()[DB].c
    coll.insert_one({"_id": "o2", "x": 41})
    batch = {"insert": "c", "documents": [{"_id": "o1", "x": -41}, {"_id": "o2", "x": 41},
                                          {"_id": "o3", "x": -42}], "txnNumber": Int64(1)}
    r = raw(batch)
    assert r["n"] == 1 and r["writeErrors"][0]["index"] == 1
    assert r["writeErrors"][0]["code"] == 11000
    coll.delete_one({"_id": "o2"})
    r = raw(batch)
    assert r["n"] == 3 and r["retriedStmtIds"] == [0] and "writeErrors" not in r
    assert coll.count_documents({"_id": {"$in": ["o1", "o2", "o3"]}}) == 3
    raw.close()


def test_an_update_that_changes_the_shard_key(mc):
    """Within its shard it is a retryable write like any other; moving the document to the
    other shard runs as an internal transaction (test_internal_transactions.py)."""
    raw = Raw(mc.router)
    coll = mc.router_client()[DB].c
    coll.insert_one({"_id": "k1", "x": -51})
    upd = {"update": "c", "updates": [{"q": {"_id": "k1", "x": -51}, "u": {"$set": {"x": -52}}}],
           "txnNumber": Int64(1)}
    assert raw(upd)["nModified"] == 1
    assert raw(upd)["retriedStmtIds"] == [0]
    assert coll.find_one({"_id": "k1"})["x"] == -52
    r = raw({"update": "c", "updates": [{"q": {"_id": "k1", "x": -52}, "u": {"$set": {"x": 52}}}],
             "txnNumber": Int64(2)})
    assert r["n"] == 1 and r["nModified"] == 1 and "writeErrors" not in r
    assert coll.find_one({"_id": "k1"})["x"] == 52
    raw.close()


# ---------------------------------------------------------------- the router's own retries


def test_the_router_repeats_a_failed_shard_request_and_it_applies_once(mc):
    raw = Raw(mc.router)
    coll = mc.router_client()[DB].c
    shard = mc.shard_client(mc.pos)
    # The connection to the shard closes twice: the third try goes through.
    n0 = _shard_fail(mc, mc.pos, {"times": 2}, failCommands=["insert"], closeConnection=True)
    r = raw({"insert": "c", "documents": [{"_id": "r1", "x": 61}, {"_id": "r2", "x": -61}],
             "ordered": False, "txnNumber": Int64(1)})
    assert r == {"n": 2, "ok": 1.0}
    assert _fired(shard, n0) == 2
    # A shutdown error reply from the shard: tried again.
    _shard_fail(mc, mc.pos, {"times": 1}, failCommands=["update"], errorCode=91)
    r = raw({"update": "c", "updates": [{"q": {"x": 61}, "u": {"$inc": {"n": 1}}}],
             "txnNumber": Int64(2)})
    assert r == {"n": 1, "nModified": 1, "ok": 1.0}
    # A writeConcernError with a retriable code after the write ran: the router sends it
    # again, the shard answers from its history, and the write applies once.
    _shard_fail(mc, mc.pos, {"times": 1}, failCommands=["update"],
                writeConcernError={"code": 91, "errmsg": "Replication is being shut down"})
    r = raw({"update": "c", "updates": [{"q": {"x": 61}, "u": {"$inc": {"n": 1}}}],
             "txnNumber": Int64(3)})
    assert r == {"n": 1, "nModified": 1, "retriedStmtIds": [0], "ok": 1.0}
    assert coll.find_one({"x": 61})["n"] == 2
    # findAndModify is repeated the same way.
    _shard_fail(mc, mc.pos, {"times": 1}, failCommands=["findAndModify"],
                writeConcernError={"code": 189, "errmsg": "stepped down"})
    r = raw({"findAndModify": "c", "query": {"x": 61}, "update": {"$inc": {"n": 1}},
             "new": True, "txnNumber": Int64(4)})
    assert r["value"]["n"] == 3 and "writeConcernError" not in r
    assert coll.find_one({"x": 61})["n"] == 3
    raw.close()


def test_the_router_tries_three_more_times_then_reports_the_statements(mc):
    raw = Raw(mc.router)
    shard = mc.shard_client(mc.pos)
    n0 = _shard_fail(mc, mc.pos, {"times": 100}, failCommands=["insert"], errorCode=91)
    r = raw({"insert": "c", "documents": [{"_id": "t1", "x": -71}, {"_id": "t2", "x": 71},
                                          {"_id": "t3", "x": 72}],
             "ordered": False, "txnNumber": Int64(1)})
    assert _fired(shard, n0) == 4
    # The shard's shutdown error is a state change the router does not pass on as such:
    # HostUnreachable, on each statement of that shard; no labels from a router.
    assert r["n"] == 1 and "errorLabels" not in r
    assert [(e["index"], e["code"]) for e in r["writeErrors"]] == [(1, 6), (2, 6)]
    # Not a retryable write: one try only.
    n0 = _shard_fail(mc, mc.pos, {"times": 100}, failCommands=["insert"], errorCode=91)
    r = raw({"insert": "c", "documents": [{"_id": "t4", "x": 74}]})
    assert _fired(shard, n0) == 1
    assert r["writeErrors"][0]["code"] == 6
    # Write errors are never repeated.
    n0 = _shard_fail(mc, mc.pos, {"times": 100}, failCommands=["insert"], errorCode=2)
    r = raw({"insert": "c", "documents": [{"_id": "t5", "x": 75}], "txnNumber": Int64(2)})
    assert _fired(shard, n0) == 1 and r["writeErrors"][0]["code"] == 2
    raw.close()


def test_an_unreachable_shard_fails_its_statements_with_mongodbs_message(mc):
    raw = Raw(mc.router)
    shard = mc.shard_client(mc.pos)
    n0 = _shard_fail(mc, mc.pos, {"times": 100}, failCommands=["insert"],
                     closeConnection=True)
    r = raw({"insert": "c", "documents": [{"_id": "u1", "x": -81}, {"_id": "u2", "x": 81}],
             "ordered": False, "txnNumber": Int64(1)})
    assert _fired(shard, n0) == 4
    assert r["n"] == 1 and len(r["writeErrors"]) == 1
    err = r["writeErrors"][0]
    assert err["index"] == 1
    assert err["errmsg"].startswith("Write results unavailable from %s :: caused by :: " %
                                    mc.shards[mc.pos].host), err
    assert "errorLabels" not in r
    # findAndModify: the network error is the command's, without a label.
    n0 = _shard_fail(mc, mc.pos, {"times": 100}, failCommands=["findAndModify"],
                     closeConnection=True)
    r = raw({"findAndModify": "c", "query": {"x": 81}, "remove": True, "txnNumber": Int64(2)})
    assert _fired(shard, n0) == 4
    assert r["ok"] == 0.0 and "errorLabels" not in r
    raw.close()


# ---------------------------------------------------------------- labels


def test_labels_as_a_router_attaches_them(mc):
    raw = Raw(mc.router)
    shard = mc.shard_client(mc.pos)
    # A shard's error with a label (here injected by failCommand) reaches the client
    # without it: mongos never labels a shard's error RetryableWriteError.
    _shard_fail(mc, mc.pos, {"times": 1}, failCommands=["findAndModify"], errorCode=2,
                errorLabels=["RetryableWriteError"])
    r = raw({"findAndModify": "c", "query": {"x": 91}, "update": {"$set": {"a": 1}},
             "upsert": True, "txnNumber": Int64(1)})
    assert r["code"] == 2 and "errorLabels" not in r
    # A not-primary error the shard keeps answering: HostUnreachable, no label.
    n0 = _shard_fail(mc, mc.pos, {"times": 100}, failCommands=["findAndModify"],
                     errorCode=10107)
    r = raw({"findAndModify": "c", "query": {"x": 91}, "update": {"$set": {"a": 1}},
             "upsert": True, "txnNumber": Int64(2)})
    assert _fired(shard, n0) == 4
    assert r["code"] == 6 and r["codeName"] == "HostUnreachable" and "errorLabels" not in r
    # failCommand on the router itself: its errorLabels are the reply's labels; without
    # them a router attaches none to a shutdown code while it is not shutting down.
    _router_fail(mc, {"times": 1}, failCommands=["insert"], errorCode=91)
    r = raw({"insert": "c", "documents": [{"x": 92}], "txnNumber": Int64(3)})
    assert r["code"] == 91 and "errorLabels" not in r
    _router_fail(mc, {"times": 1}, failCommands=["insert"], errorCode=91,
                 errorLabels=["RetryableWriteError"])
    r = raw({"insert": "c", "documents": [{"x": 92}], "txnNumber": Int64(4)})
    assert r["code"] == 91 and r["errorLabels"] == ["RetryableWriteError"]
    # allowRewriteStateChange: the router's own injected error is rewritten all the same.
    _router_fail(mc, {"times": 1}, failCommands=["insert"], errorCode=10107,
                 allowRewriteStateChange=True)
    r = raw({"insert": "c", "documents": [{"x": 92}], "txnNumber": Int64(5)})
    assert r["code"] == 6
    assert mc.router_client()[DB].c.count_documents({"x": 92}) == 0
    raw.close()


def test_a_shard_labels_nothing_for_an_internal_client(mc):
    """Shards attach RetryableWriteError for drivers, not for routers or other nodes (which
    say internalClient in their hello)."""
    shard = mc.shard_client(mc.pos)
    ins = {"insert": "direct", "documents": [{"x": 1}], "txnNumber": Int64(1)}
    # As a driver: labelled.
    as_driver = Raw(mc.shards[mc.pos])
    fail_point(shard, "failCommand", {"times": 1}, {"failCommands": ["insert"], "errorCode": 189})
    r = as_driver(ins)
    assert r["code"] == 189 and r["errorLabels"] == ["RetryableWriteError"]
    as_driver.close()
    # As a router: not labelled.
    as_router = Raw(mc.shards[mc.pos])
    hello = wire_util.command(as_router.sock, {
        "hello": 1, "internalClient": {"minWireVersion": 0, "maxWireVersion": 21},
        "$db": "admin"})
    assert hello["ok"] == 1.0
    fail_point(shard, "failCommand", {"times": 1},
               {"failCommands": ["insert"], "errorCode": 189, "failInternalCommands": True})
    r = as_router(dict(ins, txnNumber=Int64(2)))
    assert r["code"] == 189 and "errorLabels" not in r
    as_router.close()


# ---------------------------------------------------------------- failCommand on the router


def test_fail_command_fields_on_the_router(mc):
    client = mc.router_client()
    rr = mc.router_client(appname="rr-victim")
    # A command's alias matches its name; namespace filters by "db.coll".
    _router_fail(mc, {"times": 1}, failCommands=["findandmodify"], errorCode=2)
    with pytest.raises(OperationFailure) as e:
        client[DB].c.find_one_and_update({"x": 101}, {"$set": {"a": 1}})
    assert e.value.code == 2
    assert e.value.details["errmsg"] == "Failing command via 'failCommand' failpoint"
    _router_fail(mc, {"times": 1}, failCommands=["find"], errorCode=2,
                 namespace=DB + ".other")
    client[DB].c.find_one({"x": 101})
    with pytest.raises(OperationFailure):
        client[DB].other.find_one({})
    rr.admin.command("ping")  # connected before: the handshake is not what fails
    _router_fail(mc, {"times": 1}, failAllCommands=True, errorCode=2, appName="rr-victim",
                 namespace=DB + ".fac")
    client[DB].fac.find_one({})
    with pytest.raises(OperationFailure):
        rr[DB].fac.find_one({})
    # errorExtraInfo goes into the error reply.
    _router_fail(mc, {"times": 1}, failCommands=["ping"], errorCode=2,
                 errorExtraInfo={"detail": "x"})
    with pytest.raises(OperationFailure) as e:
        client.admin.command("ping")
    assert e.value.details["detail"] == "x"
    # blockConnection needs blockTimeMS.
    _router_fail(mc, {"times": 1}, failCommands=["ping"], blockConnection=True)
    with pytest.raises(OperationFailure) as e:
        client.admin.command("ping")
    assert e.value.code == 72 and "blockTimeMS" in e.value.details["errmsg"]
    # Labels alone ask for nothing: the fail point does not fire.
    n0 = _router_fail(mc, {"times": 1}, failCommands=["ping"], errorLabels=["X"])
    client.admin.command("ping")
    assert _fired(client, n0) == 0


def test_close_connection_on_the_router(mc):
    sock = wire_util.connect(mc.router.port)
    _router_fail(mc, {"times": 1}, failCommands=["insert"], closeConnection=True)
    sock.sendall(wire_util.op_msg({"insert": "c", "documents": [{"_id": "cc", "x": 111}],
                                   "$db": DB}))
    assert wire_util.is_closed(sock)
    sock.close()
    assert mc.router_client()[DB].c.count_documents({"_id": "cc"}) == 0


def test_drivers_retry_through_the_router_and_the_write_applies_once(mc):
    client = mc.router_client(retryWrites=True)
    coll = client[DB].c
    coll.insert_one({"_id": "d", "x": 121, "n": 0})
    # The router closes the connection: pymongo retries with the same txnNumber.
    _router_fail(mc, {"times": 1}, failCommands=["update"], closeConnection=True)
    coll.update_one({"x": 121}, {"$inc": {"n": 1}})
    # ShutdownInProgress with the label, before the write runs: retried.
    _router_fail(mc, {"times": 1}, failCommands=["insert"], errorCode=91,
                 errorLabels=["RetryableWriteError"])
    coll.insert_one({"_id": "e", "x": -121})
    _router_fail(mc, {"times": 1}, failCommands=["findAndModify"], errorCode=91,
                 errorLabels=["RetryableWriteError"])
    before = coll.find_one_and_update({"x": 121}, {"$inc": {"n": 1}})
    assert before["n"] == 1
    # A writeConcernError with the label after the write ran (pymongo 3.11 reads the label
    # inside writeConcernError; MongoDB puts failCommand's errorLabels at the top level): the
    # retry is answered from the shard's history.
    wce = {"code": 91, "errmsg": "Replication is being shut down",
           "errorLabels": ["RetryableWriteError"]}
    _router_fail(mc, {"times": 1}, failCommands=["update"], writeConcernError=wce,
                 errorLabels=["RetryableWriteError"])
    coll.update_one({"x": 121}, {"$inc": {"n": 1}})
    _router_fail(mc, {"times": 1}, failCommands=["insert"], writeConcernError=wce,
                 errorLabels=["RetryableWriteError"])
    coll.insert_one({"_id": "f", "x": 122})
    assert coll.find_one({"x": 121})["n"] == 3
    assert coll.count_documents({"_id": {"$in": ["d", "e", "f"]}}) == 3
    _fired(client, 0)


def test_the_write_concern_error_keeps_its_labels_at_the_top_level(mc):
    raw = Raw(mc.router)
    _router_fail(mc, {"times": 1}, failCommands=["insert"],
                 writeConcernError={"code": 91, "errmsg": "Replication is being shut down"},
                 errorLabels=["RetryableWriteError"])
    ins = {"insert": "c", "documents": [{"_id": "w1", "x": 131}], "txnNumber": Int64(1)}
    r = raw(ins)
    assert r["n"] == 1 and r["writeConcernError"]["code"] == 91
    assert r["errorLabels"] == ["RetryableWriteError"]
    r = raw(ins)
    assert r == {"n": 1, "retriedStmtIds": [0], "ok": 1.0}
    # Without errorLabels a router labels no writeConcernError.
    _router_fail(mc, {"times": 1}, failCommands=["insert"],
                 writeConcernError={"code": 91, "errmsg": "Replication is being shut down"})
    r = raw(dict(ins, txnNumber=Int64(2), documents=[{"_id": "w2", "x": 132}]))
    assert r["writeConcernError"]["code"] == 91 and "errorLabels" not in r
    assert mc.router_client()[DB].c.count_documents({"_id": {"$in": ["w1", "w2"]}}) == 2
    raw.close()


# ---------------------------------------------------------------- bad input


def test_bad_session_arguments_through_the_router_write_nothing(mc):
    raw = Raw(mc.router)
    coll = mc.router_client()[DB].bad
    ins = {"insert": "bad", "documents": [{"_id": 1, "x": 1}]}

    def code(cmd, **kw):
        r = raw(cmd, **kw)
        return r.get("code"), r.get("errmsg", "")
    sock = wire_util.connect(mc.router.port)
    r = wire_util.command(sock, dict(ins, txnNumber=Int64(1), **{"$db": DB}))
    assert r["code"] == 72
    assert r["errmsg"] == "Transaction number requires a session ID to also be specified"
    sock.close()
    assert code(ins, lsid="x")[0] == 14
    assert code(ins, lsid={})[0] == 40414
    assert code(ins, lsid={"id": 5})[0] == 14
    assert code(ins, lsid={"id": Binary(uuid.uuid4().bytes, 4), "foo": 1})[0] == 40415
    assert code(ins, txnNumber=1)[0] == 14  # only a long
    c, msg = code({"find": "bad"}, txnNumber=Int64(1))
    assert c == 50768 and "find is not a retryable write command" in msg
    # The client's statement ids must match its statements.
    assert code(dict(ins, stmtIds=[0, 1]), txnNumber=Int64(2))[0] == 16
    assert code(dict(ins, stmtIds=[0], stmtId=0), txnNumber=Int64(2))[0] == 72
    assert code(dict(ins, stmtIds=[0, 1]))[0] == 16
    # A retryable multi-update or limit: 0 delete fails its statement on every shard; the
    # other statements of an unordered batch run.
    coll.insert_many([{"_id": 10, "x": -1}, {"_id": 11, "x": 1}])
    r = raw({"update": "bad", "updates": [{"q": {}, "u": {"$set": {"a": 1}}, "multi": True},
                                          {"q": {"_id": 10}, "u": {"$set": {"b": 1}}}],
             "ordered": False, "txnNumber": Int64(3)})
    assert r["ok"] == 1.0 and r["n"] == 1
    assert [(e["index"], e["code"]) for e in r["writeErrors"]] == [(0, 72)]
    assert r["writeErrors"][0]["errmsg"] == \
        "Cannot use (or request) retryable writes with multi=true"
    r = raw({"delete": "bad", "deletes": [{"q": {}, "limit": 0}], "txnNumber": Int64(4)})
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == 72
    assert r["writeErrors"][0]["errmsg"] == \
        "Cannot use (or request) retryable writes with limit=0"
    assert coll.count_documents({}) == 2 and coll.count_documents({"a": 1}) == 0
    assert coll.count_documents({"b": 1}) == 1
    raw.close()
