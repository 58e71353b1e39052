"""Step-up work on a shard set's new primary (issue 18 item 2, repl18e): kill -9 of the
donor shard's primary in the middle of a migration, and of the database primary shard's
primary in the middle of a DDL coordinator; the member elected next resumes from the
replicated documents (config.migrationCoordinators, config.system.sharding_ddl_coordinators)
and finishes or aborts the operation cleanly. One 3-member shard set (fast elections), one
single-member shard, a config server of one member and a router."""

import pymongo
import pytest

from shale_fixtures import (Background, fail_point, hang, logged, set_and_single_cluster,
                            set_primary, wait_until)
PARAMS = ["--setParameter", "orphanCleanupDelaySecs=0"]


def direct(node, **kw):
    return node.client(directConnection=True, **kw)


@pytest.fixture(scope="module")
def cluster(request):
    with set_and_single_cluster(request, "su", "stepup", extra=PARAMS) as c:
        yield c


def on_secondaries(cluster, primary, db, coll, flt=None):
    """Whether every live secondary of rs0 holds a document of db.coll matching flt."""
    for n in cluster["rs"]:
        if n is primary or n.proc.poll() is not None:
            continue
        if direct(n, readPreference="secondaryPreferred")[db][coll].find_one(flt or {}) is None:
            return False
    return True


def sharded_on_rs0(cluster, db):
    """db.c sharded on _id with primary shard rs0, 200 documents (w: majority) in two chunks
    split at 100, both on rs0; returns a router client."""
    client = cluster["router"].client()
    client.admin.command("enableSharding", db, primaryShard="rs0")
    client.admin.command("shardCollection", db + ".c", key={"_id": 1})
    client[db].get_collection("c", write_concern=pymongo.WriteConcern(w="majority")).insert_many(
        [{"_id": i} for i in range(200)])
    client.admin.command("split", db + ".c", middle={"_id": 100})
    return client


def rejoin(cluster, victim):
    victim.start(extra=PARAMS)

    def secondary():
        return direct(victim).admin.command("hello").get("secondary") is True
    wait_until(secondary, 60, "the killed member back as a secondary")


def test_kill_donor_primary_mid_migration(cluster):
    client = sharded_on_rs0(cluster, "mig")
    admin = client.admin
    victim = set_primary(cluster["rs"])
    wait = hang(direct(victim), "moveChunkHangAtStep3")
    move = Background(lambda: admin.command("moveChunk", "mig.c", find={"_id": 150}, to="one"))
    wait()
    # the migration's coordinator document reached the secondaries
    wait_until(lambda: on_secondaries(cluster, victim, "config", "migrationCoordinators"), 10,
               "the migration coordinator document on the secondaries")
    victim.kill()
    new = set_primary([n for n in cluster["rs"] if n is not victim], 30)
    # the new primary's step-up recovery decides the migration (aborted: nothing committed)
    wait_until(lambda: direct(new).config.migrationCoordinators.count_documents({}) == 0, 30,
               "the new primary to finish the migration's recovery")
    move.join(60)
    assert not move.done  # the router's moveChunk failed with its donor
    uuid = direct(cluster["cfg"]).config.collections.find_one({"_id": "mig.c"})["uuid"]
    owners = sorted(c["shard"] for c in direct(cluster["cfg"]).config.chunks.find())
    chunks = [c for c in direct(cluster["cfg"]).config.chunks.find() if c["uuid"] == uuid]
    assert sorted(c["shard"] for c in chunks) == ["rs0", "rs0"], owners
    # the recipient's copy of the aborted range goes (its range deletion runs at once)
    wait_until(lambda: direct(cluster["one"]).mig.c.count_documents({}) == 0, 30,
               "the aborted migration's documents gone from the recipient")
    assert client.mig.c.count_documents({}) == 200
    # and the chunk moves now, from the new primary
    admin.command("moveChunk", "mig.c", find={"_id": 150}, to="one")
    assert client.mig.c.count_documents({}) == 200
    assert direct(cluster["one"]).mig.c.count_documents({}) == 100
    rejoin(cluster, victim)


def test_kill_primary_mid_ddl(cluster):
    client = cluster["router"].client()
    admin = client.admin
    admin.command("enableSharding", "ddl", primaryShard="rs0")
    admin.command("shardCollection", "ddl.c", key={"_id": 1})
    client.ddl.c.insert_many([{"_id": i} for i in range(20)])
    victim = set_primary(cluster["rs"])
    fail_point(direct(victim), "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": "CollModCoordinator", "phase": "updateShards"})
    cmd = Background(lambda: client.ddl.command("collMod", "c", validator={"v": 1}))
    wait_until(lambda: logged(victim, 4170001, phase="updateShards"), 30,
               "the collMod coordinator to hold before updateShards")
    wait_until(lambda: on_secondaries(cluster, victim, "config", "system.sharding_ddl_coordinators"),
               10, "the collMod coordinator's document on the secondaries")
    victim.kill()
    new = set_primary([n for n in cluster["rs"] if n is not victim], 30)
    wait_until(lambda: direct(new).config.system.sharding_ddl_coordinators.count_documents(
        {}) == 0, 30, "the new primary to finish the resumed collMod")
    cmd.join(60)
    info = direct(new).ddl.command("listCollections", filter={"name": "c"})
    assert info["cursor"]["firstBatch"][0]["options"].get("validator") == {"v": 1}
    # migrations run again after the coordinator
    cfg_coll = direct(cluster["cfg"]).config.collections.find_one({"_id": "ddl.c"})
    assert cfg_coll.get("allowMigrations", True)
    rejoin(cluster, victim)


def test_step_down_interrupts_the_outgoing_migration(cluster):
    """replSetStepDown of the donor's primary held in a migration: the step-down kills the
    migration there (it must not commit from a secondary); the new primary's step-up aborts
    it from its document, and the chunk moves from the new primary afterwards."""
    client = sharded_on_rs0(cluster, "sd")
    admin = client.admin
    victim = set_primary(cluster["rs"])
    wait = hang(direct(victim), "moveChunkHangAtStep3")
    move = Background(lambda: admin.command("moveChunk", "sd.c", find={"_id": 150}, to="one"))
    try:
        wait()
        wait_until(lambda: on_secondaries(cluster, victim, "config", "migrationCoordinators"),
                   10, "the migration coordinator document on the secondaries")
        try:
            direct(victim).admin.command("replSetStepDown", 30, force=True)
        except pymongo.errors.PyMongoError:
            pass  # the step-down may close this connection
        move.join(30)
        assert not move.is_alive() and not move.done
    finally:
        fail_point(direct(victim), "moveChunkHangAtStep3", "off")
    assert logged(victim, 4200146, ns="sd.c")
    new = set_primary([n for n in cluster["rs"] if n is not victim], 30)
    wait_until(lambda: direct(new).config.migrationCoordinators.count_documents({}) == 0, 30,
               "the new primary to abort the interrupted migration")
    wait_until(lambda: direct(cluster["one"]).sd.c.count_documents({}) == 0, 30,
               "the aborted migration's documents gone from the recipient")
    assert client.sd.c.count_documents({}) == 200
    admin.command("moveChunk", "sd.c", find={"_id": 150}, to="one")
    assert direct(cluster["one"]).sd.c.count_documents({}) == 100
    direct(victim).admin.command("replSetFreeze", 0)

