"""User write blocking (setUserWriteBlockMode, UserWritesBlocked 371) on a single node.

Shale has no authentication yet; with auth off MongoDB lets every client bypass write
blocking, so these tests switch on the fail point userWriteBlockingTreatClientsAsUnprivileged,
which stands for "an authenticated user without bypassWriteBlockingMode"."""

import datetime

import pymongo
from bson import Int64
import pytest
from pymongo.errors import BulkWriteError, OperationFailure

from shale_fixtures import fail_point, wait_until

BLOCKED = 371


def _unprivileged(c):
    fail_point(c, "userWriteBlockingTreatClientsAsUnprivileged", "alwaysOn")


def _assert_blocked(fn):
    """UserWritesBlocked as a command error (DDL, findAndModify, $out)."""
    with pytest.raises(OperationFailure) as e:
        fn()
    assert e.value.code == BLOCKED, e.value.details
    return e.value


def _assert_write_errors(fn, indexes):
    """UserWritesBlocked as the write errors of the statements 'indexes' (CRUD, as MongoDB
    reports it)."""
    with pytest.raises(BulkWriteError) as e:
        fn()
    errs = e.value.details["writeErrors"]
    assert [(w["index"], w["code"]) for w in errs] == [(i, BLOCKED) for i in indexes], errs
    assert e.value.details["nInserted"] + e.value.details["nModified"] + \
        e.value.details["nRemoved"] == 0


def _mode(c):
    return c.admin.command("serverStatus")["repl"]["userWriteBlockMode"]


def test_bad_input(node):
    c = node.client()
    with pytest.raises(OperationFailure) as e:
        c.admin.command("setUserWriteBlockMode", 1)
    assert e.value.code == 40414
    assert "global" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        c.admin.command("setUserWriteBlockMode", 1, **{"global": 1})
    assert e.value.code == 14
    with pytest.raises(OperationFailure) as e:
        c.test.command("setUserWriteBlockMode", 1, **{"global": True})
    assert e.value.code == 13  # Unauthorized: admin only
    # a standalone has no replication to carry the mode (MongoDB refuses it too)
    with pytest.raises(OperationFailure) as e:
        c.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    assert e.value.code == 20
    assert "cannot be run on standalones" in str(e.value)


def test_every_write_path_blocked_and_reads_work(rs_node):
    c = rs_node.client()
    db = c.test
    db.c.insert_many([{"_id": i, "x": i} for i in range(3)])
    db.c.create_index("x")
    _unprivileged(c)
    c.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    assert _mode(c) == 2

    # writes: reported as write errors, like MongoDB
    ins = [pymongo.InsertOne({"_id": 10}), pymongo.InsertOne({"_id": 11})]
    upd = [pymongo.UpdateOne({"_id": 1}, {"$set": {"x": 5}}),
           pymongo.UpdateMany({}, {"$set": {"y": 1}})]
    dele = [pymongo.DeleteOne({"_id": 1}), pymongo.DeleteMany({})]
    for ops in (ins, upd, dele):
        _assert_write_errors(lambda: db.c.bulk_write(ops), [0])
        _assert_write_errors(lambda: db.c.bulk_write(ops, ordered=False), [0, 1])
    _assert_write_errors(lambda: db.c.bulk_write([pymongo.ReplaceOne({"_id": 2}, {"x": 0})]),
                         [0])
    _assert_blocked(lambda: db.c.find_one_and_update({"_id": 1}, {"$set": {"x": 9}}))
    _assert_blocked(lambda: list(db.c.aggregate([{"$out": "o"}])))
    # DDL
    _assert_blocked(lambda: db.create_collection("newc"))
    _assert_blocked(lambda: db.c.create_index("y"))
    _assert_blocked(lambda: db.c.drop_index("x_1"))
    _assert_blocked(lambda: db.command("collMod", "c", validator={}))
    _assert_blocked(lambda: c.admin.command("renameCollection", "test.c", to="test.d"))
    _assert_blocked(lambda: db.command("drop", "c"))
    _assert_blocked(lambda: db.command("dropDatabase", 1))

    # reads still work, nothing changed
    assert sorted(d["x"] for d in db.c.find()) == [0, 1, 2]
    assert db.c.count_documents({}) == 3
    assert db.c.distinct("x") == [0, 1, 2]
    # internal databases are not user writes
    c.admin.uwb_probe.insert_one({"ok": 1})
    c.config.uwb_probe.insert_one({"ok": 1})

    # idempotent; disabling restores writes
    c.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    c.admin.command("setUserWriteBlockMode", 1, **{"global": False})
    assert _mode(c) == 1
    db.c.insert_one({"_id": 10})
    db.c.update_one({"_id": 10}, {"$set": {"x": 1}})
    db.create_collection("newc")
    assert db.c.count_documents({}) == 4


def test_auth_off_clients_bypass_like_mongodb(rs_node):
    """Without auth every client may bypass write blocking (MongoDB's rule)."""
    c = rs_node.client()
    c.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    c.test.c.insert_one({"_id": 1})
    assert c.test.c.count_documents({}) == 1
    # a router's verdict carried as mayBypassWriteBlocking: false is honoured
    r = c.test.command({"insert": "c", "documents": [{"_id": 2}],
                        "mayBypassWriteBlocking": False})
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == BLOCKED


def test_state_survives_kill9(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="rsnode")
    c = node.client()
    c.test.c.insert_one({"_id": 1})
    c.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    node.kill()
    node.start()
    c = node.client()
    assert _mode(c) == 2
    _unprivileged(c)
    _assert_write_errors(lambda: c.test.c.bulk_write([pymongo.InsertOne({"_id": 2})]), [0])
    c.admin.command("setUserWriteBlockMode", 1, **{"global": False})
    c.test.c.insert_one({"_id": 2})
    assert c.test.c.count_documents({}) == 2


def test_ttl_and_retryable_bookkeeping_go_on_while_blocked(shale_process):
    node = shale_process(["node", "--replSet", "rs0", "--setParameter", "ttlMonitorSleepSecs=1"],
                         name="ttl")
    c = node.client()
    db = c.test
    db.t.create_index("at", expireAfterSeconds=0)
    db.t.insert_many([{"_id": i, "at": datetime.datetime(2000, 1, 1)} for i in range(5)])
    with c.start_session() as s:
        db.r.insert_one({"_id": 1}, session=s)
        # a retryable insert that ran before blocking, retried (same txnNumber) after it
        ran = {"insert": "r", "documents": [{"_id": 7}], "lsid": s.session_id,
               "txnNumber": Int64(99)}
        assert db.command(ran)["n"] == 1
        txn_before = c.config.transactions.count_documents({})
        _unprivileged(c)
        c.admin.command("setUserWriteBlockMode", 1, **{"global": True})
        # the TTL monitor is internal: it deletes the expired documents
        wait_until(lambda: db.t.count_documents({}) == 0, what="the TTL pass")
        # a new retryable write is refused; the session bookkeeping is untouched by that
        _assert_write_errors(lambda: db.r.bulk_write([pymongo.InsertOne({"_id": 2})],
                                                     session=s), [0])
        assert c.config.transactions.count_documents({}) == txn_before
        # the retry is answered from the session's history, not refused
        again = db.command(ran)
        assert again["n"] == 1 and "writeErrors" not in again, again
    c.admin.command("setUserWriteBlockMode", 1, **{"global": False})
    db.r.insert_one({"_id": 2})
    assert db.r.count_documents({}) == 3
