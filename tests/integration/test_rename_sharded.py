"""renameCollection of sharded collections through the router (MongoDB 5.0+ behaviour;
docs/design/sharding-protocol.md "Renaming a sharded collection"): data on both shards
under the new name, config metadata (same UUID, new epoch, chunks kept), targeting and
indexes, dropTarget over sharded and unsharded targets, MongoDB's errors, a stale second
router, the primary shard's RenameCollectionCoordinator (_shardsvrRenameCollection, MongoDB
7.0): kill -9 of the config server or of the primary shard in the middle of a rename, and
retries that join a running rename (or conflict with it: 117). Real processes: a config
server, two shards, routers; pymongo on the router and on each shard directly."""


import pytest
from pymongo.errors import OperationFailure, PyMongoError

from shale_fixtures import (Background, config_db, error_code, fail_point, hang,
                            module_cluster, standard_uuid_db, wait_until)

N = 400
TYPE = "RenameCollectionCoordinator"
PHASES = ["checkPreconditions", "freezeMigrations", "blockCrudAndRename", "renameMetadata",
          "unblockCRUD"]


def _coord_docs(c, ns=None):
    """The primary shard's (shard0) rename coordinator documents (of source ns)."""
    q = {"_id.operationType": "renameCollection"}
    if ns is not None:
        q["_id.namespace"] = ns
    return list(c.shard_client(0).config.system.sharding_ddl_coordinators.find(q))


def _hold(c, phase):
    """Hold the primary shard's rename coordinator before 'phase'; returns a function that
    waits until a rename is held there."""
    fail_point(c.shard_client(0), "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": TYPE, "phase": phase})

    def wait(timeout=30.0):
        wait_until(lambda: [o for o in c.shard_client(0).admin.command("currentOp")["inprog"]
                            if o.get("desc") == TYPE and o.get("currentPhase") == phase],
                   timeout=timeout, what="the rename to hold before " + phase)
    return wait


def _release(c):
    fail_point(c.shard_client(0), "hangBeforeCoordinatorPhase", "off")


@pytest.fixture(scope="module")
def rc(request):
    with module_cluster(request, shards=2,
                        shard_extra=["--setParameter", "orphanCleanupDelaySecs=0"]) as c:
        c.router_client().admin.command("enableSharding", "rn", primaryShard="shard0")
        yield c


def _sharded(c, name, n=N):
    """rn.<name> sharded on {x: 1}, split at n/2, the upper chunk on shard1, n documents."""
    r = c.router_client()
    ns = "rn." + name
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.admin.command("split", ns, middle={"x": n // 2})
    r.rn[name].insert_many([{"_id": i, "x": i, "v": "d%d" % i} for i in range(n)])
    r.admin.command("moveChunk", ns, find={"x": n // 2}, to="shard1", _waitForDelete=True)
    assert c.shard_client(0).rn[name].count_documents({}) == n // 2
    assert c.shard_client(1).rn[name].count_documents({}) == n - n // 2
    return r, ns


def _rename(r, src, dst, **kw):
    return r.admin.command("renameCollection", src, to=dst, **kw)


def test_rename_moves_data_metadata_and_targeting(rc):
    r, ns = _sharded(rc, "a")
    r.rn.a.create_index([("v", 1)], name="v_1")
    cfg = config_db(rc)
    before = cfg.collections.find_one({"_id": ns})
    chunks_before = sorted((ch["min"]["x"], ch["shard"]) for ch in
                           cfg.chunks.find({"uuid": before["uuid"]}))
    _rename(r, ns, "rn.a2")
    # Every document under the new name, none under the old.
    ids = sorted(d["_id"] for d in r.rn.a2.find({}, {"_id": 1}))
    assert ids == list(range(N))
    assert r.rn.a.count_documents({}) == 0
    assert "a" not in r.rn.list_collection_names()
    assert "a2" in r.rn.list_collection_names()
    # Config metadata: same UUID under the new _id, a new generation, the chunks kept.
    assert cfg.collections.find_one({"_id": ns}) is None
    after = cfg.collections.find_one({"_id": "rn.a2"})
    assert after["uuid"] == before["uuid"]
    assert after["key"] == {"x": 1}
    assert after["lastmodEpoch"] != before["lastmodEpoch"]
    assert after["timestamp"] > before["timestamp"]
    chunks_after = sorted((ch["min"]["x"], ch["shard"]) for ch in
                          cfg.chunks.find({"uuid": after["uuid"]}))
    assert chunks_after == chunks_before
    assert cfg.changelog.find_one({"what": "renameCollection.metadata", "ns": ns}) is not None
    assert _coord_docs(rc) == []
    # The primary shard's coordinator did it (its log line).
    assert any('"id":4170220' in line and '"rn.a"' in line
               for line in rc.shards[0].read_log().splitlines())
    # Each shard holds its part under the new name, with the same UUID and indexes.
    for i, n in ((0, N // 2), (1, N - N // 2)):
        db = standard_uuid_db(rc.shard_client(i), "rn")
        assert db.a2.count_documents({}) == n
        assert "a" not in db.list_collection_names()
        assert next(db.list_collections(filter={"name": "a2"}))["info"]["uuid"] == after["uuid"]
        assert {"_id_", "x_1", "v_1"} <= set(db.a2.index_information())
    assert {"_id_", "x_1", "v_1"} <= set(r.rn.a2.index_information())
    # The shard key still targets one shard.
    exp = r.rn.command("explain", {"find": "a2", "filter": {"x": N - 1}},
                       verbosity="queryPlanner")
    plan = exp["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "SINGLE_SHARD", exp
    assert plan["shards"][0]["shardName"] == "shard1"
    # Writes under the new name go to the owning shard; chunks still move.
    r.rn.a2.insert_one({"_id": N, "x": N + 5})
    assert rc.shard_client(1).rn.a2.find_one({"_id": N}) is not None
    assert r.rn.a2.update_one({"x": 3}, {"$set": {"v": "new"}}).modified_count == 1
    r.admin.command("moveChunk", "rn.a2", find={"x": 0}, to="shard1")
    assert r.rn.a2.count_documents({}) == N + 1
    assert r.rn.a2.find_one({"x": 3})["v"] == "new"


def test_drop_target_over_sharded_and_unsharded_targets(rc):
    r, ns = _sharded(rc, "b")
    _sharded(rc, "bt", n=100)
    cfg = config_db(rc)
    old_target_uuid = cfg.collections.find_one({"_id": "rn.bt"})["uuid"]
    # Without dropTarget: NamespaceExists, nothing changed.
    assert error_code(lambda: _rename(r, ns, "rn.bt")) == 48
    assert r.rn.b.count_documents({}) == N and r.rn.bt.count_documents({}) == 100
    _rename(r, ns, "rn.bt", dropTarget=True)
    assert r.rn.bt.count_documents({}) == N
    assert r.rn.b.count_documents({}) == 0
    assert cfg.collections.find_one({"_id": ns}) is None
    new = cfg.collections.find_one({"_id": "rn.bt"})
    assert new["uuid"] != old_target_uuid
    assert cfg.chunks.count_documents({"uuid": old_target_uuid}) == 0
    for i in (0, 1):
        assert "b" not in rc.shard_client(i).rn.list_collection_names()
    assert rc.shard_client(0).rn.bt.count_documents({}) + \
        rc.shard_client(1).rn.bt.count_documents({}) == N

    # An unsharded target on the primary shard.
    r.rn.plain.insert_many([{"_id": i} for i in range(7)])
    assert error_code(lambda: _rename(r, "rn.bt", "rn.plain")) == 48
    _rename(r, "rn.bt", "rn.plain", dropTarget=True)
    assert r.rn.plain.count_documents({}) == N
    assert sorted(d["_id"] for d in r.rn.plain.find({}, {"_id": 1})) == list(range(N))
    assert cfg.collections.find_one({"_id": "rn.plain"})["uuid"] == new["uuid"]

    # An unsharded source over a sharded target.
    _sharded(rc, "st", n=50)
    r.rn.src.insert_many([{"_id": i, "x": i} for i in range(3)])
    _rename(r, "rn.src", "rn.st", dropTarget=True)
    assert cfg.collections.find_one({"_id": "rn.st"}) is None
    assert r.rn.st.count_documents({}) == 3
    assert rc.shard_client(1).rn.st.count_documents({}) == 0


def test_errors(rc):
    r, ns = _sharded(rc, "e", n=20)
    r.rn.other.insert_one({"_id": 1})
    assert error_code(lambda: _rename(r, ns, "rn.other")) == 48
    assert error_code(lambda: _rename(r, ns, "elsewhere.e")) == 125  # CommandFailed
    assert error_code(lambda: _rename(r, "rn.missing", "rn.m2")) == 26
    assert error_code(lambda: _rename(r, "nodb.missing", "nodb.m2")) == 26
    assert error_code(lambda: _rename(r, ns, "config.e")) == 125
    assert error_code(lambda: _rename(r, ns, "rn.system.e")) == 20
    assert error_code(lambda: _rename(r, ns, ns)) == 20
    # Nothing moved.
    assert r.rn.e.count_documents({}) == 20 and r.rn.other.count_documents({}) == 1
    assert config_db(rc).collections.find_one({"_id": ns}) is not None
    # Unsharded collections keep today's behaviour (the primary shard renames).
    _rename(r, "rn.other", "rn.other2")
    assert r.rn.other2.count_documents({}) == 1


def test_stale_router_sees_the_rename(rc):
    r, ns = _sharded(rc, "s")
    r2 = rc.add_router().client()
    # r2 caches the old name as sharded, and the new name as unsharded (absent).
    assert r2.rn.s.count_documents({}) == N
    assert r2.rn.s2.count_documents({}) == 0
    _rename(r, ns, "rn.s2")
    # Versioned reads and writes from the stale router get StaleConfig and refresh.
    assert r2.rn.s2.count_documents({}) == N
    assert r2.rn.s.count_documents({}) == 0
    assert r2.rn.s2.find_one({"x": N - 1})["_id"] == N - 1
    r2.rn.s2.insert_one({"_id": "new", "x": N + 1})
    assert rc.shard_client(1).rn.s2.find_one({"_id": "new"}) is not None
    assert r.rn.s2.count_documents({}) == N + 1
    # A write to the old name creates a new unsharded collection, as in MongoDB.
    r2.rn.s.insert_one({"_id": "fresh"})
    assert r.rn.s.count_documents({}) == 1
    assert config_db(rc).collections.find_one({"_id": ns}) is None


def test_crud_waits_for_the_rename(rc):
    r, ns = _sharded(rc, "w")
    r2 = rc.add_router().client()
    assert r2.rn.w.count_documents({}) == N  # r2 routes rn.w as sharded
    wait_hung = _hold(rc, "renameMetadata")
    t = Background(lambda: _rename(rc.router_client(), ns, "rn.w2"), catch=())
    try:
        wait_hung()
        # Both shards hold the critical section: a versioned read and a versioned write of
        # the old name wait.
        read = Background(lambda: r2.rn.w.count_documents({}), catch=())
        write = Background(lambda: r2.rn.w.insert_one({"_id": "late", "x": 1}), catch=())
        readers = [read, write]
        # They have not finished while the rename is held (a bounded look: they must not
        # complete, so no condition can be awaited).
        for th in readers:
            th.join(1.0)
        assert not read.done and not write.done
    finally:
        _release(rc)
    t.join(60)
    for th in readers:
        th.join(60)
    assert t.result["ok"] == 1
    # After the rename they retried on the new metadata: the old name is unsharded (the
    # read saw an empty or new collection, the write created it), the data is under w2.
    assert read.result in (0, 1) and write.done
    assert r.rn.w2.count_documents({}) == N
    assert r.rn.w.find_one({"_id": "late"}) is not None
    assert config_db(rc).collections.find_one({"_id": ns}) is None


def test_pending_range_deletion_follows_the_rename(rc):
    r = rc.router_client()
    ns = "rn.rd"
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.admin.command("split", ns, middle={"x": N // 2})
    r.rn.rd.insert_many([{"_id": i, "x": i} for i in range(N)])
    fail_point(rc.shard_client(0), "suspendRangeDeletion", "alwaysOn")
    try:
        r.admin.command("moveChunk", ns, find={"x": N // 2}, to="shard1")
        # The donor still holds the moved range as orphans.
        assert rc.shard_client(0).rn.rd.count_documents({}) == N
        _rename(r, ns, "rn.rd2")
        tasks = list(rc.shard_client(0).config.rangeDeletions.find({}))
        assert [t["nss"] for t in tasks] == ["rn.rd2"]
    finally:
        fail_point(rc.shard_client(0), "suspendRangeDeletion", "off")
    rc.shard_client(0).admin.command("cleanupOrphaned", "rn.rd2")
    assert rc.shard_client(0).rn.rd2.count_documents({}) == N // 2
    assert r.rn.rd2.count_documents({}) == N


def test_rename_refused_while_a_migration_runs(rc):
    r, ns = _sharded(rc, "mg")
    donor = rc.shard_client(0)
    wait_hung = hang(donor, "moveChunkHangAtStep3")
    t = Background(lambda: rc.router_client().admin.command("moveChunk", ns, find={"x": 0},
                                                            to="shard1"),
                   catch=OperationFailure)
    try:
        wait_hung()
        assert error_code(lambda: _rename(r, ns, "rn.mg2")) == 117  # ConflictingOperationInProgress
        assert _coord_docs(rc) == []
    finally:
        fail_point(donor, "moveChunkHangAtStep3", "off")
    t.join(60)
    assert t.done, t.error
    # Nothing was renamed or blocked; once the migration is over the rename goes through.
    assert r.rn.mg.count_documents({}) == N
    _rename(r, ns, "rn.mg2")
    assert r.rn.mg2.count_documents({}) == N
    assert rc.shard_client(1).rn.mg2.count_documents({}) == N


@pytest.mark.parametrize("phase,how", [("renameMetadata", "kill"), ("unblockCRUD", "kill"),
                                       ("renameMetadata", "sigterm")])
def test_config_server_down_mid_rename_rolls_forward(rc, phase, how):
    """The config server dies (or stops) while the primary shard's coordinator holds before
    a phase: the coordinator retries its config server calls until it is back, then ends."""
    name = ("k" if phase == "renameMetadata" else "ku") + ("t" if how == "sigterm" else "")
    r, ns = _sharded(rc, name)
    wait_hung = _hold(rc, phase)
    t = Background(lambda: _rename(rc.router_client(), ns, ns + "2"), catch=())
    try:
        wait_hung()
        if how == "kill":
            rc.config.kill()
        else:
            assert rc.config.stop() == 0
    finally:
        _release(rc)
    # The phase cannot reach the config server: the coordinator keeps its document.
    assert not t.join(1.0).done
    assert len(_coord_docs(rc, ns)) == 1
    rc.config.start()
    t.join(120)
    assert t.done and t.result["ok"] == 1, t.error
    cfg = config_db(rc)
    assert _coord_docs(rc) == []
    assert cfg.collections.find_one({"_id": ns}) is None
    assert cfg.collections.find_one({"_id": ns + "2"}) is not None
    r = rc.router_client()
    assert r.rn[name + "2"].count_documents({}) == N
    assert r.rn[name].count_documents({}) == 0
    # The shards are unblocked: writes under the new name go through.
    r.rn[name + "2"].insert_one({"_id": "after", "x": 1})
    assert r.rn[name + "2"].count_documents({}) == N + 1
    for i in (0, 1):
        assert name not in rc.shard_client(i).rn.list_collection_names()
    # A retry of the rename finds the source gone.
    assert error_code(lambda: _rename(r, ns, ns + "2")) == 26


def test_shard_down_mid_rename_is_finished_when_it_returns(rc):
    r, ns = _sharded(rc, "sd")
    cfg = config_db(rc)
    # A shard down before the rename starts: refused by the checks, nothing changes.
    rc.shards[1].stop()
    try:
        with pytest.raises(OperationFailure):
            _rename(r, ns, "rn.sd2")
        assert _coord_docs(rc) == []
        assert "sd" in rc.shard_client(0).rn.list_collection_names()
    finally:
        rc.restart_shard(1)
    assert r.rn.sd.count_documents({}) == N
    # A shard lost once the rename started: the coordinator renames on shard0 and retries
    # shard1 until it is back, then finishes; the request waits for it.
    wait_hung = _hold(rc, "blockCrudAndRename")
    t = Background(lambda: _rename(rc.router_client(), ns, "rn.sd2"), catch=())
    try:
        wait_hung()
        rc.shards[1].stop()
    finally:
        _release(rc)
    try:
        wait_until(lambda: "sd2" in rc.shard_client(0).rn.list_collection_names(),
                   what="shard0 to rename its copy")
        assert not t.join(1.0).done
        doc = _coord_docs(rc, ns)[0]
        assert doc is not None and doc["to"] == "rn.sd2"
        assert cfg.collections.find_one({"_id": ns}) is not None  # not committed yet
    finally:
        rc.restart_shard(1)
    t.join(120)
    assert t.done, t.error
    assert _coord_docs(rc) == []
    assert cfg.collections.find_one({"_id": ns}) is None
    assert r.rn.sd2.count_documents({}) == N
    assert r.rn.sd.count_documents({}) == 0
    for i in (0, 1):
        assert "sd" not in rc.shard_client(i).rn.list_collection_names()
    r.rn.sd2.insert_one({"_id": "after", "x": N - 1})
    assert rc.shard_client(1).rn.sd2.find_one({"_id": "after"}) is not None


def test_shard_restarted_mid_rename_stays_blocked(rc):
    r, ns = _sharded(rc, "pc")
    wait_hung = _hold(rc, "renameMetadata")
    # It may fail: a pooled connection to the restarted shard.
    t = Background(lambda: _rename(rc.router_client(), ns, "rn.pc2"), catch=OperationFailure)
    reader = None
    try:
        wait_hung()
        crit = rc.shard_client(1).config.collection_critical_sections
        assert sorted(d["_id"] for d in crit.find()) == [ns, "rn.pc2"]
        rc.shards[1].stop()
        rc.restart_shard(1)
        # The restarted shard restored its critical sections: a read targeted at it waits
        # (without them it would answer from metadata that still calls rn.pc sharded while
        # its copy is already renamed).
        reader = Background(lambda: rc.router_client().rn.pc.find_one({"x": N - 1}), catch=())
        reader.join(1.0)
        assert not reader.done
    finally:
        _release(rc)
    t.join(60)
    wait_until(lambda: _coord_docs(rc) == [], timeout=60, what="the rename to finish")
    reader.join(60)
    assert not reader.is_alive()
    # The old name is an unsharded, missing collection now.
    assert reader.done and reader.result is None
    assert rc.shard_client(1).config.collection_critical_sections.count_documents({}) == 0
    assert r.rn.pc2.count_documents({}) == N
    assert r.rn.pc2.find_one({"x": N - 1})["_id"] == N - 1


def _assert_renamed(rc, name, new, n=N):
    """Every document under rn.<new> on the shards that own them, nothing left of rn.<name>,
    the metadata under the new name, no coordinator document."""
    cfg = config_db(rc)
    r = rc.router_client()
    assert sorted(d["_id"] for d in r.rn[new].find({}, {"_id": 1})) == list(range(n))
    assert r.rn[name].count_documents({}) == 0
    assert cfg.collections.find_one({"_id": "rn." + name}) is None
    assert cfg.collections.find_one({"_id": "rn." + new})["key"] == {"x": 1}
    assert _coord_docs(rc) == []
    for i, part in ((0, n // 2), (1, n - n // 2)):
        db = rc.shard_client(i).rn
        assert db[new].count_documents({}) == part
        assert name not in db.list_collection_names()
    # The shards are unblocked: a write under the new name goes through.
    r.rn[new].insert_one({"_id": "after", "x": n - 1})
    assert rc.shard_client(1).rn[new].find_one({"_id": "after"}) is not None


def _conflicts(r, ns, to, **kw):
    """A rename of the running rename's source with other arguments: 117, at once."""
    with pytest.raises(OperationFailure) as e:
        _rename(r, ns, to, **kw)
    assert e.value.code == 117, e.value.details
    assert "with different arguments" in str(e.value), e.value.details


def test_retry_joins_the_running_rename(rc):
    r, ns = _sharded(rc, "j")
    wait_hung = _hold(rc, "renameMetadata")

    def run(**kw):
        return Background(lambda: _rename(rc.router_client(), ns, "rn.j2", **kw),
                          catch=OperationFailure)
    t1 = run()
    t2 = None
    try:
        wait_hung()
        # The client retries the same rename (through another router): it joins the running
        # coordinator and waits.
        t2 = Background(lambda: _rename(rc.add_router().client(), ns, "rn.j2"),
                        catch=OperationFailure)
        assert not t2.join(1.0).done and t2.error is None
        ops = [o for o in rc.shard_client(0).admin.command("currentOp")["inprog"]
               if o.get("desc") == TYPE]
        assert len(ops) == 1 and len(_coord_docs(rc, ns)) == 1
        assert ops[0]["locks"] == {"DDLDatabase": "w", "DDLCollection": "W"}
        # Other arguments for the same source conflict (and do not wait for the locks).
        _conflicts(r, ns, "rn.elsewhere")
        _conflicts(r, ns, "rn.j2", dropTarget=True)
    finally:
        _release(rc)
    t1.join(60)
    t2.join(60)
    assert t1.done and t1.result["ok"] == 1, t1.error
    assert t2.done and t2.result["ok"] == 1, t2.error
    _assert_renamed(rc, "j", "j2")
    # A retry after the rename finished finds the source gone, as in MongoDB.
    assert error_code(lambda: _rename(r, ns, "rn.j2")) == 26


@pytest.mark.parametrize("phase", PHASES)
def test_kill9_of_the_primary_before_each_rename_phase(rc, phase):
    name = "kp%d" % PHASES.index(phase)
    r, ns = _sharded(rc, name)
    fail_point(rc.shard_client(0), "crashBeforeCoordinatorPhase", "alwaysOn",
               {"type": TYPE, "phase": phase})
    with pytest.raises(PyMongoError):
        _rename(r, ns, "rn.%s2" % name)
    rc.shards[0].proc.wait(30)
    rc.restart_shard(0)
    wait_until(lambda: _coord_docs(rc) == [], timeout=60,
               what="the resumed coordinator to finish")
    if phase in ("checkPreconditions", "freezeMigrations"):
        # Nothing durable yet: not renamed; the user's retry renames.
        assert config_db(rc).collections.find_one({"_id": ns}) is not None
        assert rc.router_client().rn[name].count_documents({}) == N
        _rename(rc.router_client(), ns, "rn.%s2" % name)
    else:
        # The restarted primary finished the rename from its document; a retry finds the
        # source gone.
        assert error_code(lambda: _rename(rc.router_client(), ns, "rn.%s2" % name)) == 26
    _assert_renamed(rc, name, name + "2")
    # Migrations of the renamed collection are allowed again.
    rc.router_client().admin.command("moveChunk", "rn.%s2" % name, find={"x": 0},
                                     to="shard1")
