"""Write and read concerns on a data node, standalone and replica set of one: what
MongoDB 7.0 accepts, the errors it returns (top-level or writeConcernError), and reads
after a cluster time."""

import bson
import pymongo
import pytest
from pymongo import WriteConcern
from pymongo.errors import OperationFailure, WriteConcernError


def test_standalone_rejects_w_greater_than_one_and_tags(node):
    db = node.client().test
    with pytest.raises(OperationFailure) as e:
        db.command("insert", "c", documents=[{"_id": 1}], writeConcern={"w": 2})
    assert e.value.code == 2
    assert "not replicated" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        db.command("insert", "c", documents=[{"_id": 1}], writeConcern={"w": "dc1"})
    assert e.value.code == 2
    # Nothing was written by the refused commands.
    assert db.c.count_documents({}) == 0
    # majority and j are fine on a standalone.
    db.command("insert", "c", documents=[{"_id": 1}], writeConcern={"w": "majority", "j": True})
    assert db.c.count_documents({}) == 1


def test_bad_write_concern_is_failed_to_parse(node):
    db = node.client().test
    with pytest.raises(OperationFailure) as e:
        db.command("insert", "c", documents=[{"_id": 1}], writeConcern={"w": -1})
    assert e.value.code == 9
    with pytest.raises(OperationFailure) as e:
        db.command("insert", "c", documents=[{"_id": 1}], writeConcern={"w": True})
    assert e.value.code == 9


def test_set_of_one_reports_unsatisfiable_and_unknown_mode(rs_node):
    db = rs_node.client().test
    r = db.command("insert", "c", documents=[{"_id": 1}], writeConcern={"w": 2, "wtimeout": 100})
    # The write happened; only the concern could not be satisfied.
    assert r["n"] == 1
    assert r["writeConcernError"]["code"] == 100
    assert r["writeConcernError"]["codeName"] == "UnsatisfiableWriteConcern"
    assert r["writeConcernError"]["errInfo"]["writeConcern"] == {
        "w": 2, "wtimeout": 100, "provenance": "clientSupplied"}
    r = db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"$set": {"a": 1}}}],
                   writeConcern={"w": "dc1"})
    assert r["nModified"] == 1
    assert r["writeConcernError"]["code"] == 79
    # The driver turns it into WriteConcernError.
    with pytest.raises(WriteConcernError):
        db.c.with_options(write_concern=WriteConcern(w=3)).insert_one({"_id": 2})
    assert db.c.count_documents({}) == 2
    # j and majority are satisfiable.
    r = db.command("delete", "c", deletes=[{"q": {"_id": 2}, "limit": 1}],
                   writeConcern={"w": "majority", "j": True})
    assert r["n"] == 1 and "writeConcernError" not in r


def test_unacknowledged_write_is_applied(node):
    c = node.client()
    coll = c.test.c.with_options(write_concern=WriteConcern(w=0))
    coll.insert_one({"_id": "fire-and-forget"})
    # w:0 sends moreToCome: no reply; the write is applied in order on the connection.
    from shale_fixtures import wait_until
    wait_until(lambda: c.test.c.find_one({"_id": "fire-and-forget"}) is not None,
               what="unacknowledged insert")


def test_read_concern_levels_on_standalone(node):
    db = node.client().test
    db.c.insert_one({"_id": 1})
    for level in ("local", "available", "majority"):
        r = db.command("find", "c", readConcern={"level": level})
        assert r["cursor"]["firstBatch"] == [{"_id": 1}]
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", readConcern={"level": "snapshot"})
    assert e.value.code == 123  # NotAReplicaSet, as MongoDB on a standalone
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", readConcern={"level": "linearizable"})
    assert e.value.code == 123
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", readConcern={"level": "local",
                                            "afterClusterTime": bson.Timestamp(1, 1)})
    assert e.value.code == 20  # IllegalOperation: no cluster time without replication
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", readConcern={"level": "bogus"})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", readConcern={"level": "local", "bogus": 1})
    assert e.value.code == 40415


def test_read_concern_on_set_of_one(rs_node):
    db = rs_node.client().test
    r = db.command("insert", "c", documents=[{"_id": 1}])
    op_time = r["operationTime"]
    # Reading after the write's operationTime sees it, at every level that takes one.
    for level in ("local", "majority"):
        r = db.command("find", "c", readConcern={"level": level, "afterClusterTime": op_time})
        assert r["cursor"]["firstBatch"] == [{"_id": 1}]
    # A cluster time ahead of the node's clock (nothing gossiped it) is refused, as MongoDB
    # (test_causal_consistency.py has the waits).
    future = bson.Timestamp(op_time.time + 5, 1)
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", readConcern={"level": "local", "afterClusterTime": future})
    assert e.value.code == 72
    # Snapshot reads outside transactions (test_snapshot_reads.py has the rest).
    r = db.command("find", "c", readConcern={"level": "snapshot"})
    assert r["cursor"]["firstBatch"] == [{"_id": 1}] and "atClusterTime" in r["cursor"]


def test_cluster_time_gossip_and_standalone_has_none(rs_node, node):
    db = rs_node.client().test
    r = db.command("ping")
    ct = r["$clusterTime"]
    assert isinstance(ct["clusterTime"], bson.Timestamp)
    assert ct["signature"]["keyId"] == 0 and len(ct["signature"]["hash"]) == 20
    # Gossip: a request carrying a later $clusterTime advances the node's clock.
    later = bson.Timestamp(ct["clusterTime"].time + 100, 7)
    client = rs_node.client()
    with client.start_session() as s:
        # The driver sends the newest $clusterTime it knows, the session's included.
        s.advance_cluster_time({"clusterTime": later, "signature": ct["signature"]})
        client.test.command("ping", session=s)
    r = db.command("insert", "c", documents=[{"_id": 1}])
    assert r["operationTime"] > later
    # A standalone returns neither field, as MongoDB.
    r = node.client().test.command("insert", "c", documents=[{"_id": 1}])
    assert "operationTime" not in r and "$clusterTime" not in r
