"""User write blocking through the router on a 2-shard cluster: the config server sets the
mode on every shard, it survives kill -9 of a shard, and disabling restores writes. See
test_user_write_blocking.py for why the fail point stands in for an unprivileged user."""

import pytest
from pymongo.errors import OperationFailure

from shale_fixtures import Background, fail_point, hang, wait_until

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

    # in a cluster it runs on the router only
    for direct in (cluster.shard_client(0), cluster.config_client()):
        with pytest.raises(OperationFailure) as e:
            direct.admin.command("setUserWriteBlockMode", 1, **{"global": True})
        assert e.value.code == 20 and "shardsvrs nor configsvrs" in str(e.value)
    r.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    for i in range(2):
        s = cluster.shard_client(i)
        assert s.admin.command("serverStatus")["repl"]["userWriteBlockMode"] == 2
    # The router judges its client and tells the shards (mayBypassWriteBlocking: false).
    fail_point(r, FP, "alwaysOn")
    _assert_blocked(lambda: r.uwb.s.insert_many([{"_id": -100}, {"_id": 100}], ordered=False))
    _assert_blocked(lambda: r.uwb.u.insert_one({"_id": 2}))
    # DDL the config server coordinates reaches the shards without the router's verdict;
    # the shards' fail point stands for that part until auth carries the user along.
    for i in range(2):
        fail_point(cluster.shard_client(i), FP, "alwaysOn")
    _assert_blocked(lambda: r.uwb.s.insert_one({"_id": 100}))
    _assert_blocked(lambda: r.uwb.s.update_many({}, {"$set": {"x": 1}}))
    _assert_blocked(lambda: r.admin.command("shardCollection", "uwb.new", key={"_id": 1}))
    assert r.config.collections.find_one({"_id": "uwb.new"}) is None
    _assert_blocked(lambda: r.uwb.s.delete_one({"_id": 1}))
    _assert_blocked(lambda: r.uwb.u.insert_one({"_id": 2}))
    _assert_blocked(lambda: r.uwb.u.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}))
    _assert_blocked(lambda: r.uwb.s.create_index("x"))
    _assert_blocked(lambda: r.uwb.command("drop", "s"))
    _assert_blocked(lambda: r.uwb.command("drop", "u"))
    _assert_blocked(lambda: r.admin.command("renameCollection", "uwb.u", to="uwb.u2"))
    _assert_blocked(lambda: r.uwb.command("create", "newc"))
    _assert_blocked(lambda: r.uwb.command("collMod", "u", validator={}))
    _assert_blocked(lambda: r.uwb.s.update_many({}, {"$set": {"x": 1}}))
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
    r.admin.command("shardCollection", "uwb.new", key={"_id": 1})
    r.uwb.new.insert_one({"_id": 1})
    for i in range(2):
        fail_point(cluster.shard_client(i), FP, "off")
    fail_point(r, FP, "off")


def test_internal_operations_go_on_while_blocked(cluster):
    r = cluster.router_client()
    r.admin.command("enableSharding", "uwbi")
    r.admin.command("shardCollection", "uwbi.m", key={"x": 1})
    r.admin.command("split", "uwbi.m", middle={"x": 50})
    r.uwbi.m.insert_many([{"_id": i, "x": i} for i in range(100)])
    chunk = r.config.chunks.find_one({"min": {"x": 50}}) or \
        r.config.chunks.find_one({"min.x": 50})
    src = chunk["shard"]
    dst = "shard1" if src == "shard0" else "shard0"
    src_i, dst_i = int(src[-1]), int(dst[-1])
    r.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    try:
        fail_point(r, FP, "alwaysOn")
        for i in range(2):
            fail_point(cluster.shard_client(i), FP, "alwaysOn")
        _assert_blocked(lambda: r.uwbi.m.insert_one({"_id": 1000, "x": 1000}))
        # reads, getMore included, carry the verdict and still work
        assert len(list(r.uwbi.m.find().batch_size(7))) == 100
        assert len(list(r.uwbi.m.aggregate([{"$sort": {"x": 1}}], batchSize=7))) == 100
        # migration (clone, catch-up, commit) and the donor's range deletion go on
        cluster.shard_client(src_i).admin.command("setParameter", 1, orphanCleanupDelaySecs=0)
        r.admin.command("moveChunk", "uwbi.m", find={"x": 60}, to=dst)
        assert r.uwbi.m.count_documents({}) == 100
        dcoll = cluster.shard_client(dst_i).uwbi.m
        assert dcoll.count_documents({"x": {"$gte": 50}}) == 50
        scoll = cluster.shard_client(src_i).uwbi.m
        wait_until(lambda: scoll.count_documents({"x": {"$gte": 50}}) == 0,
                   what="the donor's range deletion")
    finally:
        r.admin.command("setUserWriteBlockMode", 1, **{"global": False})
        for i in range(2):
            fail_point(cluster.shard_client(i), FP, "off")
        fail_point(r, FP, "off")
    r.uwbi.m.insert_one({"_id": 1000, "x": 1000})
    assert r.uwbi.m.count_documents({}) == 101


def test_enabling_waits_for_running_ddl(cluster):
    """Phase 1: the DDL coordinators running on the primary shard drain before the shards
    block (MongoDB's prepare phase); new DDL is refused meanwhile."""
    r = cluster.router_client()
    r.admin.command("enableSharding", "uwbd", primaryShard=cluster.shard_name(0))
    r.admin.command("shardCollection", "uwbd.a", key={"x": 1})
    r.uwbd.a.insert_one({"_id": 1, "x": 1})
    primary = cluster.shard_client(0)
    fail_point(primary, "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": "RenameCollectionCoordinator", "phase": "blockCrudAndRename"})
    ren = Background(lambda: r.admin.command("renameCollection", "uwbd.a", to="uwbd.b"))
    try:
        wait_until(lambda: [o for o in primary.admin.command("currentOp")["inprog"]
                            if o.get("desc") == "RenameCollectionCoordinator"],
                   what="the rename to hold on the primary shard")
        setter = Background(lambda: cluster.router_client().admin.command(
            "setUserWriteBlockMode", 1, **{"global": True}))
        setter.join(1.0)
        assert setter.is_alive()  # waiting for the rename
        for i in range(2):
            mode = cluster.shard_client(i).admin.command("serverStatus")["repl"]
            assert mode["userWriteBlockMode"] == 1
    finally:
        fail_point(primary, "hangBeforeCoordinatorPhase", "off")
    ren.join(60)
    setter.join(60)
    assert ren.error is None and setter.error is None
    try:
        for i in range(2):
            mode = cluster.shard_client(i).admin.command("serverStatus")["repl"]
            assert mode["userWriteBlockMode"] == 2
        assert r.uwbd.b.count_documents({}) == 1
    finally:
        r.admin.command("setUserWriteBlockMode", 1, **{"global": False})


def test_node_driver_sees_user_writes_blocked(cluster):
    import json
    import os
    import subprocess
    from test_node_driver import HERE, node_binary
    r = cluster.router_client()
    fail_point(r, FP, "alwaysOn")
    try:
        out = subprocess.run([node_binary(), os.path.join(HERE, "write_block.js"),
                              cluster.uri()], capture_output=True, text=True, timeout=120)
    finally:
        fail_point(r, FP, "off")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["insert"] == BLOCKED and "User writes blocked" in res["insertMsg"]
    assert res["fam"] == BLOCKED
    assert res["read"] == 1 and res["after"] == 2


def test_shard_added_while_blocked_gets_the_mode(cluster, shale_process):
    """Last in this module: the shard it adds is gone after it."""
    r = cluster.router_client()
    r.admin.command("setUserWriteBlockMode", 1, **{"global": True})
    try:
        new = shale_process(["node", "--shardsvr", "--replSet", "shard9"], name="shard9")
        r.admin.command("addShard", "shard9/" + new.host, name="shard9")
        nc = new.client()
        assert nc.admin.command("serverStatus")["repl"]["userWriteBlockMode"] == 2
    finally:
        r.admin.command("setUserWriteBlockMode", 1, **{"global": False})
    assert nc.admin.command("serverStatus")["repl"]["userWriteBlockMode"] == 1
    r.admin.command("removeShard", "shard9")

