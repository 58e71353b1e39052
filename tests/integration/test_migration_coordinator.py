"""The live chunk migration on the coordinator framework (issue 17; docs/design/coordinators.md
"The migration coordinator"): the donor's MigrationCoordinator runs the migration's phases
(start, clone, catchUp, enterCriticalSection, commitOnConfig, resolveDecision,
completeMigration) with its document checkpointed in config.migrationCoordinators, and
currentOp shows it. Kill -9 of the donor before each phase ends, once it is back, with the
migration committed or cleanly aborted: every document once through both routers, the
loser's copy deleted, no coordinator document nor pending task left, the shards migrate
again. Real processes: a config server, two shards, two routers; pymongo."""

import bson
import pymongo
import pytest
from pymongo.errors import PyMongoError

from shale_fixtures import Background, config_db, error_code, fail_point, module_cluster, \
    wait_until

N = 400
TYPE = "MigrationCoordinator"

# Phase -> whether the migration is committed after a kill -9 before it.
PHASES = [("start", False), ("clone", False), ("catchUp", False),
          ("enterCriticalSection", False), ("commitOnConfig", False),
          ("resolveDecision", True), ("completeMigration", True)]


@pytest.fixture(scope="module")
def mc(request):
    with module_cluster(request, shards=2, routers=2,
                        shard_extra=["--setParameter", "orphanCleanupDelaySecs=0"]) as c:
        yield c


def _setup(mc, name):
    r = mc.router_client()
    ns = "migco." + name
    r.admin.command("enableSharding", "migco", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.admin.command("split", ns, middle={"x": N // 2})
    r.migco.get_collection(name, write_concern=pymongo.WriteConcern(j=True)).insert_many(
        [{"_id": i, "x": i} for i in range(N)])
    return r, ns


def _owner(mc, ns):
    """The shard owning the upper chunk [N/2, MaxKey) per the config server."""
    cfg = config_db(mc)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    return cfg.chunks.find_one({"uuid": uuid, "min": {"x": N // 2}})["shard"]


def _move(mc, ns, to="shard1", router=0):
    return lambda: mc.router_client(router).admin.command("moveChunk", ns, find={"x": N - 1},
                                                          to=to)


def _coord_ops(client):
    return [op for op in client.admin.command("currentOp")["inprog"] if op.get("desc") == TYPE]


def _ids_once(mc, name):
    for k in (0, 1):
        ids = sorted(d["_id"] for d in mc.router_client(k).migco[name].find({}, {"_id": 1}))
        assert ids == list(range(N)), "router %d" % k


def test_phases_show_in_current_op_and_the_document(mc):
    r, ns = _setup(mc, "curop")
    donor = mc.shard_client(0)
    fail_point(donor, "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": TYPE, "phase": "catchUp"})
    t = Background(_move(mc, ns), catch=PyMongoError)
    try:
        wait_until(lambda: [op.get("currentPhase") for op in _coord_ops(donor)] == ["catchUp"],
                   what="the migration coordinator held before catchUp")
        doc = donor.config.migrationCoordinators.find_one()
        # The last checkpoint (the hang is before catchUp's); MongoDB's fields otherwise.
        assert doc["phase"] == "clone"
        assert (doc["nss"], doc["donorShardId"], doc["recipientShardId"]) == \
            (ns, "shard0", "shard1")
        assert doc["range"] == {"min": {"x": N // 2}, "max": {"x": bson.max_key.MaxKey()}}
        assert "decision" not in doc
        assert _coord_ops(donor)[0]["_id"] == doc["_id"]
        task = donor.config.rangeDeletions.find_one({"nss": ns})
        assert task is not None and task["pending"] is True
        # The same migration through the other router joins; another chunk is refused.
        t2 = Background(_move(mc, ns, router=1), catch=PyMongoError)
        assert error_code(lambda: r.admin.command("moveChunk", ns, find={"x": 0},
                                                  to="shard1")) == 117
        t2.join(0.3)
        assert t2.is_alive()
    finally:
        fail_point(donor, "hangBeforeCoordinatorPhase", "off")
    t.join(60)
    t2.join(60)
    assert t.done and t.result["ok"] == 1, t.error
    assert t2.done and t2.result["ok"] == 1, t2.error
    assert _owner(mc, ns) == "shard1"
    assert donor.config.migrationCoordinators.count_documents({}) == 0
    assert _coord_ops(donor) == []
    _ids_once(mc, "curop")


def test_a_failing_phase_aborts_with_its_error(mc):
    # The commit on the config server fails (failMigrationCommit): the coordinator aborts,
    # runs the abort sequence, and the request gets the commit's error.
    r, ns = _setup(mc, "fails")
    fail_point(mc.shard_client(0), "failMigrationCommit", {"times": 1})
    with pytest.raises(PyMongoError) as e:
        _move(mc, ns)()
    assert "failMigrationCommit" in str(e.value)
    assert _owner(mc, ns) == "shard0"
    donor = mc.shard_client(0)
    wait_until(lambda: donor.config.migrationCoordinators.count_documents({}) == 0,
               what="the abort to finish")
    assert donor.config.rangeDeletions.count_documents({"nss": ns}) == 0
    _ids_once(mc, "fails")
    _move(mc, ns)()
    assert _owner(mc, ns) == "shard1"
    _ids_once(mc, "fails")


@pytest.mark.parametrize("phase,committed", PHASES)
def test_donor_killed_before_each_phase(mc, phase, committed):
    name = "k9_" + phase
    r, ns = _setup(mc, name)
    fail_point(mc.shard_client(0), "crashBeforeCoordinatorPhase", "alwaysOn",
               {"type": TYPE, "phase": phase})
    with pytest.raises(PyMongoError):
        _move(mc, ns)()
    mc.shards[0].proc.wait(30)
    mc.restart_shard(0)
    donor, recipient = mc.shard_client(0), mc.shard_client(1)
    wait_until(lambda: donor.config.migrationCoordinators.count_documents({}) == 0,
               timeout=60, what="the restarted donor to finish the migration")
    assert _owner(mc, ns) == ("shard1" if committed else "shard0")
    _ids_once(mc, name)
    # The loser's copy goes; no task stays pending.
    loser, keep = (donor, N // 2) if committed else (recipient, 0)
    wait_until(lambda: loser.migco[name].count_documents({"x": {"$gte": N // 2}}) == 0,
               timeout=60, what="the loser's copy of the range to be deleted")
    wait_until(lambda: loser.config.rangeDeletions.count_documents({"nss": ns}) == 0,
               timeout=60, what="the range deletion task to be done")
    assert donor.config.rangeDeletions.count_documents({"nss": ns, "pending": True}) == 0
    assert recipient.config.rangeDeletions.count_documents({"nss": ns, "pending": True}) == 0
    assert loser.migco[name].count_documents({}) == keep
    # The shards migrate again (the chunk goes back, or goes now).
    _move(mc, ns, to="shard0" if committed else "shard1")()
    assert _owner(mc, ns) == ("shard0" if committed else "shard1")
    _ids_once(mc, name)
