"""Tailable and awaitData cursors on capped collections and local.oplog.rs (MongoDB's
semantics): the cursor survives the end of the data, later getMores return documents
committed since, awaitData getMores wait (woken by commits, not by polling) up to
maxTimeMS (1 s by default) and return an empty batch on timeout; a capped collection
that wraps past the cursor's position kills it with CappedPositionLost."""

import threading
import time

import pymongo
import pytest
from bson.int64 import Int64
from bson.timestamp import Timestamp
from pymongo import CursorType
from pymongo.errors import OperationFailure

from shale_fixtures import wait_until


def _capped(db, name="cap", size=1 << 20, **kw):
    db.drop_collection(name)
    return db.create_collection(name, capped=True, size=size, **kw)


def _get_more(db, cid, coll, **kw):
    cmd = {"getMore": Int64(cid), "collection": coll}
    cmd.update(kw)
    return db.command(cmd)


def test_tailable_cursor_sees_later_inserts(node):
    db = node.client().test
    coll = _capped(db)
    coll.insert_many([{"_id": i} for i in range(3)])
    r = db.command({"find": "cap", "tailable": True})
    cur = r["cursor"]
    assert [d["_id"] for d in cur["firstBatch"]] == [0, 1, 2]
    assert cur["id"] != 0
    # At the end: the cursor stays open and an immediate getMore is empty.
    r = _get_more(db, cur["id"], "cap")
    assert r["cursor"]["nextBatch"] == [] and r["cursor"]["id"] == cur["id"]
    coll.insert_many([{"_id": 3}, {"_id": 4, "x": 1}])
    r = _get_more(db, cur["id"], "cap")
    assert [d["_id"] for d in r["cursor"]["nextBatch"]] == [3, 4]
    assert r["cursor"]["id"] == cur["id"]


def test_tailable_filter_projection_and_limit(node):
    db = node.client().test
    coll = _capped(db)
    coll.insert_many([{"_id": i, "even": i % 2 == 0, "pad": "x"} for i in range(6)])
    r = db.command({"find": "cap", "filter": {"even": True}, "projection": {"pad": 0},
                    "tailable": True, "batchSize": 2})
    assert r["cursor"]["firstBatch"] == [{"_id": 0, "even": True}, {"_id": 2, "even": True}]
    cid = r["cursor"]["id"]
    r = _get_more(db, cid, "cap")
    assert r["cursor"]["nextBatch"] == [{"_id": 4, "even": True}]
    coll.insert_many([{"_id": 6, "even": True}, {"_id": 7, "even": False}])
    r = _get_more(db, cid, "cap")
    assert r["cursor"]["nextBatch"] == [{"_id": 6, "even": True}]
    # With a limit the cursor ends once it has returned that many documents.
    r = db.command({"find": "cap", "tailable": True, "limit": 3, "batchSize": 2})
    assert len(r["cursor"]["firstBatch"]) == 2
    r = _get_more(db, r["cursor"]["id"], "cap")
    assert len(r["cursor"]["nextBatch"]) == 1 and r["cursor"]["id"] == 0


def test_tailable_errors(node):
    db = node.client().test
    db.plain.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "plain", "tailable": True})
    assert e.value.code == 2
    assert "tailable cursor requested on non capped collection" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "plain", "awaitData": True})
    assert e.value.code == 9
    assert "Cannot set 'awaitData' without also setting 'tailable'" in str(e.value)
    _capped(db)
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "cap", "tailable": True, "sort": {"_id": 1}})
    assert e.value.code == 2
    assert "cannot use tailable option with a sort other than {$natural: 1}" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "cap", "tailable": True, "singleBatch": True})
    assert e.value.code == 2
    # $natural: 1 is the only sort allowed.
    db.command({"find": "cap", "tailable": True, "sort": {"$natural": 1}})
    # A missing collection gives an exhausted cursor.
    r = db.command({"find": "nosuch", "tailable": True, "awaitData": True})
    assert r["cursor"]["id"] == 0
    # maxTimeMS on a getMore of a tailable cursor without awaitData is refused, and the
    # cursor survives the refusal.
    r = db.command({"find": "cap", "tailable": True})
    with pytest.raises(OperationFailure) as e:
        _get_more(db, r["cursor"]["id"], "cap", maxTimeMS=100)
    assert "non-awaitData" in str(e.value)
    _get_more(db, r["cursor"]["id"], "cap")


def test_await_data_times_out_with_empty_batch(node):
    db = node.client().test
    coll = _capped(db)
    coll.insert_one({"_id": 0})
    r = db.command({"find": "cap", "tailable": True, "awaitData": True})
    cid = r["cursor"]["id"]
    assert cid != 0
    t0 = time.monotonic()
    r = _get_more(db, cid, "cap", maxTimeMS=200)
    took = time.monotonic() - t0
    assert r["cursor"]["nextBatch"] == [] and r["cursor"]["id"] == cid
    assert 0.18 <= took < 1.0, took
    # Without maxTimeMS an awaitData getMore waits one second.
    t0 = time.monotonic()
    r = _get_more(db, cid, "cap")
    took = time.monotonic() - t0
    assert r["cursor"]["nextBatch"] == [] and r["cursor"]["id"] == cid
    assert 0.9 <= took < 2.0, took


def test_await_data_woken_by_insert_from_another_thread(node):
    client = node.client()
    db = client.test
    coll = _capped(db)
    coll.insert_one({"_id": 0})
    r = db.command({"find": "cap", "tailable": True, "awaitData": True})
    cid = r["cursor"]["id"]
    result = {}

    def waiter():
        t0 = time.monotonic()
        result["reply"] = _get_more(db, cid, "cap", maxTimeMS=20000)
        result["took"] = time.monotonic() - t0

    getmores = client.admin.command("serverStatus")["opcounters"]["getmore"]
    th = threading.Thread(target=waiter)
    th.start()
    # Once the getMore has arrived, give it time to reach its wait: the wake-up (not the
    # getMore's first look) must deliver the document.
    wait_until(lambda: client.admin.command("serverStatus")["opcounters"]["getmore"] > getmores,
               what="getMore started")
    time.sleep(0.3)
    # Writes to another collection do not end the wait.
    db.other.insert_one({"_id": 1})
    coll.insert_one({"_id": 1, "v": "new"})
    th.join(30)
    assert not th.is_alive()
    assert result["reply"]["cursor"]["nextBatch"] == [{"_id": 1, "v": "new"}]
    assert 0.3 <= result["took"] < 10, result["took"]


def test_pymongo_tailable_await_cursor(node):
    db = node.client().test
    coll = _capped(db)
    coll.insert_many([{"_id": i} for i in range(2)])
    cur = coll.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(100)
    assert [d["_id"] for d in cur] == [0, 1]
    # The iteration stopped at the end of the data; the cursor is still alive.
    assert cur.alive
    coll.insert_one({"_id": 2})
    assert [d["_id"] for d in cur] == [2]
    assert cur.alive
    cur.close()


def test_oplog_tailing_sees_new_entries_in_order(rs_node):
    client = rs_node.client()
    db = client.test
    oplog = client.local["oplog.rs"]
    db.t.insert_one({"_id": "start"})
    last = oplog.find().sort("$natural", -1).limit(1).next()["ts"]
    cur = oplog.find({"ts": {"$gt": last}}, cursor_type=CursorType.TAILABLE_AWAIT,
                     oplog_replay=True).max_await_time_ms(200)
    assert list(cur) == [] and cur.alive
    n = 50

    def writer():
        for i in range(n):
            db.t.insert_one({"_id": i})

    th = threading.Thread(target=writer)
    th.start()
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < n and time.monotonic() < deadline and cur.alive:
        seen.extend(d for d in cur if d["ns"] == "test.t")
    th.join()
    assert [d["o"]["_id"] for d in seen] == list(range(n))
    ts = [d["ts"] for d in seen]
    assert ts == sorted(ts) and len(set(ts)) == n
    assert all(isinstance(t, Timestamp) and t > last for t in ts)
    cur.close()


def test_capped_wrap_past_position_is_capped_position_lost(node):
    db = node.client().test
    coll = _capped(db, max=5, size=1 << 20)
    coll.insert_many([{"_id": i} for i in range(5)])
    r = db.command({"find": "cap", "tailable": True, "batchSize": 2})
    cid = r["cursor"]["id"]
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [0, 1]
    # Ten more inserts push every document the cursor knew out of the collection.
    for i in range(5, 15):
        coll.insert_one({"_id": i})
    with pytest.raises(OperationFailure) as e:
        _get_more(db, cid, "cap")
    assert e.value.code == 136
    # The dead cursor is gone.
    with pytest.raises(OperationFailure) as e:
        _get_more(db, cid, "cap")
    assert e.value.code == 43


def test_tailable_cursor_on_dropped_collection(node):
    db = node.client().test
    coll = _capped(db)
    coll.insert_one({"_id": 0})
    r = db.command({"find": "cap", "tailable": True, "awaitData": True})
    db.drop_collection("cap")
    with pytest.raises(OperationFailure):
        _get_more(db, r["cursor"]["id"], "cap", maxTimeMS=100)
