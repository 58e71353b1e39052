"""movePrimary (docs/design/sharding-protocol.md "movePrimary"): the router's command, the
config server's checks and commit, the donor's critical section, clone and cleanup, stale
routers, failures and kill -9 of the donor, retries that join a running move (or conflict
with it: 117). Real processes: a config server, two shards, two routers; pymongo on the
routers and, to see where collections really are, on each shard directly."""

import json
import threading
import time

import pymongo
import pytest
from pymongo.errors import OperationFailure, PyMongoError

from shale_fixtures import (Background, config_db, fail_point, hang, logged, module_cluster,
                            run_to_fail_point, wait_until)


@pytest.fixture(scope="module")
def mc(request):
    with module_cluster(request, shards=2, routers=2) as c:
        yield c


def _dbentry(c, db):
    return config_db(c).databases.find_one({"_id": db})


def _names(client, db):
    return sorted(n for n in client[db].list_collection_names() if not n.startswith("system."))


def _indexes(client, db, coll):
    return sorted((i["name"], tuple(i["key"].items()), bool(i.get("unique")))
                  for i in client[db][coll].list_indexes())


def _mp_doc(client, db):
    """The movePrimary coordinator's state document of db on a shard (None when none)."""
    return client.config.system.sharding_ddl_coordinators.find_one(
        {"_id.namespace": db, "_id.operationType": "movePrimary"})


def _mp_docs(client):
    return client.config.system.sharding_ddl_coordinators.count_documents(
        {"_id.operationType": "movePrimary"})


def _mover(mc, db, to="shard1"):
    """A function that moves db's primary (for a Background)."""
    return lambda: mc.router_client().admin.command("movePrimary", db, to=to)


def _populate(c, db):
    """db on shard0 with two unsharded collections (data, secondary indexes, a capped one)
    and a sharded collection with a chunk on each shard."""
    r = c.router_client()
    r.admin.command("enableSharding", db, primaryShard="shard0")
    d = r[db]
    d.plain.insert_many([{"_id": i, "x": i, "y": -i, "s": "v%d" % i} for i in range(1000)])
    d.plain.create_index([("x", 1)], unique=True, name="x_unique")
    d.plain.create_index([("y", -1), ("s", 1)], name="y_s")
    d.create_collection("capped", capped=True, size=65536, max=1000)
    d.capped.insert_many([{"k": i} for i in range(20)])
    # A validator added after documents that break it were stored (moderate level).
    d.validated.insert_many([{"_id": i, "n": i if i % 2 else "not a number"} for i in range(10)])
    d.command("collMod", "validated", validator={"n": {"$type": "number"}},
              validationLevel="moderate")
    r.admin.command("shardCollection", db + ".sh", key={"x": 1})
    r.admin.command("split", db + ".sh", middle={"x": 50})
    d.sh.insert_many([{"x": i} for i in range(100)])
    r.admin.command("moveChunk", db + ".sh", find={"x": 60}, to="shard1")
    return r


def test_move_primary_moves_unsharded_collections(mc):
    db = "mp_basic"
    r = _populate(mc, db)
    r2 = mc.router_client(1)
    # The second router caches the old primary before the move.
    assert r2[db].plain.count_documents({}) == 1000
    s0, s1 = mc.shard_client(0), mc.shard_client(1)
    before = _dbentry(mc, db)
    indexes = _indexes(s0, db, "plain")
    chunks = sorted((ch["min"]["x"] if isinstance(ch["min"]["x"], int) else -1, ch["shard"])
                    for ch in config_db(mc).chunks.find(
                        {"uuid": config_db(mc).collections.find_one({"_id": db + ".sh"})["uuid"]}))

    r.admin.command("movePrimary", db, to="shard1")

    after = _dbentry(mc, db)
    assert after["primary"] == "shard1"
    assert after["version"]["uuid"] == before["version"]["uuid"]
    assert after["version"]["timestamp"] == before["version"]["timestamp"]
    assert after["version"]["lastMod"] == before["version"]["lastMod"] + 1
    whats = [e["what"] for e in config_db(mc).changelog.find({"ns": db}).sort("time", 1)]
    assert "movePrimary.start" in whats and "movePrimary.commit" in whats
    assert whats.index("movePrimary.start") < whats.index("movePrimary.commit")

    # The unsharded collections live on the new primary, with their indexes and options...
    assert s1[db].plain.count_documents({}) == 1000
    assert _indexes(s1, db, "plain") == indexes
    opts = s1[db].capped.options()
    assert opts.get("capped") is True and opts.get("size") == 65536
    assert opts.get("max") == 1000
    assert s1[db].capped.count_documents({}) == 20
    vopts = s1[db].validated.options()
    assert vopts.get("validator") == {"n": {"$type": "number"}}
    assert vopts.get("validationLevel") == "moderate"
    assert s1[db].validated.count_documents({}) == 10  # the invalid ones too
    with pytest.raises(pymongo.errors.WriteError) as e:
        r[db].validated.insert_one({"_id": 100, "n": "text"})
    assert e.value.code == 121
    # ...and are gone from the old one; the sharded collection stays where it was.
    assert _names(s0, db) == ["sh"]
    assert {"plain", "capped", "validated"} <= set(_names(s1, db))
    chunks_after = sorted(
        (ch["min"]["x"] if isinstance(ch["min"]["x"], int) else -1, ch["shard"])
        for ch in config_db(mc).chunks.find(
            {"uuid": config_db(mc).collections.find_one({"_id": db + ".sh"})["uuid"]}))
    assert chunks_after == chunks
    # (shard0 may still hold the moved chunk's orphans until its range deleter runs)
    assert s0[db].sh.count_documents({"x": {"$lt": 50}}) == 50
    assert s1[db].sh.count_documents({}) == 50
    assert not _mp_doc(s0, db)

    # Both routers (the second one stale) read and write through the new primary.
    for rc in (r, r2):
        assert rc[db].plain.count_documents({}) == 1000
        assert rc[db].sh.count_documents({}) == 100
        assert rc[db].capped.count_documents({}) == 20
    assert r2[db].plain.find_one({"x": 7})["s"] == "v7"
    r2[db].plain.insert_one({"_id": 5000, "x": 5000, "y": 0, "s": "new"})
    r2[db].plain.update_one({"_id": 3}, {"$set": {"s": "changed"}})
    assert s1[db].plain.find_one({"_id": 5000})["s"] == "new"
    assert s1[db].plain.find_one({"_id": 3})["s"] == "changed"
    with pytest.raises(pymongo.errors.DuplicateKeyError):
        r2[db].plain.insert_one({"_id": 6000, "x": 7})  # so did the unique index


def test_stale_router_creates_and_lists_on_new_primary(mc):
    db = "mp_stale"
    r = mc.router_client()
    r2 = mc.router_client(1)
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r[db].one.insert_many([{"_id": i} for i in range(10)])
    assert _names(r2, db) == ["one"]  # r2 caches shard0 as the primary
    r.admin.command("movePrimary", db, to="shard1")
    # A new collection through the stale router is created on the new primary.
    r2[db].create_collection("made_after")
    r2[db].implicit.insert_one({"_id": 1})
    assert _names(r2, db) == ["implicit", "made_after", "one"]
    assert _names(mc.shard_client(1), db) == ["implicit", "made_after", "one"]
    assert _names(mc.shard_client(0), db) == []
    assert sorted(d["_id"] for d in r2[db].one.find()) == list(range(10))
    # And back again: the first router is the stale one now.
    r2.admin.command("movePrimary", db, to="shard0")
    assert _dbentry(mc, db)["primary"] == "shard0"
    r[db].one.insert_one({"_id": 10})
    assert sorted(d["_id"] for d in r[db].one.find()) == list(range(11))
    assert _names(mc.shard_client(0), db) == ["implicit", "made_after", "one"]
    assert _names(mc.shard_client(1), db) == []


def test_errors(mc):
    r = mc.router_client()
    db = "mp_errors"
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r[db].c.insert_one({"_id": 1})
    version = _dbentry(mc, db)["version"]
    with pytest.raises(OperationFailure) as e:
        r.admin.command("movePrimary", db, to="nosuchshard")
    assert e.value.code == 70  # ShardNotFound
    for special in ("admin", "config", "local"):
        with pytest.raises(OperationFailure) as e:
            r.admin.command("movePrimary", special, to="shard1")
        assert e.value.code == 72  # InvalidOptions
    with pytest.raises(OperationFailure) as e:
        r.admin.command("movePrimary", db)
    assert e.value.code == 40414  # IDLFailedToParse: 'to' is required
    with pytest.raises(OperationFailure) as e:
        r.admin.command("movePrimary", db, to="")
    assert e.value.code == 72
    with pytest.raises(OperationFailure) as e:
        r.admin.command("movePrimary", "a.b", to="shard1")
    assert e.value.code == 73  # InvalidNamespace
    with pytest.raises(OperationFailure) as e:
        r.admin.command("movePrimary", "mp_no_such_db", to="shard1")
    assert e.value.code == 26  # NamespaceNotFound
    with pytest.raises(OperationFailure):
        r[db].command("movePrimary", db, to="shard1")  # admin only
    # To the shard that is already the primary: ok, nothing changes.
    r.admin.command("movePrimary", db, to="shard0")
    assert _dbentry(mc, db)["primary"] == "shard0"
    assert _dbentry(mc, db)["version"] == version
    assert mc.shard_client(0)[db].c.count_documents({}) == 1
    # Not a router command on a shard.
    with pytest.raises(OperationFailure) as e:
        mc.shard_client(0).admin.command("movePrimary", db, to="shard1")
    assert e.value.code == 59  # CommandNotFound


def test_recipient_with_data_in_the_way_fails_cleanly(mc):
    r = mc.router_client()
    db = "mp_conflict"
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r[db].a.insert_many([{"_id": i} for i in range(5)])
    r[db].b.insert_many([{"_id": i} for i in range(5)])
    mc.shard_client(1)[db].b.insert_one({"_id": "stray"})
    with pytest.raises(OperationFailure) as e:
        r.admin.command("movePrimary", db, to="shard1")
    assert e.value.code == 48  # NamespaceExists
    assert _dbentry(mc, db)["primary"] == "shard0"
    assert _names(mc.shard_client(1), db) == ["b"]
    assert list(mc.shard_client(1)[db].b.find()) == [{"_id": "stray"}]
    assert r[db].a.count_documents({}) == 5
    r[db].a.insert_one({"_id": 5})  # writes work again after the critical section
    assert mc.shard_client(0)[db].a.count_documents({}) == 6


def test_failure_while_cloning_aborts_and_drops_the_clones(mc):
    r = mc.router_client()
    db = "mp_abort"
    r.admin.command("enableSharding", db, primaryShard="shard0")
    for name in ("a", "b", "c"):
        r[db][name].insert_many([{"_id": i} for i in range(50)])
    recipient = mc.shard_client(1)
    # The third insert the recipient receives fails: a and maybe b are cloned by then.
    fail_point(recipient, "failCommand", {"skip": 2}, {
        "failCommands": ["insert"], "errorCode": 8000, "failInternalCommands": True})
    try:
        with pytest.raises(OperationFailure) as e:
            r.admin.command("movePrimary", db, to="shard1")
        assert e.value.code == 8000
    finally:
        fail_point(recipient, "failCommand", "off")
    assert _dbentry(mc, db)["primary"] == "shard0"
    assert _names(recipient, db) == []
    assert not _mp_doc(mc.shard_client(0), db)
    for name in ("a", "b", "c"):
        assert r[db][name].count_documents({}) == 50
    r[db].a.insert_one({"_id": 50})
    # A later attempt succeeds.
    r.admin.command("movePrimary", db, to="shard1")
    assert _names(recipient, db) == ["a", "b", "c"]
    assert r[db].a.count_documents({}) == 51


def test_concurrent_writer_loses_no_acknowledged_write(mc):
    r = mc.router_client()
    db = "mp_writer"
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r[db].w.insert_many([{"_id": -i - 1} for i in range(200)])
    r.admin.command("shardCollection", db + ".sh", key={"_id": 1})
    donor = mc.shard_client(0)
    acked, errors, stop = [], [], threading.Event()

    def writer():
        w = mc.router_client(1)[db].w
        i = 0
        while not stop.is_set():
            try:
                w.insert_one({"_id": i})
                acked.append(i)
            except PyMongoError as e:
                errors.append(e)
            i += 1

    def count_acked(n):
        base = len(acked)
        wait_until(lambda: len(acked) >= base + n, what="%d more acknowledged writes" % n)

    t = threading.Thread(target=writer)
    t.start()
    try:
        count_acked(20)
        mover = run_to_fail_point(donor, "hangBeforeMovePrimaryCommit", _mover(mc, db),
                                  catch=())
        # In the critical section: the unsharded collection's writes wait (none is
        # acknowledged), the sharded collection's go on.
        n0 = len(acked)
        r[db].sh.insert_one({"_id": "during"})
        time.sleep(0.5)
        assert len(acked) == n0
        fail_point(donor, "hangBeforeMovePrimaryCommit", "off")
        mover.join(60)
        assert mover.done and mover.result["ok"] == 1
        count_acked(20)  # the writer goes on, on the new primary
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors[:3]
    have = {d["_id"] for d in mc.shard_client(1)[db].w.find({"_id": {"$gte": 0}}, {"_id": 1})}
    assert set(acked) <= have
    assert {d["_id"] for d in r[db].w.find({"_id": {"$gte": 0}})} == have
    assert _names(donor, db) == ["sh"]
    assert r[db].sh.find_one({"_id": "during"}) is not None


def _crash_setup(mc, db):
    """db on shard0 with 300 journaled documents in db.a (they survive a kill -9)."""
    r = mc.router_client()
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r[db].get_collection("a", write_concern=pymongo.WriteConcern(j=True)).insert_many(
        [{"_id": i} for i in range(300)])
    return r


def _kill_donor_aborts(mc, db, point, held=None):
    """Move db to shard1, kill -9 the donor while it is held at the fail point 'point' (after
    'held()' checked the state there), restart it: the move is aborted -- db's primary is
    still shard0, nothing is left on shard1, no coordinator document. Returns the donor."""
    donor = mc.shard_client(0)
    t = run_to_fail_point(donor, point, _mover(mc, db), catch=PyMongoError)
    if held is not None:
        held()
    mc.shards[0].kill()
    t.join(90)
    assert t.error is not None, "movePrimary succeeded although its donor was killed"
    mc.restart_shard(0)
    donor = mc.shard_client(0)
    wait_until(lambda: _mp_docs(donor) == 0,
               what="the movePrimary coordinator document to be finished")
    assert _dbentry(mc, db)["primary"] == "shard0"
    assert _names(mc.shard_client(1), db) == []
    return donor


def test_donor_killed_before_commit_aborts(mc):
    db = "mp_kill_before"
    r = _crash_setup(mc, db)
    r[db].a.create_index([("x", 1)])
    # The clone reached the recipient; then the donor dies.
    donor = _kill_donor_aborts(
        mc, db, "hangBeforeMovePrimaryCommit",
        lambda: mc.shard_client(1)[db].a.count_documents({}) == 300 or pytest.fail("no clone"))
    assert r[db].a.count_documents({}) == 300
    r[db].a.insert_one({"_id": 300})
    assert donor[db].a.count_documents({}) == 301


def test_donor_killed_before_the_clone_aborts_and_a_retry_moves(mc):
    # kill -9 with the database's DDL lock and writes blocked, the document written, nothing
    # cloned: the restarted donor aborts (the lock was in memory: gone with the process);
    # collection DDL and a new movePrimary then work.
    db = "mp_kill_clone"
    r = _crash_setup(mc, db)
    _kill_donor_aborts(mc, db, "hangBeforeCloningData")
    r.admin.command("shardCollection", db + ".sh", key={"x": 1})
    r.admin.command("movePrimary", db, to="shard1")
    assert _dbentry(mc, db)["primary"] == "shard1"
    assert mc.shard_client(1)[db].a.count_documents({}) == 300
    assert r[db].a.count_documents({}) == 300


# MongoDB 7.0's MovePrimaryCoordinator phases, and whether a kill -9 of the donor just before
# each (its checkpoint not yet written) leaves the move done: before the commit phase's
# checkpoint the restarted donor undoes it; after, it finishes it.
MP_PHASES = [("clone", False), ("enterCriticalSection", False), ("commit", False),
             ("clean", True), ("exitCriticalSection", True)]


def _assert_moved_once(mc, db, before, moved):
    """db's primary, its version bumped once or not at all, db.a's 300 documents on exactly
    one shard (the primary), read through both routers, and a write lands there."""
    entry = _dbentry(mc, db)
    primary = "shard1" if moved else "shard0"
    assert entry["primary"] == primary
    assert entry["version"]["lastMod"] == before["version"]["lastMod"] + (1 if moved else 0)
    have, other = mc.shard_client(int(primary[-1])), mc.shard_client(1 - int(primary[-1]))
    assert have[db].a.count_documents({}) == 300
    assert "a" not in _names(other, db)
    for k in (0, 1):
        assert mc.router_client(k)[db].a.count_documents({}) == 300
    mc.router_client(1)[db].a.insert_one({"_id": "after"})
    assert have[db].a.find_one({"_id": "after"}) is not None


@pytest.mark.parametrize("phase,moved", MP_PHASES)
def test_donor_killed_before_each_phase(mc, phase, moved):
    db = "mp_k9_" + phase
    _crash_setup(mc, db)
    before = _dbentry(mc, db)
    fail_point(mc.shard_client(0), "crashBeforeCoordinatorPhase", "alwaysOn",
               {"type": "MovePrimaryCoordinator", "phase": phase})
    with pytest.raises(PyMongoError):
        _mover(mc, db)()
    mc.shards[0].proc.wait(30)
    mc.restart_shard(0)
    wait_until(lambda: _mp_docs(mc.shard_client(0)) == 0, timeout=60,
               what="the restarted donor to finish or undo the move")
    _assert_moved_once(mc, db, before, moved)


def test_donor_killed_after_sending_the_commit_finishes_the_move(mc):
    # The config server committed; the donor dies before it heard so (its document says
    # "commit"). The restarted donor asks the config server and rolls forward.
    db = "mp_k9_commit_sent"
    _crash_setup(mc, db)
    before = _dbentry(mc, db)
    cfg = mc.config_client()
    t = run_to_fail_point(cfg, "hangBeforeReplyingCommitMovePrimary", _mover(mc, db),
                          catch=PyMongoError)
    try:
        mc.shards[0].kill()
    finally:
        fail_point(cfg, "hangBeforeReplyingCommitMovePrimary", "off")
    t.join(90)
    mc.restart_shard(0)
    wait_until(lambda: _mp_docs(mc.shard_client(0)) == 0, timeout=60,
               what="the restarted donor to finish the move")
    _assert_moved_once(mc, db, before, True)


def test_donor_killed_after_commit_finishes_cleanup(mc):
    db = "mp_kill_after"
    r = _crash_setup(mc, db)
    donor = mc.shard_client(0)
    t = run_to_fail_point(donor, "hangBeforeMovePrimaryCleanup", _mover(mc, db), catch=PyMongoError)
    assert _dbentry(mc, db)["primary"] == "shard1"
    mc.shards[0].kill()
    t.join(90)
    mc.restart_shard(0)
    donor = mc.shard_client(0)
    wait_until(lambda: _mp_docs(donor) == 0,
               what="the movePrimary coordinator document to be finished")
    assert _names(donor, db) == []
    assert mc.shard_client(1)[db].a.count_documents({}) == 300
    assert r[db].a.count_documents({}) == 300
    assert mc.router_client(1)[db].a.count_documents({}) == 300


# ---------------------------------------------------------------- reads during the clone

def _move_in_thread(mc, db, to, res, err):
    def move():
        try:
            res.append(mc.router_client().admin.command("movePrimary", db, to=to))
        except PyMongoError as e:
            err.append(e)

    t = threading.Thread(target=move)
    t.start()
    return t


def test_reads_go_on_while_cloning_writes_wait(mc):
    # Like MongoDB's movePrimary, the donor blocks only writes (and DDL) while it clones;
    # find, listCollections and listIndexes answer until the short commit phase, which
    # blocks reads too.
    r = mc.router_client()
    db = "mp_reads"
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r[db].a.insert_many([{"_id": i, "x": i} for i in range(100)])
    r[db].a.create_index([("x", 1)], name="x_1")
    r[db].b.insert_many([{"_id": i} for i in range(10)])
    donor = mc.shard_client(0)
    wait_hung = hang(donor, "hangBeforeCloningData")
    res, err = [], []
    t = _move_in_thread(mc, db, "shard1", res, err)
    try:
        wait_hung()
        wrote, write_err = threading.Event(), []

        def write():
            try:
                mc.router_client(1)[db].a.insert_one({"_id": 1000, "x": 1000})
            except PyMongoError as e:
                write_err.append(e)
            wrote.set()

        w = threading.Thread(target=write)
        w.start()
        # A hang would fail these: the shard (or router) gives up at maxTimeMS.
        for rc in (r, mc.router_client(1)):
            d = rc[db]
            assert sorted(x["_id"] for x in d.a.find().max_time_ms(5000)) == list(range(100))
            assert d.a.count_documents({"x": {"$gte": 50}}, maxTimeMS=5000) == 50
            lc = d.command("listCollections", maxTimeMS=5000)["cursor"]["firstBatch"]
            assert sorted(c["name"] for c in lc) == ["a", "b"]
            li = d.command("listIndexes", "a", maxTimeMS=5000)["cursor"]["firstBatch"]
            assert sorted(i["name"] for i in li) == ["_id_", "x_1"]
        # Writes wait in the critical section: one with a time limit runs out...
        # (MaxTimeMSExpired: the router's own deadline fails the command, as mongos's does; a
        # shard's answer first would come back as the statement's write error.)
        try:
            reply = r[db].command("insert", "a", documents=[{"_id": 2000}], maxTimeMS=300)
            assert [x["code"] for x in reply.get("writeErrors", [])] == [50], reply
        except OperationFailure as e:
            assert e.code == 50, e.details
        with pytest.raises(OperationFailure) as e:
            r[db].command("createIndexes", "b", indexes=[{"key": {"y": 1}, "name": "y_1"}],
                          maxTimeMS=300)
        assert e.value.code == 50
        assert not wrote.is_set()  # ...and one without waits for the move
        fail_point(donor, "hangBeforeCloningData", "off")
        w.join(60)
        assert wrote.is_set() and not write_err, write_err
        t.join(60)
    finally:
        fail_point(donor, "hangBeforeCloningData", "off")
        t.join(60)
    assert res and not err, err
    assert _dbentry(mc, db)["primary"] == "shard1"
    s0, s1 = mc.shard_client(0), mc.shard_client(1)
    assert _names(s0, db) == []
    assert _names(s1, db) == ["a", "b"]
    assert sorted(x["_id"] for x in s1[db].a.find()) == list(range(100)) + [1000]
    assert _indexes(s1, db, "a") == [("_id_", (("_id", 1),), False), ("x_1", (("x", 1),), False)]
    for rc in (r, mc.router_client(1)):
        assert rc[db].a.count_documents({}) == 101
        assert rc[db].a.find_one({"_id": 2000}) is None
        assert _names(rc, db) == ["a", "b"]


def test_commit_phase_blocks_catalog_reads(mc):
    # In the commit phase reads wait, listCollections included (it carries the database
    # version): a listing of the old primary's catalog would be stale once it commits.
    r = mc.router_client()
    db = "mp_commit_reads"
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r[db].a.insert_many([{"_id": i} for i in range(10)])
    donor = mc.shard_client(0)
    wait_hung = hang(donor, "hangBeforeMovePrimaryCommit")
    res, err = [], []
    t = _move_in_thread(mc, db, "shard1", res, err)
    try:
        wait_hung()
        for cmd in ({"listCollections": 1}, {"listIndexes": "a"}, {"find": "a"}):
            with pytest.raises(OperationFailure) as e:
                r[db].command(dict(cmd, maxTimeMS=300))
            assert e.value.code == 50, cmd
    finally:
        fail_point(donor, "hangBeforeMovePrimaryCommit", "off")
        t.join(60)
    assert res and not err, err
    lc = r[db].command("listCollections")["cursor"]["firstBatch"]
    assert [c["name"] for c in lc] == ["a"]
    assert r[db].a.count_documents({}) == 10


# ---------------------------------------------------------------- kill -9 of the config server

def _config_kill_setup(mc, db):
    r = mc.router_client()
    r.admin.command("enableSharding", db, primaryShard="shard0")
    j = pymongo.WriteConcern(j=True)
    r[db].get_collection("a", write_concern=j).insert_many([{"_id": i} for i in range(300)])
    r[db].a.create_index([("x", 1)], name="x_1")
    r[db].get_collection("b", write_concern=j).insert_many([{"_id": i} for i in range(50)])
    r.admin.command("shardCollection", db + ".sh", key={"_id": 1})
    r[db].get_collection("sh", write_concern=j).insert_many([{"_id": i} for i in range(20)])
    return r


def _check_settled(mc, db, primary, extra=0):
    """The move is over (no coordinator document on either shard), config.databases names
    'primary', the unsharded collections are there and only there, nothing is lost or
    doubled (through both routers and on each shard), and writes are accepted again."""
    for i in (0, 1):
        wait_until(lambda: _mp_doc(mc.shard_client(i), db) is None, timeout=120, what="shard%d to finish the movePrimary" % i)
    assert _dbentry(mc, db)["primary"] == primary
    other = 1 - int(primary[-1])
    have, gone = mc.shard_client(int(primary[-1])), mc.shard_client(other)
    want_a = list(range(300 + extra))
    assert sorted(d["_id"] for d in have[db].a.find({}, {"_id": 1})) == want_a
    assert sorted(d["_id"] for d in have[db].b.find({}, {"_id": 1})) == list(range(50))
    assert "x_1" in [i["name"] for i in have[db].a.list_indexes()]
    assert _names(gone, db) in ([], ["sh"])
    for k in (0, 1):
        rc = mc.router_client(k, socketTimeoutMS=30000)
        assert sorted(d["_id"] for d in rc[db].a.find({}, {"_id": 1})) == want_a
        assert rc[db].b.count_documents({}) == 50
        assert rc[db].sh.count_documents({}) == 20
        # (the sharded collection is listed only where it has chunks: not moved)
        assert [n for n in _names(rc, db) if n != "sh"] == ["a", "b"]
    # The donor's critical section is gone: a write with a time limit goes through.
    r = mc.router_client()
    reply = r[db].command("insert", "a", documents=[{"_id": 300 + extra}], maxTimeMS=10000)
    assert reply["n"] == 1 and "writeErrors" not in reply, reply
    assert have[db].a.count_documents({"_id": 300 + extra}) == 1
    assert gone[db].a.count_documents({}) == 0


def _restart_config(mc):
    mc.config.start()
    # The routers see the config server again.
    wait_until(lambda: _ping_routers(mc), timeout=60, what="the routers to reach the config server")


def _ping_routers(mc):
    try:
        for k in (0, 1):
            mc.router_client(k, serverSelectionTimeoutMS=2000).admin.command("listShards")
        return True
    except PyMongoError:
        return False


def test_config_server_killed_before_the_clone(mc):
    # The donor has blocked writes and written its coordinator document; the config server
    # dies before the clone. The donor clones, then retries the commit until the config
    # server is back: the move completes and a later one works.
    db = "mp_cfg_kill_clone"
    _config_kill_setup(mc, db)
    donor = mc.shard_client(0)
    wait_hung = hang(donor, "hangBeforeCloningData")
    res, err = [], []
    t = _move_in_thread(mc, db, "shard1", res, err)
    try:
        wait_hung()
        assert _mp_doc(donor, db)["toShardId"] == "shard1"
        mc.config.kill()
    finally:
        fail_point(donor, "hangBeforeCloningData", "off")
    # The clone reaches the recipient while the config server is down; the request waits
    # on the donor (it was sent there, not through the config server: MongoDB 7.0's flow).
    wait_until(lambda: mc.shard_client(1)[db].b.count_documents({}) == 50, timeout=60,
               what="the clone to reach the recipient")
    assert t.is_alive()
    _restart_config(mc)
    t.join(90)
    assert not t.is_alive()
    _check_settled(mc, db, "shard1")
    mc.router_client().admin.command("movePrimary", db, to="shard0")
    _check_settled(mc, db, "shard0", extra=1)


def test_config_server_killed_before_answering_the_commit(mc):
    # The config server has written the commit (majority) and dies before answering the
    # donor: the donor keeps its critical section, asks again once the config server is
    # back, learns the move committed and finishes it.
    db = "mp_cfg_kill_commit"
    _config_kill_setup(mc, db)
    cfg = mc.config_client()
    wait_hung = hang(cfg, "hangBeforeReplyingCommitMovePrimary")
    res, err = [], []
    t = _move_in_thread(mc, db, "shard1", res, err)
    wait_hung()
    assert _dbentry(mc, db)["primary"] == "shard1"
    mc.config.kill()
    # The donor still holds its critical section: a write cannot slip in on it (it times
    # out there, or fails earlier on the router without the config server).
    try:
        reply = mc.router_client()[db].command("insert", "a", documents=[{"_id": "lost?"}],
                                               maxTimeMS=500)
        assert reply.get("n", 0) == 0, reply
    except OperationFailure:
        pass
    assert mc.shard_client(0)[db].a.count_documents({"_id": "lost?"}) == 0
    _restart_config(mc)
    t.join(90)
    assert not t.is_alive()
    _check_settled(mc, db, "shard1")
    mc.router_client().admin.command("movePrimary", db, to="shard0")
    _check_settled(mc, db, "shard0", extra=1)


def test_config_server_killed_before_the_cleanup(mc):
    # The move committed and the donor left its critical section; the config server dies
    # while waiting for the donor's answer. The donor's cleanup needs no config server.
    db = "mp_cfg_kill_cleanup"
    _config_kill_setup(mc, db)
    donor = mc.shard_client(0)
    wait_hung = hang(donor, "hangBeforeMovePrimaryCleanup")
    res, err = [], []
    t = _move_in_thread(mc, db, "shard1", res, err)
    try:
        wait_hung()
        assert _dbentry(mc, db)["primary"] == "shard1"
        mc.config.kill()
    finally:
        fail_point(donor, "hangBeforeMovePrimaryCleanup", "off")
    t.join(90)
    assert not t.is_alive()
    wait_until(lambda: _mp_doc(donor, db) is None,
               timeout=60, what="the donor's cleanup without the config server")
    assert _names(donor, db) == ["sh"]
    _restart_config(mc)
    _check_settled(mc, db, "shard1")
    mc.router_client().admin.command("movePrimary", db, to="shard0")
    _check_settled(mc, db, "shard0", extra=1)

def _times_logged(proc, log_id, **attr):
    """How many events 'log_id' whose attr holds the given fields proc's log has."""
    n = 0
    for line in proc.read_log().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        n += e.get("id") == log_id and all(e.get("attr", {}).get(k) == v
                                           for k, v in attr.items())
    return n


def _retry_joins(mc, r, db, proc, log_id):
    """With the donor held before the commit and the first request gone: a retry (same
    target) joins the running move (event 'log_id' in proc's log) and waits; another target
    gets 117 at once. Once the donor goes on, the retry answers ok: db's primary is shard1,
    db.a's 300 documents are there and gone from shard0, no coordinator document is left."""
    donor = mc.shard_client(0)
    retry = None
    try:
        retry = Background(_mover(mc, db), catch=PyMongoError)
        # The first request logged it too: the retry is the second.
        wait_until(lambda: _times_logged(proc, log_id, db=db, to="shard1") >= 2,
                   what="the retry to reach the donor")
        with pytest.raises(OperationFailure) as e:
            r.admin.command("movePrimary", db, to="shard0")
        assert e.value.code == 117  # ConflictingOperationInProgress
        assert "with different arguments" in str(e.value)
        assert not retry.done and retry.error is None
    finally:
        fail_point(donor, "hangBeforeMovePrimaryCommit", "off")
    retry.join(90)
    assert not retry.is_alive()
    assert retry.done and retry.result["ok"] == 1, retry.error
    assert _dbentry(mc, db)["primary"] == "shard1"
    assert mc.shard_client(1)[db].a.count_documents({}) == 300
    assert _names(mc.shard_client(0), db) == []
    assert not _mp_doc(mc.shard_client(0), db)
    assert r[db].a.count_documents({}) == 300
    r[db].a.insert_one({"_id": 300})
    assert mc.shard_client(1)[db].a.count_documents({}) == 301


def test_retry_joins_the_running_move(mc):
    db = "mp_join"
    r = _crash_setup(mc, db)
    # The first request gives up while the donor is held before the commit: the router stops
    # waiting (maxTimeMS); the config server and the donor go on.
    first = run_to_fail_point(
        mc.shard_client(0), "hangBeforeMovePrimaryCommit",
        lambda: mc.router_client().admin.command("movePrimary", db, to="shard1", maxTimeMS=1000),
        catch=PyMongoError)
    first.join(60)
    assert not first.is_alive() and first.error is not None, first.result
    # The retry reaches the donor (MongoDB 7.0's flow: the router sends _shardsvrMovePrimary
    # to the primary shard), which is still moving the database: it joins there.
    _retry_joins(mc, r, db, mc.shards[0], 4200308)


def test_retry_after_config_server_restart_joins_the_move_on_the_donor(mc):
    db = "mp_join_restart"
    r = _crash_setup(mc, db)
    # The first request gives up while the donor is held before the commit, and the config
    # server dies and comes back meanwhile; the donor goes on.
    first = run_to_fail_point(
        mc.shard_client(0), "hangBeforeMovePrimaryCommit",
        lambda: mc.router_client().admin.command("movePrimary", db, to="shard1", maxTimeMS=1000),
        catch=PyMongoError)
    mc.config.kill()
    first.join(90)
    assert not first.is_alive() and first.error is not None, first.result
    mc.config.start()
    # The retry reaches the donor, which is still moving the database: it joins there.
    _retry_joins(mc, r, db, mc.shards[0], 4200308)


def test_move_waits_for_a_running_ddl_coordinator(mc):
    # MongoDB 7.0's flow: the primary shard takes the database's DDL lock in X before it
    # asks the config server anything. A shardCollection coordinator holding the database
    # in IX, held before its commit on the config server, makes the move wait (it used to
    # deadlock: the config server held its database mutex while it called the shard, and
    # the coordinator's commit needed that mutex); then both finish.
    db = "mp_ddl_wait"
    r = _crash_setup(mc, db)
    donor = mc.shard_client(0)
    fail_point(donor, "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": "CreateCollectionCoordinator", "phase": "commit"})
    create = None
    move = None
    try:
        wait = hang(donor, "hangBeforeCoordinatorPhase")
        create = Background(lambda: r.admin.command("shardCollection", db + ".sh",
                                                    key={"x": 1}), catch=PyMongoError)
        wait()
        move = Background(_mover(mc, db), catch=PyMongoError)
        wait_until(lambda: any(op.get("desc") == "CreateCollectionCoordinator"
                               for op in donor.admin.command("currentOp")["inprog"]),
                   what="the coordinator in currentOp")
        time.sleep(0.3)  # the move is waiting for the lock: nothing may have moved
        assert not move.done and _dbentry(mc, db)["primary"] == "shard0"
    finally:
        fail_point(donor, "hangBeforeCoordinatorPhase", "off")
    create.join(60)
    move.join(90)
    assert create.done, create.error
    assert move.done, move.error
    assert _dbentry(mc, db)["primary"] == "shard1"
    assert config_db(mc).collections.find_one({"_id": db + ".sh"})["key"] == {"x": 1}
    assert mc.shard_client(1)[db].a.count_documents({}) == 300


def test_ddl_waiting_behind_the_move_runs_on_the_new_primary(mc):
    # A drop that passed the old primary's version check while the move held the database
    # waits for the DDL lock; once it has it, the databaseVersion is checked again
    # (StaleDbVersion), and the router sends it to the new primary.
    db = "mp_ddl_behind"
    r = _crash_setup(mc, db)
    r[db].b.insert_one({"_id": 1})
    donor = mc.shard_client(0)
    move = run_to_fail_point(donor, "hangBeforeCloningData", _mover(mc, db), catch=PyMongoError)
    drop = None
    try:
        drop = Background(lambda: mc.router_client(1)[db].drop_collection("b"),
                          catch=PyMongoError)
        time.sleep(0.3)
        assert not drop.done
    finally:
        fail_point(donor, "hangBeforeCloningData", "off")
    move.join(90)
    drop.join(60)
    assert move.done, move.error
    assert drop.done, drop.error
    assert _dbentry(mc, db)["primary"] == "shard1"
    assert "b" not in _names(mc.shard_client(1), db)
    assert "b" not in _names(mc.shard_client(0), db)
    assert _names(mc.shard_client(1), db) == ["a"]


def test_user_write_blocking_drains_a_running_move(mc):
    # Enabling user write blocking first drains the DDL on the shards (prepare phase): it
    # waits for the running movePrimary, and a new one is refused until blocking ends.
    db = "mp_uwb"
    r = _crash_setup(mc, db)
    donor = mc.shard_client(0)
    move = run_to_fail_point(donor, "hangBeforeCloningData", _mover(mc, db), catch=PyMongoError)
    block = None
    try:
        block = Background(lambda: r.admin.command("setUserWriteBlockMode", 1,
                                                   **{"global": True}), catch=PyMongoError)
        time.sleep(0.3)
        assert not block.done and block.error is None
    finally:
        fail_point(donor, "hangBeforeCloningData", "off")
    move.join(90)
    block.join(60)
    try:
        assert move.done, move.error
        assert block.done, block.error
        assert _dbentry(mc, db)["primary"] == "shard1"
        with pytest.raises(OperationFailure) as e:
            r.admin.command("movePrimary", db, to="shard0")
        assert e.value.code == 371  # UserWritesBlocked
    finally:
        r.admin.command("setUserWriteBlockMode", 1, **{"global": False})
    r.admin.command("movePrimary", db, to="shard0")
    assert _dbentry(mc, db)["primary"] == "shard0"
