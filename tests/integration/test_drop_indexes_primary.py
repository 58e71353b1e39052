"""dropIndexes through the database's primary shard (_shardsvrDropIndexes, MongoDB 6.0+;
docs/design/coordinators.md "dropIndexes"): the router sends it to the primary, which takes
the collection's DDL locks and broadcasts dropIndexes with shard versions to the shards owning
chunks. Real processes: a config server, two shards, two routers; pymongo."""

import pytest
from pymongo.errors import OperationFailure

from shale_fixtures import Background, fail_point, module_cluster, wait_until

COLL_MOD = "CollModCoordinator"


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=2, routers=2) as c:
        yield c


def _sharded(cl, db):
    """db.c sharded on x with a chunk on each shard (primary shard0), 20 documents and an
    index {y: 1} on both shards."""
    r = cl.router_client()
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r.admin.command("shardCollection", db + ".c", key={"x": 1})
    r.admin.command("split", db + ".c", middle={"x": 10})
    r[db].c.insert_many([{"x": i, "y": i} for i in range(20)])
    r.admin.command("moveChunk", db + ".c", find={"x": 15}, to="shard1")
    r[db].c.create_index([("y", 1)], name="y_1")
    return r


def _index_names(cl, i, db, coll="c"):
    return sorted(ix["name"] for ix in cl.shard_client(i)[db][coll].list_indexes())


def _internal_count(cl, i):
    cmds = cl.shard_client(i).admin.command("serverStatus")["metrics"]["commands"]
    return cmds.get("_shardsvrDropIndexes", {}).get("total", 0)


def test_drop_index_goes_through_the_primary_to_every_owner(cl):
    r = _sharded(cl, "di1")
    before = _internal_count(cl, 0)
    reply = r.di1.command("dropIndexes", "c", index="y_1")
    assert reply["ok"] == 1 and reply["nIndexesWas"] == 3
    assert len(reply["raw"]) == 2
    assert _internal_count(cl, 0) == before + 1  # the primary shard ran it
    assert _internal_count(cl, 1) == 0
    for i in (0, 1):
        assert _index_names(cl, i, "di1") == ["_id_", "x_1"]


def test_unsharded_and_errors(cl):
    r = cl.router_client()
    r.admin.command("enableSharding", "di2", primaryShard="shard1")
    r.di2.u.insert_one({"a": 1})
    r.di2.u.create_index([("a", 1)])
    r.di2.u.create_index([("b", 1)])
    r.di2.command("dropIndexes", "u", index="*")
    assert _index_names(cl, 1, "di2", "u") == ["_id_"]
    with pytest.raises(OperationFailure) as e:
        r.di2.command("dropIndexes", "u", index="nosuch")
    assert e.value.code == 27  # IndexNotFound
    with pytest.raises(OperationFailure) as e:
        r.di2_missing.command("dropIndexes", "u", index="*")
    assert e.value.code == 26  # NamespaceNotFound


def test_stale_router_and_moved_chunks(cl):
    # The second router cached the routing before a chunk moved; the primary's broadcast
    # reaches the shards that own chunks now.
    r = _sharded(cl, "di3")
    r1 = cl.router_client(1)
    assert r1.di3.c.count_documents({}) == 20
    r.admin.command("split", "di3.c", middle={"x": 5})
    r.admin.command("moveChunk", "di3.c", find={"x": 2}, to="shard1")
    r1.di3.command("dropIndexes", "c", index="y_1")
    for i in (0, 1):
        assert "y_1" not in _index_names(cl, i, "di3")


def test_drop_indexes_waits_for_a_running_ddl_of_the_collection(cl):
    # A collMod coordinator holds the collection's DDL lock (held before its updateShards
    # phase): the dropIndexes waits on the primary until it ends, then runs.
    r = _sharded(cl, "di4")
    shard0 = cl.shard_client(0)
    fail_point(shard0, "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": COLL_MOD, "phase": "updateShards"})
    try:
        coll_mod = Background(lambda: r.di4.command("collMod", "c", validator={"x": {"$gte": 0}}))
        wait_until(lambda: [o for o in shard0.admin.command("currentOp")["inprog"]
                            if o.get("desc") == COLL_MOD], what="the collMod to hold")
        drop = Background(lambda: cl.router_client(1).di4.command("dropIndexes", "c",
                                                                   index="y_1"))
        wait_until(lambda: [o for o in shard0.admin.command("currentOp")["inprog"]
                            if "_shardsvrDropIndexes" in o.get("command", {})],
                   what="the dropIndexes to reach the primary")
        assert not drop.join(0.5).done
        assert "y_1" in _index_names(cl, 0, "di4")
    finally:
        fail_point(shard0, "hangBeforeCoordinatorPhase", "off")
    coll_mod.join(60)
    drop.join(60)
    assert coll_mod.done and drop.done, (coll_mod.error, drop.error)
    for i in (0, 1):
        assert "y_1" not in _index_names(cl, i, "di4")
