"""shardCollection on the database's primary shard (issue 17 item 3): the router creates the
database on the config server, then sends _shardsvrCreateCollection to the primary shard,
whose CreateCollectionCoordinator (phases checkPreconditions, enterCriticalSection, commit,
exitCriticalSection) takes the DDL locks, blocks the namespace, commits on the config server
and refreshes. Identical requests join; different ones conflict; a refusal leaves nothing;
kill -9 of the primary before each phase ends with the collection sharded or cleanly not,
and config server, shards and both routers agree."""
import pytest
from pymongo.errors import OperationFailure, PyMongoError

from shale_fixtures import Background, config_db, fail_point, module_cluster, wait_until

PHASES = ["checkPreconditions", "enterCriticalSection", "commit", "exitCriticalSection"]
TYPE = "CreateCollectionCoordinator"


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=2, routers=2) as c:
        yield c


def coordinator_docs(cl, shard):
    return list(cl.shard_client(shard).config.system.sharding_ddl_coordinators.find())


def running(cl, shard):
    ops = cl.shard_client(shard).admin.command("currentOp")["inprog"]
    return [o for o in ops if o.get("desc") == TYPE]


def assert_clean(cl, ns, shard):
    """No coordinator document and no critical section left on the primary."""
    assert coordinator_docs(cl, shard) == []
    assert cl.shard_client(shard).config.collection_critical_sections.count_documents(
        {"_id": ns}) == 0


def assert_sharded_everywhere(cl, db, coll, key, primary):
    ns = "%s.%s" % (db, coll)
    entry = config_db(cl).collections.find_one({"_id": ns})
    assert entry is not None and entry["key"] == key, entry
    info = cl.shard_client(primary)[db].command("listCollections", filter={"name": coll})
    assert info["cursor"]["firstBatch"][0]["info"]["uuid"] == entry["uuid"]
    assert_clean(cl, ns, primary)
    # Both routers route writes and reads (the primary's section is gone).
    base = cl.router_client(0)[db][coll].count_documents({})
    cl.router_client(1)[db][coll].insert_one({k: 7 for k in key})
    for r in range(2):
        assert cl.router_client(r)[db][coll].count_documents({}) == base + 1
    return entry


def test_shard_collection_runs_on_the_primary_shard(cl):
    admin = cl.router_client().admin
    admin.command("enableSharding", "cc1", primaryShard=cl.shard_name(1))
    r = admin.command("shardCollection", "cc1.c", key={"x": 1})
    assert r["collectionsharded"] == "cc1.c"
    entry = assert_sharded_everywhere(cl, "cc1", "c", {"x": 1}, 1)
    assert r["collectionUUID"] == entry["uuid"]
    # The primary shard's coordinator did it, counted as the internal command.
    assert any('"id":4170211' in line and '"cc1.c"' in line
               for line in cl.shards[1].read_log().splitlines())
    m = cl.shard_client(1).admin.command("serverStatus")["metrics"]["commands"]
    assert m["_shardsvrCreateCollection"]["total"] >= 1
    # The identical request again (from the other router) answers with the same UUID; a
    # different key is refused with AlreadyInitialized, leaving nothing behind.
    again = cl.router_client(1).admin.command("shardCollection", "cc1.c", key={"x": 1})
    assert again["collectionUUID"] == entry["uuid"]
    with pytest.raises(OperationFailure) as e:
        admin.command("shardCollection", "cc1.c", key={"y": 1})
    assert e.value.code == 23
    assert_clean(cl, "cc1.c", 1)


def test_shard_collection_creates_the_database(cl):
    """A database the config server does not know yet is created first, as before."""
    r = cl.router_client(1).admin.command("shardCollection", "cc2.h", key={"k": "hashed"})
    primary = config_db(cl).databases.find_one({"_id": "cc2"})["primary"]
    p = [cl.shard_name(i) for i in range(2)].index(primary)
    entry = assert_sharded_everywhere(cl, "cc2", "h", {"k": "hashed"}, p)
    assert r["collectionUUID"] == entry["uuid"]
    # Empty and hashed: presplit over both shards, the other one got the same UUID.
    owners = config_db(cl).chunks.distinct("shard", {"uuid": entry["uuid"]})
    assert sorted(owners) == sorted(cl.shard_name(i) for i in range(2))
    other = cl.shard_client(1 - p).cc2.command("listCollections", filter={"name": "h"})
    assert other["cursor"]["firstBatch"][0]["info"]["uuid"] == entry["uuid"]


def test_a_refused_request_leaves_the_collection_as_it_was(cl):
    """The config server refuses (numInitialChunks with a range key; no index on a non-empty
    collection) after the primary entered its critical section: the coordinator leaves it and
    deletes its document; the collection stays unsharded and writable."""
    r = cl.router_client()
    r.admin.command("enableSharding", "cc3", primaryShard=cl.shard_name(0))
    r.cc3.c.insert_many([{"_id": i, "k": i} for i in range(5)])
    with pytest.raises(OperationFailure) as e:
        r.admin.command("shardCollection", "cc3.c", key={"k": 1}, numInitialChunks=4)
    assert e.value.code == 72  # InvalidOptions
    with pytest.raises(OperationFailure) as e:
        r.admin.command("shardCollection", "cc3.c", key={"k": 1})
    assert e.value.code == 72  # no index on the shard key of a non-empty collection
    assert_clean(cl, "cc3.c", 0)
    assert config_db(cl).collections.find_one({"_id": "cc3.c"}) is None
    r.cc3.c.insert_one({"_id": 9, "k": 9})
    assert cl.router_client(1).cc3.c.count_documents({}) == 6
    with pytest.raises(OperationFailure) as e:
        r.admin.command("shardCollection", "cc3.c", key={"k": 2})
    assert e.value.code == 2  # BadValue, refused before anything is durable
    assert_clean(cl, "cc3.c", 0)


def test_identical_requests_join_and_different_ones_conflict(cl):
    r0, r1 = cl.router_client(0), cl.router_client(1)
    r0.admin.command("enableSharding", "cc4", primaryShard=cl.shard_name(0))
    shard0 = cl.shard_client(0)
    fail_point(shard0, "hangBeforeCoordinatorPhase", "alwaysOn", {"type": TYPE,
                                                                  "phase": "commit"})
    try:
        first = Background(lambda: r0.admin.command("shardCollection", "cc4.c", key={"a": 1}))
        wait_until(lambda: [o for o in running(cl, 0) if o.get("currentPhase") == "commit"],
                   what="the create to hold before its commit")
        second = Background(lambda: r1.admin.command("shardCollection", "cc4.c", key={"a": 1}))
        assert not second.join(1.0).done
        ops = running(cl, 0)
        assert len(ops) == 1
        assert ops[0]["locks"] == {"DDLDatabase": "w", "DDLCollection": "W"}
        doc = coordinator_docs(cl, 0)[0]
        assert doc["_id"] == {"namespace": "cc4.c", "operationType": "createCollection"}
        assert doc["shardKey"] == {"a": 1} and doc["phase"] == "enterCriticalSection"
        # The namespace is in its critical section on the primary, persisted.
        assert shard0.config.collection_critical_sections.find_one(
            {"_id": "cc4.c"})["reason"]["command"] == "create"
        # Another key while it runs: ConflictingOperationInProgress.
        with pytest.raises(OperationFailure) as e:
            r1.admin.command("shardCollection", "cc4.c", key={"b": 1})
        assert e.value.code == 117
    finally:
        fail_point(shard0, "hangBeforeCoordinatorPhase", "off")
    first.join(60)
    second.join(60)
    assert first.done and second.done, (first.error, second.error)
    assert first.result["collectionUUID"] == second.result["collectionUUID"]
    assert_sharded_everywhere(cl, "cc4", "c", {"a": 1}, 0)


def test_a_drop_waits_for_a_running_create(cl):
    """Both take the collection's DDL lock in X on the primary: the drop runs after."""
    r0 = cl.router_client(0)
    r0.admin.command("enableSharding", "cc5", primaryShard=cl.shard_name(0))
    shard0 = cl.shard_client(0)
    fail_point(shard0, "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": TYPE, "phase": "exitCriticalSection"})
    try:
        create = Background(lambda: r0.admin.command("shardCollection", "cc5.c", key={"a": 1}))
        wait_until(lambda: running(cl, 0), what="the create coordinator")
        drop = Background(lambda: cl.router_client(1).cc5.command("drop", "c"))
        wait_until(lambda: [o for o in shard0.admin.command("currentOp")["inprog"]
                            if o.get("desc") == "DropCollectionCoordinator"],
                   what="the drop coordinator")
        assert not drop.join(1.0).done
    finally:
        fail_point(shard0, "hangBeforeCoordinatorPhase", "off")
    create.join(60)
    drop.join(60)
    assert create.done and drop.done, (create.error, drop.error)
    assert config_db(cl).collections.find_one({"_id": "cc5.c"}) is None
    assert coordinator_docs(cl, 0) == []


@pytest.mark.parametrize("phase", PHASES)
def test_kill9_of_the_primary_before_each_create_phase(cl, phase):
    db = "ck_" + phase
    r = cl.router_client()
    r.admin.command("enableSharding", db, primaryShard=cl.shard_name(0))
    # Journaled: the kill -9 below must not take the documents or the index with it.
    r[db].command("insert", "c", documents=[{"_id": i, "x": i} for i in range(10)],
                  writeConcern={"w": 1, "j": True})
    r[db].command("createIndexes", "c", indexes=[{"key": {"x": 1}, "name": "x_1"}],
                  writeConcern={"w": 1, "j": True})
    fail_point(cl.shard_client(0), "crashBeforeCoordinatorPhase", "alwaysOn",
               {"type": TYPE, "phase": phase})
    with pytest.raises(PyMongoError):
        r.admin.command("shardCollection", db + ".c", key={"x": 1})
    cl.shards[0].proc.wait(30)
    cl.restart_shard(0)
    wait_until(lambda: coordinator_docs(cl, 0) == [], timeout=60,
               what="the resumed coordinator to finish")
    entry = config_db(cl).collections.find_one({"_id": db + ".c"})
    if phase in ("checkPreconditions", "enterCriticalSection"):
        # Nothing was durable yet: not sharded at all, and writable.
        assert entry is None
        assert_clean(cl, db + ".c", 0)
        cl.router_client(1)[db].c.insert_one({"_id": 100, "x": 100})
        assert cl.router_client(0)[db].c.count_documents({}) == 11
    else:
        # The restarted primary finished it from its document.
        assert entry is not None
        assert_sharded_everywhere(cl, db, "c", {"x": 1}, 0)
    # The user's retry answers with the collection's UUID either way.
    again = cl.router_client(1).admin.command("shardCollection", db + ".c", key={"x": 1})
    entry = assert_sharded_everywhere(cl, db, "c", {"x": 1}, 0)
    assert again["collectionUUID"] == entry["uuid"]
