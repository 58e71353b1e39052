"""applyOps: CRUD operations in oplog form applied in one transaction -- all or nothing,
and durable together (the config server commits chunk changes with it)."""

import pytest
from bson.son import SON
from pymongo.errors import OperationFailure

from shale_fixtures import wait_until  # noqa: F401


def _ops(*ops):
    return SON([("applyOps", list(ops))])


def test_apply_ops_applies_all_in_order(rs_node):
    c = rs_node.client()
    c.test.a.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    c.test.b.insert_one({"_id": "x"})
    r = c.admin.command(_ops(
        {"op": "i", "ns": "test.a", "o": {"_id": 3, "v": 3}},
        {"op": "u", "ns": "test.a", "o": {"_id": 1, "v": 10}, "o2": {"_id": 1}},
        {"op": "d", "ns": "test.a", "o": {"_id": 2}},
        {"op": "u", "ns": "test.b", "o": {"_id": "y", "new": True}, "o2": {"_id": "y"}, "b": True},
        {"op": "n", "ns": "", "o": {"msg": "noop"}}))
    assert r["applied"] == 5 and r["results"] == [True] * 5
    assert list(c.test.a.find().sort("_id", 1)) == [{"_id": 1, "v": 10}, {"_id": 3, "v": 3}]
    assert c.test.b.find_one({"_id": "y"}) == {"_id": "y", "new": True}
    # every op has its oplog entry
    assert c.local["oplog.rs"].count_documents({"ns": "test.a", "op": {"$in": ["i", "u", "d"]},
                                                "o._id": {"$in": [1, 2, 3]}}) >= 3


def test_apply_ops_is_all_or_nothing(rs_node):
    c = rs_node.client()
    c.test.a.insert_one({"_id": 1, "v": 1})
    with pytest.raises(OperationFailure) as e:
        c.admin.command(_ops(
            {"op": "u", "ns": "test.a", "o": {"_id": 1, "v": 99}, "o2": {"_id": 1}},
            {"op": "u", "ns": "test.a", "o": {"_id": 5, "v": 5}, "o2": {"_id": 5}}))
    assert e.value.code == 47  # NoMatchingDocument: the second op fails, the first is undone
    assert c.test.a.find_one({"_id": 1}) == {"_id": 1, "v": 1}
    with pytest.raises(OperationFailure) as e:
        c.admin.command(_ops({"op": "i", "ns": "test.nosuch", "o": {"_id": 1}}))
    assert e.value.code == 26
    with pytest.raises(OperationFailure) as e:
        c.admin.command(_ops({"op": "x", "ns": "test.a", "o": {"_id": 1}}))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        c.test.command(_ops({"op": "n", "ns": "", "o": {}}))
    assert e.value.code == 13  # Unauthorized: admin only, as MongoDB


def test_apply_ops_survives_kill9_together(rs_node):
    c = rs_node.client()
    c.test.a.insert_many([{"_id": i} for i in range(10)])
    ops = [{"op": "u", "ns": "test.a", "o": {"_id": i, "gen": 2}, "o2": {"_id": i}}
           for i in range(10)]
    c.admin.command(SON([("applyOps", ops), ("writeConcern", {"w": "majority"})]))
    rs_node.kill()
    rs_node.start()
    c = rs_node.client()
    assert c.test.a.count_documents({"gen": 2}) == 10
