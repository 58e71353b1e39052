"""Catalog entries visible by timestamp (issue 15 item 1, docs/design/snapshot_reads.md
"Collections created after the read's time", docs/design/transactions.md "DDL"): a snapshot
read (outside or inside a transaction) of a collection created, re-created or renamed after
its time gets SnapshotUnavailable (246) as from MongoDB, a majority read right after a create
works, and a collection created inside a transaction is seen by others only after the commit,
not at all after an abort, and again after kill -9 and a restart. On a replica set of one and
through a 2-shard router."""

import uuid

import pytest
from bson import Int64
from bson.binary import UUID_SUBTYPE, Binary
from pymongo.errors import OperationFailure
from pymongo import ReadPreference
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

import wire_util
from shale_fixtures import cleanup_later, module_cluster, start_replica_set

SNAPSHOT_UNAVAILABLE = 246


def snap_at(ts):
    return {"level": "snapshot", "atClusterTime": ts}


def assert_unavailable(fn, transient=False):
    with pytest.raises(OperationFailure) as e:
        fn()
    assert e.value.code == SNAPSHOT_UNAVAILABLE, e.value.details
    assert "pending collection catalog changes" in e.value.details["errmsg"]
    assert e.value.has_error_label("TransientTransactionError") == transient
    return e.value


def test_snapshot_read_before_a_drop_and_re_create(rs_node):
    c = rs_node.client()
    db = c.test
    db.c.insert_many([{"_id": i, "v": "old"} for i in range(3)])
    t0 = db.command("ping")["operationTime"]
    db.c.drop()
    db.c.insert_one({"_id": 0, "v": "new"})
    # Every read at t0 -- find, point find, aggregate, distinct -- is refused.
    e = assert_unavailable(lambda: db.command("find", "c", readConcern=snap_at(t0)))
    assert "Snapshot timestamp is Timestamp(%d, %d)" % (t0.time, t0.inc) in str(e)
    assert_unavailable(lambda: db.command("find", "c", filter={"_id": 0},
                                          readConcern=snap_at(t0)))
    assert_unavailable(lambda: db.command("aggregate", "c", pipeline=[], cursor={},
                                          readConcern=snap_at(t0)))
    assert_unavailable(lambda: db.command("distinct", "c", key="v", readConcern=snap_at(t0)))
    # Now: the new collection.
    r = db.command("find", "c", readConcern={"level": "snapshot"})
    assert r["cursor"]["firstBatch"] == [{"_id": 0, "v": "new"}]
    # A transaction at t0: the same error, transient (the driver retries the transaction).
    sock = wire_util.connect(rs_node.port)
    r = wire_util.command(sock, {
        "find": "c", "lsid": {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)},
        "txnNumber": Int64(1), "startTransaction": True, "autocommit": False,
        "readConcern": snap_at(t0), "$db": "test"})
    sock.close()
    assert r["code"] == SNAPSHOT_UNAVAILABLE and "TransientTransactionError" in r["errorLabels"]
    # A rename onto the name after t1 likewise.
    t1 = db.command("ping")["operationTime"]
    db.src.insert_one({"_id": "renamed"})
    db.src.rename("c", dropTarget=True)
    assert_unavailable(lambda: db.command("find", "c", readConcern=snap_at(t1)))
    assert db.c.find_one() == {"_id": "renamed"}


def test_snapshot_transaction_started_before_a_re_create(rs_node):
    c = rs_node.client()
    db = c.test
    db.r.insert_one({"_id": 1})
    db.k.insert_one({"_id": 1})
    with c.start_session() as s:
        s.start_transaction(read_concern=ReadConcern("snapshot"))
        assert db.k.find_one({}, session=s) == {"_id": 1}
        db.r.drop()
        db.r.insert_one({"_id": 2})
        assert_unavailable(lambda: db.r.find_one({}, session=s), transient=True)
        # The error aborted the transaction, as MongoDB's does.
        with pytest.raises(OperationFailure) as e:
            db.k.find_one({}, session=s)
        assert e.value.code == 251
    # A new transaction reads the new collection.
    with c.start_session() as s:
        with s.start_transaction(read_concern=ReadConcern("snapshot")):
            assert db.r.find_one({}, session=s) == {"_id": 2}


def test_majority_read_right_after_a_create(rs_node):
    c = rs_node.client()
    for i in range(20):
        coll = c.test.get_collection("m%d" % i, read_concern=ReadConcern("majority"))
        c.test["m%d" % i].insert_one({"_id": i})
        assert coll.find_one({"_id": i}) == {"_id": i}
        assert coll.count_documents({}) == 1
        assert coll.distinct("_id") == [i]
        assert list(coll.aggregate([{"$match": {"_id": i}}])) == [{"_id": i}]


def test_create_in_a_transaction_visible_at_commit_and_after_kill_9(rs_node):
    c = rs_node.client()
    db = c.test
    db.anchor.insert_one({"_id": 0})
    with c.start_session() as s:
        # Acknowledged w:majority: durable, so it must survive kill -9.
        s.start_transaction(write_concern=WriteConcern("majority"))
        db.create_collection("made", session=s)
        db.made.create_index("a", session=s)
        db.made.insert_many([{"_id": i, "a": i} for i in range(3)], session=s)
        db.implicit.insert_one({"_id": "i"}, session=s)
        before_commit = db.command("ping")["operationTime"]
        # Other clients see neither collection before the commit; their create of it waits
        # for the transaction (MongoDB: its collection lock), here until its maxTimeMS.
        assert "made" not in db.list_collection_names()
        assert db.made.find_one() is None
        with pytest.raises(OperationFailure) as e:
            db.command({"create": "made", "maxTimeMS": 200})
        assert e.value.code == 50
        s.commit_transaction()
    # One oplog entry: the create and createIndexes inside the transaction's applyOps, as
    # MongoDB 7.0 writes them, no create of its own.
    entry = c.local.oplog.rs.find_one({"o.applyOps.o.create": "made"})
    ops = entry["o"]["applyOps"]
    assert [(o["op"], o["ns"]) for o in ops[:2]] == [("c", "test.$cmd")] * 2
    assert ops[0]["o"]["create"] == "made" and ops[0]["o"]["idIndex"]["name"] == "_id_"
    assert ops[1]["o"]["createIndexes"] == "made" and ops[1]["o"]["name"] == "a_1"
    assert ops[0]["ui"] == ops[1]["ui"] == ops[2]["ui"]
    assert c.local.oplog.rs.count_documents({"o.create": "made"}) == 0
    assert c.local.oplog.rs.count_documents({"o.applyOps.o.create": "implicit"}) == 1
    # A snapshot read at a time before the commit does not read it; after, it does.
    assert_unavailable(lambda: db.command("find", "made", readConcern=snap_at(before_commit)))
    r = db.command("find", "made", sort={"_id": 1}, readConcern={"level": "snapshot"})
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [0, 1, 2]
    assert db.get_collection("made", read_concern=ReadConcern("majority")).count_documents(
        {}) == 3
    # Abort leaves nothing.
    with c.start_session() as s:
        s.start_transaction()
        db.create_collection("aborted", session=s)
        db.aborted.insert_one({"_id": 1}, session=s)
        s.abort_transaction()
    assert "aborted" not in db.list_collection_names()
    # kill -9 and restart: the committed create, its index and its documents are there.
    rs_node.kill()
    rs_node.start()
    c = rs_node.client()
    db = c.test
    names = set(db.list_collection_names())
    assert {"made", "implicit"} <= names and "aborted" not in names
    assert [d["_id"] for d in db.made.find().sort("_id", 1)] == [0, 1, 2]
    assert "a_1" in db.made.index_information()
    assert db.made.find({"a": 2}).explain()["queryPlanner"]["winningPlan"] is not None
    assert db.implicit.find_one() == {"_id": "i"}
    assert "skipping a transaction's op" not in rs_node.read_log()


@pytest.fixture
def rs2(request):
    nodes = start_replica_set("cv", "cvrs", members=2)
    yield nodes
    failed = getattr(request.node, "rep_failed", False)
    cleanup_later(nodes, lambda i, p: ("%s-%s" % (request.node.name, p.name)) if failed else None)


def test_a_secondary_applies_a_create_in_a_transaction(rs2):
    nodes = rs2
    c = nodes[0].client(directConnection=True)
    with c.start_session() as s:
        with s.start_transaction(write_concern=WriteConcern("majority")):
            c.test.create_collection("rep", session=s)
            c.test.rep.create_index("a", session=s)
            c.test.rep.insert_one({"_id": 1, "a": 1}, session=s)
    sec = nodes[1].client(directConnection=True,
                          read_preference=ReadPreference.SECONDARY_PREFERRED)
    # Acknowledged w:majority by a set of two: the secondary has applied it.
    assert sec.test.rep.find_one() == {"_id": 1, "a": 1}
    assert "a_1" in sec.test.rep.index_information()
    with c.start_session() as s:
        s.start_transaction()
        c.test.create_collection("rep_aborted", session=s)
        s.abort_transaction()
    c.test.get_collection("marker", write_concern=WriteConcern("majority")).insert_one({"_id": 1})
    assert "rep_aborted" not in sec.test.list_collection_names()
    # A majority read right after a w:1 create waits for the majority point to reach the
    # collection (not SnapshotUnavailable); a w:"majority" insert is then seen.
    for i in range(5):
        c.test["fresh%d" % i].insert_one({"_id": i})
        got = c.test.get_collection("fresh%d" % i,
                                    read_concern=ReadConcern("majority")).find_one()
        assert got in (None, {"_id": i})
        c.test.get_collection("fresh%d" % i, write_concern=WriteConcern("majority")).insert_one(
            {"_id": -i - 1})
        assert c.test.get_collection("fresh%d" % i, read_concern=ReadConcern("majority")).find_one(
            {"_id": -i - 1}) == {"_id": -i - 1}


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=2) as c:
        r = c.router.client()
        r.admin.command("enableSharding", "cv", primaryShard="shard0")
        yield c


def test_through_the_router(cl):
    r = cl.router.client()
    db = r.cv
    db.u.insert_many([{"_id": i} for i in range(3)])
    t0 = db.command("ping")["operationTime"]
    db.u.drop()
    db.u.insert_one({"_id": "new"})
    assert_unavailable(lambda: db.command("find", "u", readConcern=snap_at(t0)))
    assert db.get_collection("u", read_concern=ReadConcern("majority")).find_one() == {
        "_id": "new"}
    # A snapshot transaction through the router that began before a re-create.
    db.k.insert_one({"_id": 1})
    with r.start_session() as s:
        s.start_transaction(read_concern=ReadConcern("snapshot"))
        assert db.k.find_one({}, session=s) == {"_id": 1}
        db.u.drop()
        db.u.insert_one({"_id": "newer"})
        assert_unavailable(lambda: db.u.find_one({}, session=s), transient=True)
    # A create in a transaction through the router: seen after the commit, and after kill -9
    # of its shard.
    with r.start_session() as s:
        with s.start_transaction(write_concern=WriteConcern("majority")):
            db.create_collection("tx", session=s)
            db.tx.insert_one({"_id": 1}, session=s)
            assert "tx" not in db.list_collection_names()
    assert db.tx.find_one() == {"_id": 1}
    cl.shards[0].kill()
    cl.restart_shard(0)
    assert r.cv.tx.find_one() == {"_id": 1}
