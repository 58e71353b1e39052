"""User write blocking through the router on a 2-shard cluster: the config server sets the
mode on every shard, it survives kill -9 of a shard, and disabling restores writes. See
test_user_write_blocking.py for why the fail point stands in for an unprivileged user."""

import pytest
from pymongo.errors import OperationFailure

from shale_fixtures import fail_point

BLOCKED = 371
FP = "userWriteBlockingTreatClientsAsUnprivileged"


def _assert_blocked(fn):
    """UserWritesBlocked: a command error or every write error (CRUD)."""
    with pytest.raises(OperationFailure) as e:
        fn()
    errs = (e.value.details or {}).get("writeErrors")
    if errs:
        assert {w["code"] for w in errs} == {BLOCKED}, errs
    else:
        assert e.value.code == BLOCKED, e.value.details


def test_cluster_blocking_and_restart(cluster):
    r = cluster.router_client()
    r.admin.command("enableSharding", "uwb")
    r.admin.command("shardCollection", "uwb.s", key={"_id": 1})
    r.uwb.s.insert_many([{"_id": i} for i in range(-5, 5)])
    r.uwb.u.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        r.admin.command("setUserWriteBlockMode", 1)
    assert e.value.code == 40414
    with pytest.raises(OperationFailure) as e:
        r.admin.command("setUserWriteBlockMode", 1, **{"global": "yes"})
    assert e.value.code == 14

    r.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    for i in range(2):
        s = cluster.shard_client(i)
        assert s.admin.command("serverStatus")["repl"]["userWriteBlockMode"] == 2
        fail_point(s, FP, "alwaysOn")
    _assert_blocked(lambda: r.uwb.s.insert_one({"_id": 100}))
    _assert_blocked(lambda: r.uwb.s.update_many({}, {"$set": {"x": 1}}))
    _assert_blocked(lambda: r.uwb.s.delete_one({"_id": 1}))
    _assert_blocked(lambda: r.uwb.u.insert_one({"_id": 2}))
    _assert_blocked(lambda: r.uwb.u.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}))
    _assert_blocked(lambda: r.uwb.s.create_index("x"))
    assert r.uwb.s.count_documents({}) == 10
    assert r.uwb.u.find_one({"_id": 1}) == {"_id": 1}

    cluster.shards[0].kill()
    cluster.restart_shard(0)
    s0 = cluster.shard_client(0)
    assert s0.admin.command("serverStatus")["repl"]["userWriteBlockMode"] == 2
    fail_point(s0, FP, "alwaysOn")
    _assert_blocked(lambda: r.uwb.s.insert_many([{"_id": -100}, {"_id": 100}]))

    r.admin.command("setUserWriteBlockMode", 1, **{"global": False})
    r.uwb.s.insert_many([{"_id": -100}, {"_id": 100}])
    r.uwb.u.insert_one({"_id": 2})
    assert r.uwb.s.count_documents({}) == 12
    for i in range(2):
        fail_point(cluster.shard_client(i), FP, "off")
