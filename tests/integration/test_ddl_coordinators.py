"""DDL coordinators on the database's primary shard (issue 17 item 3) on a 2-shard cluster
with two routers: drop and dropDatabase go router -> primary shard (_shardsvrDropCollection /
_shardsvrDropDatabase), whose coordinator drops everywhere and commits on the config server.
Identical drops from two routers join one coordinator; kill -9 of the primary shard before
each phase ends, after the restart, with the collection (database) gone everywhere; a drop
racing a chunk migration leaves no trace of the collection."""
import pytest
from pymongo import WriteConcern
from pymongo.errors import OperationFailure, PyMongoError

from shale_fixtures import (Background, config_db, fail_point, hang, module_cluster,
                            wait_until)

COLL_PHASES = ["freezeCollection", "enterCriticalSection", "dropCollection",
               "releaseCriticalSection"]


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=2, routers=2) as c:
        yield c


def make_sharded(cl, db, coll, n=20):
    """db (primary shard0) with coll sharded on x, chunks [min, 0) on shard0 and [0, max)
    on shard1, and n documents across both."""
    admin = cl.router_client().admin
    admin.command("enableSharding", db, primaryShard=cl.shard_name(0))
    admin.command("shardCollection", "%s.%s" % (db, coll), key={"x": 1})
    admin.command("split", "%s.%s" % (db, coll), middle={"x": 0})
    admin.command("moveChunk", "%s.%s" % (db, coll), find={"x": 0}, to=cl.shard_name(1))
    # Journaled: the kill -9 tests expect them after the restart (w: 1 alone may lose them).
    cl.router_client()[db].get_collection(coll, write_concern=WriteConcern(j=True)).insert_many(
        [{"x": i - n // 2} for i in range(n)])
    # Both routers know the collection (the second one's cache is then stale after a drop).
    for i in range(2):
        assert cl.router_client(i)[db][coll].count_documents({}) == n


def coordinator_docs(cl, shard=0):
    return list(cl.shard_client(shard).config.system.sharding_ddl_coordinators.find())


def running_coordinators(cl, shard=0, desc=None):
    ops = cl.shard_client(shard).admin.command("currentOp")["inprog"]
    return [o for o in ops if o.get("desc", "").endswith("Coordinator")
            and (desc is None or o["desc"] == desc)]


def assert_dropped_everywhere(cl, db, coll):
    ns = "%s.%s" % (db, coll)
    cfg = config_db(cl)
    entry = cfg.collections.find_one({"_id": ns})
    assert entry is None, entry
    assert cfg.chunks.count_documents({"ns": ns}) == 0
    for i in range(2):
        assert coll not in cl.shard_client(i)[db].list_collection_names(), "shard%d" % i
        assert cl.shard_client(i).config.collection_critical_sections.count_documents(
            {"_id": ns}) == 0
    for r in range(2):
        assert cl.router_client(r)[db][coll].count_documents({}) == 0
        assert coll not in cl.router_client(r)[db].list_collection_names()
    assert coordinator_docs(cl) == []


def test_drop_of_a_sharded_collection_goes_through_the_primary_shard(cl):
    make_sharded(cl, "dc1", "c")
    r = cl.router_client().dc1.command("drop", "c")
    assert r["ok"] == 1 and r["ns"] == "dc1.c"
    assert_dropped_everywhere(cl, "dc1", "c")
    # The coordinator of the primary shard did it (its log line), not the config server.
    assert any('"id":4170201' in line and '"dc1.c"' in line
               for line in cl.shards[0].read_log().splitlines())
    # Dropping again, and dropping what never existed, succeed (MongoDB 7.0).
    cl.router_client(1).dc1.command("drop", "c")
    cl.router_client().nosuchdb.command("drop", "c")
    # The namespace is usable again, unsharded, through the router that had it cached.
    cl.router_client(1).dc1.c.insert_one({"x": 1})
    assert cl.router_client().dc1.c.count_documents({}) == 1


def test_drop_of_an_unsharded_collection(cl):
    cl.router_client().admin.command("enableSharding", "dc2", primaryShard=cl.shard_name(1))
    cl.router_client().dc2.u.insert_many([{"_id": i} for i in range(5)])
    assert "u" in cl.shard_client(1).dc2.list_collection_names()
    cl.router_client(1).dc2.drop_collection("u")
    assert "u" not in cl.shard_client(1).dc2.list_collection_names()
    assert cl.router_client().dc2.u.count_documents({}) == 0
    assert coordinator_docs(cl, 1) == []


def test_identical_drops_from_two_routers_join_one_coordinator(cl):
    make_sharded(cl, "dc3", "c")
    shard0 = cl.shard_client(0)
    fail_point(shard0, "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": "DropCollectionCoordinator", "phase": "dropCollection"})
    try:
        first = Background(lambda: cl.router_client(0).dc3.command("drop", "c"))
        wait_until(lambda: [o for o in running_coordinators(cl)
                            if o.get("currentPhase") == "dropCollection"],
                   what="the drop to hold before its dropCollection phase")
        second = Background(lambda: cl.router_client(1).dc3.command("drop", "c"))
        # The second request waits for the running coordinator: still one of them.
        assert not second.join(1.0).done
        running = running_coordinators(cl, desc="DropCollectionCoordinator")
        assert len(running) == 1
        # The DDL locks it holds: the database in IX ("w"), the collection in X ("W").
        assert running[0]["locks"] == {"DDLDatabase": "w", "DDLCollection": "W"}
        doc = coordinator_docs(cl)[0]
        assert doc["_id"] == {"namespace": "dc3.c", "operationType": "dropCollection"}
        # The hold is before the phase's checkpoint: the document still names the last one.
        assert doc["phase"] == "enterCriticalSection" and doc["collInfo"]["_id"] == "dc3.c"
    finally:
        fail_point(shard0, "hangBeforeCoordinatorPhase", "off")
    first.join(60)
    second.join(60)
    assert first.done and second.done, (first.error, second.error)
    assert first.result["ok"] == 1 and second.result["ok"] == 1
    assert_dropped_everywhere(cl, "dc3", "c")
    # One coordinator dropped it: the drop was logged once.
    assert sum(1 for line in cl.shards[0].read_log().splitlines()
               if '"id":4170201' in line and '"dc3.c"' in line) == 1


def test_drop_database_waits_for_a_running_collection_drop(cl):
    """dropDatabase takes the database's DDL lock in X: it waits for a running drop (IX)."""
    make_sharded(cl, "dc4", "c")
    shard0 = cl.shard_client(0)
    fail_point(shard0, "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": "DropCollectionCoordinator", "phase": "releaseCriticalSection"})
    try:
        drop = Background(lambda: cl.router_client(0).dc4.command("drop", "c"))
        wait_until(lambda: running_coordinators(cl, desc="DropCollectionCoordinator"))
        dropdb = Background(lambda: cl.router_client(1).drop_database("dc4"))
        wait_until(lambda: running_coordinators(cl, desc="DropDatabaseCoordinator"))
        assert not dropdb.join(1.0).done
        # The database drop waits for its X lock: it shows no locks held yet.
        assert "locks" not in running_coordinators(cl, desc="DropDatabaseCoordinator")[0]
        assert running_coordinators(cl, desc="DropCollectionCoordinator")[0]["locks"] == \
            {"DDLDatabase": "w", "DDLCollection": "W"}
        assert coordinator_docs(cl)[0]["_id"]["operationType"] == "dropCollection"
        assert len(coordinator_docs(cl)) == 1  # the database drop has not started its phase
    finally:
        fail_point(shard0, "hangBeforeCoordinatorPhase", "off")
    drop.join(60)
    dropdb.join(60)
    assert drop.done and dropdb.done, (drop.error, dropdb.error)
    assert config_db(cl).databases.find_one({"_id": "dc4"}) is None
    assert coordinator_docs(cl) == []


def test_drop_database_drops_everywhere(cl):
    make_sharded(cl, "dc5", "s")
    cl.router_client().dc5.u.insert_one({"_id": 1})
    r = cl.router_client(1).dc5.command("dropDatabase")
    assert r["ok"] == 1 and r["dropped"] == "dc5"
    cfg = config_db(cl)
    assert cfg.databases.find_one({"_id": "dc5"}) is None
    assert cfg.collections.count_documents({"_id": {"$regex": "^dc5\\."}}) == 0
    for i in range(2):
        assert "dc5" not in cl.shard_client(i).list_database_names(), "shard%d" % i
    for r in range(2):
        assert cl.router_client(r).dc5.s.count_documents({}) == 0
        assert "dc5" not in cl.router_client(r).list_database_names()
    assert coordinator_docs(cl) == []
    # Dropping it again succeeds; recreating it through the router that had it cached works.
    cl.router_client().drop_database("dc5")
    cl.router_client(1).dc5.again.insert_one({"_id": 1})
    assert cl.router_client().dc5.again.count_documents({}) == 1


def kill_primary_at(cl, type_, phase, fn):
    """Arm crashBeforeCoordinatorPhase {type, phase} on shard0, run fn (which fails when the
    shard dies), then restart shard0."""
    fail_point(cl.shard_client(0), "crashBeforeCoordinatorPhase", "alwaysOn",
               {"type": type_, "phase": phase})
    with pytest.raises(PyMongoError):
        fn()
    cl.shards[0].proc.wait(30)
    cl.restart_shard(0)
    # The restarted primary resumes the coordinator from its document and finishes it.
    wait_until(lambda: coordinator_docs(cl) == [], timeout=60,
               what="the coordinator document to go")


@pytest.mark.parametrize("phase", COLL_PHASES)
def test_kill9_of_the_primary_before_each_drop_phase(cl, phase):
    db = "dk_" + phase
    make_sharded(cl, db, "c")
    kill_primary_at(cl, "DropCollectionCoordinator", phase,
                    lambda: cl.router_client()[db].command("drop", "c"))
    if phase == "freezeCollection":
        # Nothing was durable yet (the first checkpoint comes before the first phase): the
        # drop did not happen at all, and the user's retry does it.
        for r in range(2):
            assert cl.router_client(r)[db].c.count_documents({}) == 20
        assert config_db(cl).collections.find_one({"_id": db + ".c"}) is not None
    else:
        # The restarted primary finished the drop from its document.
        assert_dropped_everywhere(cl, db, "c")
    # A retry of the drop succeeds (and changes nothing once it is done).
    cl.router_client(1)[db].command("drop", "c")
    assert_dropped_everywhere(cl, db, "c")


def test_kill9_of_the_primary_before_the_drop_database_phase(cl):
    make_sharded(cl, "dkdb", "c")
    kill_primary_at(cl, "DropDatabaseCoordinator", "drop",
                    lambda: cl.router_client().drop_database("dkdb"))
    # Before the only phase's checkpoint: not done at all; the retry drops it.
    assert config_db(cl).databases.find_one({"_id": "dkdb"}) is not None
    assert cl.router_client(1).dkdb.c.count_documents({}) == 20
    cl.router_client(1).drop_database("dkdb")
    assert_database_dropped(cl, "dkdb")


def assert_database_dropped(cl, db):
    cfg = config_db(cl)
    assert cfg.databases.find_one({"_id": db}) is None
    assert cfg.collections.count_documents({"_id": {"$regex": "^%s\\." % db}}) == 0
    for i in range(2):
        assert db not in cl.shard_client(i).list_database_names(), "shard%d" % i
    for r in range(2):
        assert cl.router_client(r)[db].c.count_documents({}) == 0
        assert db not in cl.router_client(r).list_database_names()
    assert coordinator_docs(cl) == []


def test_kill9_of_the_primary_during_the_drop_database_phase(cl):
    """shard1 holds the participant's dropDatabase (failCommand blockConnection) while
    shard0, the primary, dies in the middle of the phase; the restarted primary resumes the
    phase from its document and finishes: the database is gone everywhere."""
    make_sharded(cl, "dkdb2", "c")
    cl.router_client().dkdb2.u.insert_one({"_id": 1})
    fail_point(cl.shard_client(1), "failCommand", {"times": 1},
               {"failCommands": ["_shardsvrDropDatabaseParticipant"], "blockConnection": True,
                "blockTimeMS": 5000, "failInternalCommands": True})
    dropdb = Background(lambda: cl.router_client().drop_database("dkdb2"))
    wait_until(lambda: coordinator_docs(cl) != [],
               what="the dropDatabase coordinator's document")
    assert coordinator_docs(cl)[0]["phase"] == "drop"
    cl.shards[0].kill()
    dropdb.join(60)
    assert dropdb.error is not None  # the primary died under the router's request
    cl.restart_shard(0)
    wait_until(lambda: coordinator_docs(cl) == [], timeout=60,
               what="the resumed coordinator to finish")
    assert_database_dropped(cl, "dkdb2")


def test_drop_racing_a_chunk_migration(cl):
    """A migration held before its commit while the drop starts: the drop stops migrations,
    waits for the running one to end (its commit is refused), then drops everywhere."""
    make_sharded(cl, "dc6", "c")
    donor = cl.shard_client(0)
    wait = hang(donor, "moveChunkHangAtStep4")
    move = Background(lambda: cl.router_client().admin.command(
        "moveChunk", "dc6.c", find={"x": -5}, to=cl.shard_name(1)))
    try:
        wait()
        drop = Background(lambda: cl.router_client(1).dc6.command("drop", "c"))
        # The drop froze the collection's migrations, then waits for the running one.
        wait_until(lambda: config_db(cl).collections.find_one(
            {"_id": "dc6.c", "allowMigrations": False}) is not None,
            what="the drop to stop the collection's migrations")
        assert not drop.join(0.5).done
    finally:
        fail_point(donor, "moveChunkHangAtStep4", "off")
    move.join(60)
    drop.join(60)
    assert drop.done, drop.error
    # The migration either committed before the freeze or was refused by it.
    assert move.done or (isinstance(move.error, OperationFailure) and move.error.code == 117), \
        move.error
    wait_until(lambda: "dc6" not in cl.shard_client(1).list_database_names()
               or "c" not in cl.shard_client(1).dc6.list_collection_names(),
               what="the recipient's copy to go")
    assert_dropped_everywhere(cl, "dc6", "c")


def test_kill9_of_the_config_server_during_a_drop(cl):
    """The config server dies while the drop is held before its dropCollection phase (the
    catalog commit): the coordinator retries the commit until the restarted config server
    answers, then finishes; the router's request gets the drop's answer."""
    make_sharded(cl, "dc7", "c")
    shard0 = cl.shard_client(0)
    fail_point(shard0, "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": "DropCollectionCoordinator", "phase": "dropCollection"})
    try:
        drop = Background(lambda: cl.router_client(1).dc7.command("drop", "c"))
        wait_until(lambda: [o for o in running_coordinators(cl)
                            if o.get("currentPhase") == "dropCollection"],
                   what="the drop to hold before its dropCollection phase")
        cl.config.kill()
    finally:
        fail_point(shard0, "hangBeforeCoordinatorPhase", "off")
    # The commit cannot reach the config server: the coordinator keeps its document.
    assert not drop.join(2.0).done
    assert coordinator_docs(cl)[0]["phase"] == "dropCollection"
    cl.restart_config()
    drop.join(120)
    assert drop.done, drop.error
    assert drop.result["ok"] == 1
    assert_dropped_everywhere(cl, "dc7", "c")
