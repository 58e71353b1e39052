"""The data node's query executor seen through find/explain/count/distinct/update: stage
names, hinted index scans (bounds must never lose documents), maxTimeMS interrupting a
long scan, cursors and their limits, and find on local.oplog.rs."""

import time

import bson
import pytest
from pymongo.errors import ExecutionTimeout, OperationFailure

from shale_fixtures import wait_until


@pytest.fixture
def db(node):
    return node.client().test


def stages(plan):
    """Stage names from the root down."""
    out = []
    while plan:
        out.append(plan["stage"])
        plan = plan.get("inputStage")
    return out


def explain(db, **find):
    return db.command("explain", {"find": "c", **find}, verbosity="executionStats")


def test_explain_stage_names(db):
    db.c.insert_many([{"_id": i, "a": i % 10, "b": i} for i in range(100)])
    db.c.create_index("a")
    e = explain(db, filter={"_id": 5})
    assert stages(e["queryPlanner"]["winningPlan"]) == ["IDHACK"]
    assert e["executionStats"]["nReturned"] == 1
    assert e["executionStats"]["totalDocsExamined"] == 1
    e = explain(db, filter={"b": {"$gt": 90}})
    assert stages(e["queryPlanner"]["winningPlan"]) == ["COLLSCAN"]
    assert e["executionStats"]["totalDocsExamined"] == 100
    assert e["executionStats"]["nReturned"] == 9
    e = explain(db, filter={"a": 3}, hint="a_1")
    assert stages(e["queryPlanner"]["winningPlan"]) == ["FETCH", "IXSCAN"]
    assert e["executionStats"]["nReturned"] == 10
    assert e["executionStats"]["totalKeysExamined"] == 10  # bounds, not a full scan
    e = explain(db, filter={}, sort={"b": -1}, skip=2, limit=3, projection={"b": 1})
    assert stages(e["queryPlanner"]["winningPlan"]) == [
        "PROJECTION_SIMPLE", "LIMIT", "SKIP", "SORT", "COLLSCAN"]
    e = explain(db, filter={}, projection={"x.y": 1})
    assert stages(e["queryPlanner"]["winningPlan"])[0] == "PROJECTION_DEFAULT"
    e = db.command("explain", {"count": "c", "query": {"a": 1}}, verbosity="queryPlanner")
    # The planner's a_1 answers {a: 1} exactly: keys are counted, not fetched.
    assert stages(e["queryPlanner"]["winningPlan"]) == ["COUNT", "COUNT_SCAN"]
    e = db.command("explain", {"count": "c", "query": {"b": 1}}, verbosity="queryPlanner")
    assert stages(e["queryPlanner"]["winningPlan"]) == ["COUNT", "COLLSCAN"]
    e = db.command("explain", {"find": "nope"}, verbosity="queryPlanner")
    assert stages(e["queryPlanner"]["winningPlan"]) == ["EOF"]


def test_hinted_scans_return_what_a_collection_scan_returns(db):
    # Scalars, arrays (multikey), missing fields, mixed types, a descending index.
    docs = [{"_id": i, "a": v} for i, v in enumerate(
        [1, 5, 9, [1, 10], [6, 7], None, "x", 5.5, {"k": 1}, [], 12])]
    docs.append({"_id": 100})
    db.c.insert_many(docs)
    db.c.create_index([("a", 1)])
    db.c.create_index([("a", -1)], name="a_desc")
    filters = [{"a": 5}, {"a": {"$gt": 5}}, {"a": {"$gte": 5, "$lt": 9}},
               {"a": {"$gt": 5, "$lt": 9}}, {"a": {"$lte": 5}}, {"a": None},
               {"a": {"$eq": [1, 10]}}, {"a": "x"}, {"a": {"$in": [1, 9]}}, {"a": {"k": 1}},
               {"a": {"$gt": 5}, "_id": {"$lt": 5}}]
    for f in filters:
        want = sorted(d["_id"] for d in db.c.find(f).hint([("$natural", 1)]))
        for hint in ("a_1", "a_desc", [("a", 1)], "_id_"):
            got = sorted(d["_id"] for d in db.c.find(f).hint(hint))
            assert got == want, (f, hint)


def test_update_through_hinted_index_visits_each_document_once(db):
    db.c.insert_many([{"_id": i, "a": i} for i in range(50)])
    db.c.create_index("a", unique=True)
    # Each update moves the index entry ahead of the scan; none may be updated twice.
    r = db.command("update", "c", updates=[
        {"q": {"a": {"$gte": 0}}, "u": {"$inc": {"a": 1000}}, "multi": True, "hint": "a_1"}])
    assert r["n"] == 50 and r["nModified"] == 50
    assert sorted(d["a"] for d in db.c.find()) == list(range(1000, 1050))


def test_max_time_ms_interrupts_a_long_scan(db):
    batch = [{"x": i, "pad": "p" * 50} for i in range(2000)]
    for _ in range(100):  # 200,000 documents
        db.c.insert_many([dict(d) for d in batch], ordered=False)
    t = time.monotonic()
    with pytest.raises(ExecutionTimeout) as e:
        list(db.c.find({"nomatch": 1}).max_time_ms(5))
    assert e.value.code == 50
    # Interrupted well before scanning everything would have finished twice over.
    scan_start = time.monotonic()
    assert db.c.count_documents({"nomatch": 1}) == 0
    full_scan = time.monotonic() - scan_start
    assert time.monotonic() - t < 2 * full_scan + 1
    with pytest.raises(OperationFailure) as e:
        db.command("count", "c", query={"nomatch": 1}, maxTimeMS=5)
    assert e.value.code == 50
    # Interruptions fail a write command as a whole (not as a writeError), as in MongoDB.
    with pytest.raises(OperationFailure) as e:
        db.command("delete", "c", deletes=[{"q": {"nomatch": 1}, "limit": 0}], maxTimeMS=5)
    assert e.value.code == 50


def test_find_argument_errors(db):
    db.c.insert_many([{"_id": i} for i in range(5)])
    for field in ("skip", "limit", "batchSize"):
        with pytest.raises(OperationFailure) as e:
            db.command("find", "c", **{field: -1})
        assert e.value.code == 51024, field
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", filter=5)
    assert e.value.code == 14
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", filter={"a": {"$bogus": 1}})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", sort={"a": 2})
    assert e.value.code == 15975
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", projection={"a": 1, "b": 0})
    assert e.value.code == 31254
    r = db.command("find", "c", batchSize=0)
    assert r["cursor"]["firstBatch"] == [] and r["cursor"]["id"] != 0
    r2 = db.command("getMore", r["cursor"]["id"], collection="c")
    assert len(r2["cursor"]["nextBatch"]) == 5 and r2["cursor"]["id"] == 0


def test_getmore_errors(db):
    db.c.insert_many([{"_id": i} for i in range(10)])
    cid = db.command("find", "c", batchSize=2)["cursor"]["id"]
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", cid, collection="other")
    assert e.value.code == 13
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", cid, collection="c", maxTimeMS=100)
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", 5, collection="c")
    assert e.value.code == 14  # getMore takes a long
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", bson.Int64(1234), collection="c")
    assert e.value.code == 43
    assert len(db.command("getMore", cid, collection="c")["cursor"]["nextBatch"]) == 8


def test_cursors_of_a_dropped_collection_are_killed(db):
    db.c.insert_many([{"_id": i} for i in range(10)])
    cid = db.command("find", "c", batchSize=2)["cursor"]["id"]
    db.c.drop()
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", cid, collection="c")
    assert e.value.code == 43


def test_cursor_timeout_is_read_live(node, db):
    db.c.insert_many([{"_id": i} for i in range(10)])
    c = node.client()
    cid = db.command("find", "c", batchSize=2)["cursor"]["id"]
    keep = db.command("find", "c", batchSize=2, noCursorTimeout=True)["cursor"]["id"]
    c.admin.command("setParameter", 1, cursorTimeoutMillis=200)
    try:
        def reaped():
            try:
                db.command("killCursors", "c", cursors=[bson.Int64(0)])  # no-op poll
                st = c.admin.command("serverStatus")
                return st["metrics"]["cursor"]["open"]["total"] == 1
            except OperationFailure:
                return False
        # The reaper wakes every 4 s (clientCursorMonitor); it must use the new timeout.
        wait_until(reaped, timeout=20, what="idle cursor reaped")
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", cid, collection="c")
        assert e.value.code == 43
        assert len(db.command("getMore", keep, collection="c")["cursor"]["nextBatch"]) == 8
    finally:
        c.admin.command("setParameter", 1, cursorTimeoutMillis=600000)


def test_count_and_distinct_details(db):
    db.c.insert_many([
        {"_id": 1, "a": {"b": [1, 2]}, "t": "x"},
        {"_id": 2, "a": [{"b": 2}, {"b": 3}], "t": "x"},
        {"_id": 3, "a": {"b": [[4], 5]}},
        {"_id": 4, "a": {"b": 1.0}},
        {"_id": 5},
    ])
    got = db.c.distinct("a.b")
    assert sorted(got, key=str) == sorted([1, 2, 3, [4], 5], key=str)
    assert db.c.distinct("t") == ["x"]
    assert db.c.distinct("nothing") == []
    db.c.create_index("t")
    assert db.command("count", "c", query={"t": "x"}, hint="t_1")["n"] == 2
    assert db.command("count", "c", skip=10)["n"] == 0
    assert db.command("count", "c", limit=-2)["n"] == 2
    assert db.command("count", "nope")["n"] == 0
    with pytest.raises(OperationFailure) as e:
        db.command("distinct", "c")
    assert e.value.code == 40414


def test_find_on_the_oplog(rs_node):
    c = rs_node.client()
    c.test.create_collection("o")
    first = c.local["oplog.rs"].find_one({"ns": "test.$cmd", "o.create": "o"})
    assert first is not None and first["op"] == "c"
    c.test.o.insert_many([{"_id": i} for i in range(5)])
    c.test.o.drop()
    ops = list(c.local["oplog.rs"].find({"ts": {"$gt": first["ts"]}}))
    assert [e["op"] for e in ops] == ["i"] * 5 + ["c"]
    assert ops[-1]["o"] == {"drop": "o"}
    assert all(a["ts"] < b["ts"] for a, b in zip(ops, ops[1:]))
    assert all(e["t"] == 1 and e["v"] == 2 for e in ops)
    # Newest first with a reverse natural scan; the seek on ts is in the explain.
    newest = c.local["oplog.rs"].find().sort("$natural", -1).limit(1).next()
    assert newest["ts"] == ops[-1]["ts"]
    e = c.local.command("explain", {"find": "oplog.rs", "filter": {"ts": {"$gte": first["ts"]}}},
                        verbosity="queryPlanner")
    assert e["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN"
    assert e["queryPlanner"]["winningPlan"]["minRecord"] == first["ts"]
    # Users cannot write to it.
    with pytest.raises(OperationFailure) as e:
        c.local.command("insert", "oplog.rs", documents=[{"x": 1}])
    assert e.value.code == 20
