"""The planner: multikey tracking shown by explain (isMultiKey), and index results
compared with a hinted collection scan ({$natural: 1})."""

import pytest


@pytest.fixture
def db(node):
    return node.client().test


def ixscan(db, filter, hint=None):
    cmd = {"find": "c", "filter": filter}
    if hint is not None:
        cmd["hint"] = hint
    plan = db.command("explain", cmd)["queryPlanner"]["winningPlan"]
    while plan.get("stage") != "IXSCAN":
        plan = plan["inputStage"]
    return plan


def test_multikey_flag_in_explain_and_durable(node):
    db = node.client().test
    db.c.create_index("a")
    db.c.create_index("b")
    db.c.insert_many([{"_id": 1, "a": 1, "b": 1}, {"_id": 2, "a": [3], "b": 2}])
    assert ixscan(db, {"a": 1}, "a_1")["isMultiKey"] is False
    db.c.insert_one({"_id": 3, "a": [4, 5], "b": 3})
    assert ixscan(db, {"a": 1}, "a_1")["isMultiKey"] is True
    # An update that makes an array sets it too; a failed write does not.
    db.c.update_one({"_id": 1}, {"$set": {"b": [7, 8]}})
    assert ixscan(db, {"b": 1}, "b_1")["isMultiKey"] is True
    db.d.create_index("x")
    db.d.insert_one({"_id": 1, "x": 1})
    with pytest.raises(Exception):
        db.d.insert_one({"_id": 1, "x": [1, 2]})
    e = db.command("explain", {"find": "d", "filter": {"x": 1}, "hint": "x_1"})
    plan = e["queryPlanner"]["winningPlan"]["inputStage"]
    assert plan["isMultiKey"] is False
    # Never cleared: removing the arrays keeps the flag, across a restart.
    db.c.delete_many({})
    node.stop()
    node.start()
    db = node.client().test
    assert ixscan(db, {"a": 1}, "a_1")["isMultiKey"] is True
    assert ixscan(db, {"b": 1}, "b_1")["isMultiKey"] is True
    assert ixscan(db, {"_id": {"$gt": 1}}, "_id_")["isMultiKey"] is False
