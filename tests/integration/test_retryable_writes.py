"""Retryable writes on a data node (issue 13 items 2, 3, 6, 7): a write sent again with the
same lsid and txnNumber has one effect and the same reply, statement by statement; the
session's history survives kill -9; findAndModify retries return the original document;
bad session arguments get MongoDB's errors and write nothing. Raw OP_MSG commands carry
the exact lsid (a driver would put its own session's in), and pymongo's own retries are
driven by failCommand."""

import threading
import uuid

import pymongo
import pytest
from bson import Binary, Int64
from pymongo.errors import OperationFailure

import wire_util
from shale_fixtures import fail_point, wait_until


def _lsid():
    return {"id": Binary(uuid.uuid4().bytes, 4)}


class Raw:
    """Raw commands on one connection, each with this session's lsid."""

    def __init__(self, node, lsid=None):
        self.sock = wire_util.connect(node.port)
        self.lsid = lsid or _lsid()

    def __call__(self, cmd, db="test", **kw):
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
    """A retry's reply is the original's plus retriedStmtIds (retriedStmtId for
    findAndModify)."""
    second = dict(second)
    second.pop("retriedStmtIds", None)
    second.pop("retriedStmtId", None)
    return first == second


@pytest.fixture(scope="module")
def rs(request):
    from shale_fixtures import ShaleProcess, stop_all
    p = ShaleProcess(["node", "--replSet", "rs0"], name="rw").start()
    yield p
    stop_all([p])
    p.cleanup()


def test_each_write_kind_sent_twice_has_one_effect(rs):
    raw = Raw(rs)
    coll = rs.client().test.kinds
    ins = {"insert": "kinds", "documents": [{"_id": 1, "v": 1}, {"_id": 2, "v": 1}],
           "txnNumber": Int64(1)}
    first = raw(ins)
    stats = rs.client().admin.command("serverStatus")["transactions"]
    top = rs.client().local.oplog.rs.find_one(sort=[("$natural", -1)])["ts"]
    again = raw(ins)
    assert first["n"] == 2 and _same(first, again) and again["retriedStmtIds"] == [0, 1]
    # A retry writes nothing: no oplog entry, no config.transactions write (MongoDB's
    # serverStatus counters say so too).
    after = rs.client().admin.command("serverStatus")["transactions"]
    assert rs.client().local.oplog.rs.find_one(sort=[("$natural", -1)])["ts"] == top
    assert after["retriedCommandsCount"] == stats["retriedCommandsCount"] + 1
    assert after["retriedStatementsCount"] == stats["retriedStatementsCount"] + 2
    assert after["transactionsCollectionWriteCount"] == stats["transactionsCollectionWriteCount"]
    upd = {"update": "kinds", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"v": 1}}},
                                          {"q": {"_id": 3}, "u": {"$inc": {"v": 5}},
                                           "upsert": True}],
           "txnNumber": Int64(2)}
    first = raw(upd)
    again = raw(upd)
    assert first["n"] == 2 and first["nModified"] == 1
    assert first["upserted"] == [{"index": 1, "_id": 3}]
    assert _same(first, again) and again["retriedStmtIds"] == [0, 1]
    dele = {"delete": "kinds", "deletes": [{"q": {"_id": 2}, "limit": 1}], "txnNumber": Int64(3)}
    first = raw(dele)
    again = raw(dele)
    assert first["n"] == 1 and _same(first, again)
    assert sorted((d["_id"], d["v"]) for d in coll.find()) == [(1, 2), (3, 5)]
    # The history is in the oplog and config.transactions, as MongoDB keeps it.
    rec = rs.client(uuidRepresentation="standard").config.transactions.find_one(
        {"_id.id": uuid.UUID(bytes=bytes(raw.lsid["id"]))})
    assert rec["txnNum"] == 3 and "lastWriteOpTime" in rec and "lastWriteDate" in rec
    entries = list(rs.client().local.oplog.rs.find({"txnNumber": 2, "ns": "test.kinds"}).sort(
        "ts", 1))
    assert [e["stmtId"] for e in entries] == [0, 1]
    assert entries[1]["prevOpTime"]["ts"] == entries[0]["ts"]
    assert entries[0]["prevOpTime"]["ts"].time == 0
    raw.close()


def test_a_partly_run_batch_runs_the_rest_on_retry(rs):
    raw = Raw(rs)
    coll = rs.client().test.partly
    r = raw({"insert": "partly", "documents": [{"_id": 1}], "txnNumber": Int64(5)})
    assert r["n"] == 1
    # The retry carries the whole batch: statement 0 is answered, 1 and 2 run now.
    r = raw({"insert": "partly", "documents": [{"_id": 1}, {"_id": 2}, {"_id": 3}],
             "txnNumber": Int64(5)})
    assert r["n"] == 3 and r["retriedStmtIds"] == [0]
    assert coll.count_documents({}) == 3
    # An ordered batch stopped by an error is retried from where it stopped.
    coll.insert_one({"_id": 11})
    batch = {"insert": "partly", "documents": [{"_id": 10}, {"_id": 11}, {"_id": 12}],
             "txnNumber": Int64(6)}
    r = raw(batch)
    assert r["n"] == 1 and r["writeErrors"][0]["index"] == 1
    coll.delete_one({"_id": 11})
    r = raw(batch)
    assert r["n"] == 3 and r["retriedStmtIds"] == [0] and "writeErrors" not in r
    assert sorted(d["_id"] for d in coll.find({"_id": {"$gte": 10}})) == [10, 11, 12]
    raw.close()


def test_an_older_txn_number_is_too_old(rs):
    raw = Raw(rs)
    assert raw({"insert": "old", "documents": [{"_id": 1}], "txnNumber": Int64(10)})["ok"] == 1
    assert raw({"insert": "old", "documents": [{"_id": 2}], "txnNumber": Int64(11)})["ok"] == 1
    r = raw({"insert": "old", "documents": [{"_id": 3}], "txnNumber": Int64(10)})
    assert r["code"] == 225 and r["codeName"] == "TransactionTooOld"
    assert rs.client().test.old.count_documents({}) == 2
    raw.close()


def test_find_and_modify_retries_return_the_original_document(rs):
    raw = Raw(rs)
    coll = rs.client().test.fam
    coll.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    cases = [
        {"findAndModify": "fam", "query": {"_id": 1}, "update": {"$inc": {"v": 10}}},
        {"findAndModify": "fam", "query": {"_id": 1}, "update": {"$inc": {"v": 10}},
         "new": True, "fields": {"v": 1, "_id": 0}},
        {"findAndModify": "fam", "query": {"_id": 2}, "remove": True},
        {"findAndModify": "fam", "query": {"_id": 5}, "update": {"$set": {"x": 1}},
         "upsert": True, "new": True},
        {"findAndModify": "fam", "query": {"_id": 6}, "update": {"$set": {"x": 1}},
         "upsert": True},
    ]
    replies = []
    for i, cmd in enumerate(cases):
        cmd = dict(cmd, txnNumber=Int64(20 + i))
        first = raw(cmd)
        again = raw(cmd)
        assert first["ok"] == 1 and _same(first, again), (cmd, first, again)
        assert "retriedStmtId" not in first and again["retriedStmtId"] == 0
        replies.append(first)
    assert replies[0]["value"] == {"_id": 1, "v": 1}
    assert replies[1]["value"] == {"v": 21}
    assert replies[2]["value"] == {"_id": 2, "v": 2} and replies[2]["lastErrorObject"] == {"n": 1}
    assert replies[3]["lastErrorObject"]["upserted"] == 5 and replies[3]["value"] == {"_id": 5,
                                                                                          "x": 1}
    assert replies[4]["value"] is None
    assert sorted((d["_id"], d.get("v")) for d in coll.find()) == [(1, 21), (5, None), (6, None)]
    # A retry that asks for something else than the original did is refused.
    r = raw(dict(cases[4], txnNumber=Int64(24), upsert=False))
    assert r["code"] == 40608
    assert raw(dict(cases[0], txnNumber=Int64(25)))["value"] == {"_id": 1, "v": 21}
    assert raw(dict(cases[0], txnNumber=Int64(25), new=True))["code"] == 40611
    remove = {k: v for k, v in cases[0].items() if k != "update"}
    assert raw(dict(remove, txnNumber=Int64(25), remove=True))["code"] == 40609
    assert coll.find_one({"_id": 1})["v"] == 31
    # The image is kept as MongoDB keeps it, in config.image_collection.
    img = rs.client(uuidRepresentation="standard").config.image_collection.find_one(
        {"_id.id": uuid.UUID(bytes=bytes(raw.lsid["id"]))})
    assert img["imageKind"] == "preImage" and img["image"] == {"_id": 1, "v": 21}
    assert img["txnNum"] == 25 and img["invalidated"] is False
    raw.close()


def test_bad_session_arguments_get_mongodb_errors_and_write_nothing(rs, shale_process):
    raw = Raw(rs)
    ins = {"insert": "bad", "documents": [{"_id": 1}]}

    def code(cmd, **kw):
        r = raw(cmd, **kw)
        return r.get("code"), r.get("errmsg", "")
    sock = wire_util.connect(rs.port)
    r = wire_util.command(sock, dict(ins, txnNumber=Int64(1), **{"$db": "test"}))
    assert r["code"] == 72 and "requires a session ID" in r["errmsg"]
    assert code(ins, txnNumber=Int64(-1)) == (72, "Transaction number cannot be negative")
    assert code(ins, txnNumber="1")[0] == 14
    assert code(ins, txnNumber=1)[0] == 14  # an int32: MongoDB takes only a long
    assert code({"ping": 1}, txnNumber=Int64(1))[0] == 50889
    assert code(ins, lsid="x")[0] == 14
    assert code(ins, lsid={"id": "not a uuid"}) == (
        14, "BSON field 'OperationSessionInfo.lsid.id' is the wrong type 'string', expected type "
            "'binData'")
    assert code(ins, lsid={"id": Binary(uuid.uuid4().bytes, 0)})[0] == 14
    assert code(ins, lsid={"id": Binary(b"short", 4)})[0] == 207
    assert code(ins, lsid={})[0] == 40414
    assert code(ins, lsid={"id": Binary(uuid.uuid4().bytes, 4), "extra": 1})[0] == 40415
    assert code({"find": "bad"}, txnNumber=Int64(1))[0] == 50768
    assert code(dict(ins, stmtIds=[0, 1]), txnNumber=Int64(2))[0] == 16
    assert code(dict(ins, stmtIds=["a"]), txnNumber=Int64(2))[0] == 14
    r = raw({"update": "bad", "updates": [{"q": {}, "u": {"$set": {"a": 1}}, "multi": True}],
             "txnNumber": Int64(3)})
    assert r["writeErrors"][0]["code"] == 72
    r = raw({"delete": "bad", "deletes": [{"q": {}, "limit": 0}], "txnNumber": Int64(4)})
    assert r["writeErrors"][0]["code"] == 72
    assert rs.client().test.bad.count_documents({}) == 0
    # A standalone refuses transaction numbers.
    standalone = shale_process(["node"], name="standalone")
    r = wire_util.command(wire_util.connect(standalone.port),
                          dict(ins, lsid=_lsid(), txnNumber=Int64(1), **{"$db": "test"}))
    assert r["code"] == 20
    assert standalone.client().test.bad.count_documents({}) == 0
    sock.close()
    raw.close()


def test_two_operations_on_one_session_run_one_after_the_other(rs):
    lsid = _lsid()
    raw = Raw(rs, lsid)
    client = rs.client()
    # The first holds its session checked out while failCommand blocks it.
    fail_point(client, "failCommand", {"times": 1},
               {"failCommands": ["insert"], "blockConnection": True, "blockTimeMS": 1500})
    results = {}

    def first():
        r = Raw(rs, lsid)
        results["first"] = r({"insert": "race", "documents": [{"_id": 1}],
                              "txnNumber": Int64(1)})
        r.close()
    t = threading.Thread(target=first)
    t.start()
    wait_until(lambda: any(o.get("command", {}).get("insert") == "race"
                           for o in client.admin.aggregate([{"$currentOp": {}}])),
               what="the first insert to run")
    # A second operation on the session waits for it; with a time limit it gives up.
    r = raw({"insert": "race", "documents": [{"_id": 1}], "txnNumber": Int64(1),
             "maxTimeMS": 200})
    assert r["code"] == 50
    # Without one it waits, then is answered from the first's result.
    r = raw({"insert": "race", "documents": [{"_id": 1}], "txnNumber": Int64(1)})
    t.join()
    assert results["first"]["n"] == 1 and r["n"] == 1 and r["retriedStmtIds"] == [0]
    assert client.test.race.count_documents({}) == 1
    raw.close()


def test_drivers_retry_by_themselves_and_the_write_applies_once(rs):
    client = rs.client(retryWrites=True)
    coll = client.test.driver
    coll.insert_one({"_id": "c", "n": 0})
    admin = rs.client()
    # failCommand closes the connection: pymongo retries on a new one with the same
    # txnNumber.
    fail_point(admin, "failCommand", {"times": 1},
               {"failCommands": ["update"], "closeConnection": True})
    coll.update_one({"_id": "c"}, {"$inc": {"n": 1}})
    # ShutdownInProgress (91) before the write runs, labelled by the node: retried.
    fail_point(admin, "failCommand", {"times": 1}, {"failCommands": ["insert"], "errorCode": 91})
    coll.insert_one({"_id": "d"})
    fail_point(admin, "failCommand", {"times": 1},
               {"failCommands": ["findAndModify"], "errorCode": 91})
    before = coll.find_one_and_update({"_id": "c"}, {"$inc": {"n": 1}})
    assert before["n"] == 1
    assert coll.find_one({"_id": "c"})["n"] == 2
    assert coll.count_documents({}) == 2
    fail_point(admin, "failCommand", "off")


def test_a_write_concern_error_carries_the_label_at_the_top_level(rs):
    """After the write ran, a retriable writeConcernError is labelled at the reply's top level
    (pymongo 3.11 does not read it there; the Node driver test retries on it), and the retry
    is answered from history, not applied again."""
    raw = Raw(rs)
    admin = rs.client()
    fail_point(admin, "failCommand", {"times": 1},
               {"failCommands": ["update"],
                "writeConcernError": {"code": 91, "errmsg": "Replication is being shut down"}})
    upd = {"update": "wce", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}},
                                         "upsert": True}], "txnNumber": Int64(1)}
    r = raw(upd)
    assert r["writeConcernError"]["code"] == 91 and r["errorLabels"] == ["RetryableWriteError"]
    assert raw(upd)["retriedStmtIds"] == [0]
    # failCommand's own labels replace the node's, and go with the writeConcernError.
    fail_point(admin, "failCommand", {"times": 1},
               {"failCommands": ["update"], "errorLabels": ["Custom"],
                "writeConcernError": {"code": 64, "errmsg": "waiting for replication timed out"}})
    r = raw(dict(upd, txnNumber=Int64(2)))
    assert r["writeConcernError"]["code"] == 64 and r["errorLabels"] == ["Custom"]
    assert rs.client().test.wce.find_one({"_id": 1})["n"] == 2
    raw.close()


def test_retryable_error_labels_on_a_node(rs):
    raw = Raw(rs)
    admin = rs.client()
    fail_point(admin, "failCommand", {"times": 1}, {"failCommands": ["insert"], "errorCode": 10107})
    r = raw({"insert": "labels", "documents": [{"_id": 1}], "txnNumber": Int64(1)})
    assert r["code"] == 10107 and r["errorLabels"] == ["RetryableWriteError"]
    # Not a retryable write: no label.
    fail_point(admin, "failCommand", {"times": 1}, {"failCommands": ["insert"], "errorCode": 10107})
    r = raw({"insert": "labels", "documents": [{"_id": 1}]})
    assert r["code"] == 10107 and "errorLabels" not in r
    # A non-retriable error: no label.
    fail_point(admin, "failCommand", {"times": 1}, {"failCommands": ["insert"], "errorCode": 2})
    r = raw({"insert": "labels", "documents": [{"_id": 1}], "txnNumber": Int64(2)})
    assert r["code"] == 2 and "errorLabels" not in r
    raw.close()


def test_history_survives_kill9_and_restart(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="rwkill")
    raw, raw2 = Raw(node), Raw(node)
    ins = {"insert": "k", "documents": [{"_id": i} for i in range(5)], "txnNumber": Int64(7)}
    assert raw(dict(ins, writeConcern={"j": True}))["n"] == 5
    fam = {"findAndModify": "k", "query": {"_id": 1}, "update": {"$set": {"x": 1}},
           "txnNumber": Int64(3), "writeConcern": {"j": True}}
    first = raw2(fam)
    raw.close()
    raw2.close()
    node.kill()
    node.start()
    raw, raw2 = Raw(node, raw.lsid), Raw(node, raw2.lsid)
    r = raw(ins)
    assert r["n"] == 5 and r["retriedStmtIds"] == [0, 1, 2, 3, 4] and "writeErrors" not in r
    assert _same(first, raw2(fam))
    assert raw(dict(ins, txnNumber=Int64(6)))["code"] == 225
    assert node.client().test.k.count_documents({}) == 5
    assert node.client().test.k.find_one({"_id": 1}) == {"_id": 1, "x": 1}
    raw.close()
    raw2.close()


def test_a_truncated_history_answers_incomplete_transaction_history(shale_process):
    node = shale_process(["node", "--replSet", "rs0", "--oplogSize", "1"], name="rwtrunc")
    raw = Raw(node)
    ins = {"insert": "t", "documents": [{"_id": 1}, {"_id": 2}], "txnNumber": Int64(1)}
    upd = {"update": "t", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}],
           "txnNumber": Int64(2)}
    assert raw(ins)["n"] == 2
    client = node.client()
    pad = "x" * 10000

    def truncate():
        for i in range(30):
            client.test.filler.insert_many([{"p": pad} for _ in range(20)])
        client.admin.command("fsync")  # a checkpoint, which truncates the oplog
    truncate()
    assert client.local.oplog.rs.count_documents({"ns": "test.t"}) == 0
    # The session still knows which statements ran: an insert's retry needs no more.
    assert raw(ins)["retriedStmtIds"] == [0, 1]
    # An update's needs its entry to rebuild the result: gone.
    assert raw(upd)["nModified"] == 1
    truncate()
    r = raw(upd)
    assert r["code"] == 217 and r["codeName"] == "IncompleteTransactionHistory", r
    # After a restart the session's history is read from disk: incomplete, nothing known.
    raw.close()
    node.stop()
    node.start()
    raw = Raw(node, raw.lsid)
    assert raw(upd)["code"] == 217
    assert node.client().test.t.find_one({"_id": 1})["n"] == 1
    # A new retryable write on the session starts a complete history.
    assert raw(dict(ins, txnNumber=Int64(3), documents=[{"_id": 3}]))["n"] == 1
    raw.close()
