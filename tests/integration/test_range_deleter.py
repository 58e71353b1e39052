"""Orphaned range deletion on a shard (src/shard/range_deleter.c; seeds/000 "Orphaned range
deletion"): config.rangeDeletions tasks with the pending flag, the deleter thread that waits
for queries still using metadata that owned the range, then orphanCleanupDelaySecs, then
deletes the range in batches (oplogged with fromMigrate: true) and removes the task, and
cleanupOrphaned.

Tasks are created with the test-only _shardsvrTestRangeDeletion command, which calls the same
functions the migration coordinator uses (persist / markReady / remove). The config server's
config.* documents are written by hand, as in test_shardsvr.py; the collection's uuid there is
the shard's local one."""

import datetime
import time
import uuid

import pytest
from bson import Binary, Int64, MaxKey, MinKey, ObjectId, Timestamp
from pymongo.errors import OperationFailure

from shale_fixtures import wait_until

COLL_TS = Timestamp(1700000000, 1)
FAST = ["--setParameter", "orphanCleanupDelaySecs=0",
        "--setParameter", "rangeDeleterBatchSize=3",
        "--setParameter", "rangeDeleterBatchDelayMS=1"]


def _uuid():
    return uuid.uuid4()


def _b(u):
    """A UUID as BinData subtype 4: the clients read and write UUIDs as "standard", but
    pymongo 3.11 encodes db.command()'s arguments with the legacy subtype 3."""
    return Binary(u.bytes, 4) if isinstance(u, uuid.UUID) else u


def _task_arg(task):
    return {k: _b(v) for k, v in task.items()}


class RDCluster:
    """A config server with config.* written by hand and one shard 'shard0'. Collection
    test.c (key {x: 1}, index {x: 1}) has chunks [MinKey, 0) on shard0 at 1|0 and
    [0, MaxKey) on shard1 at 1|1 (unless shard0_owns_all); the shard holds documents
    x = -5 .. 19, so x >= 0 are orphans."""

    def __init__(self, shale_process, key=None, shard0_owns_all=False, extra=FAST):
        self.key = key or {"x": 1}
        self.cfg = shale_process(["node", "--configsvr", "--replSet", "csrs"], name="csrs")
        self.shard = shale_process(["node", "--shardsvr", "--replSet", "shard0"],
                                   name="shard0", start=False)
        self.shard.start(extra=extra)
        self.cfgc = self.cfg.client(uuidRepresentation="standard")
        self.sc = self.shard.client(uuidRepresentation="standard")
        self.sc.admin.command("_addShard", 1, shardIdentity={
            "shardName": "shard0", "clusterId": ObjectId(),
            "configsvrConnectionString": "csrs/" + self.cfg.host})
        self.sc.test.create_collection("c")
        self.sc.test.c.create_index(list(self.key.items()))
        info = self.sc.test.command("listCollections", filter={"name": "c"})
        self.uuid = info["cursor"]["firstBatch"][0]["info"]["uuid"]
        self.epoch = ObjectId()
        conf = self.cfgc.config
        conf.databases.insert_one({"_id": "test", "primary": "shard0", "version": {
            "uuid": _uuid(), "timestamp": Timestamp(1700000000, 2), "lastMod": 1}})
        conf.collections.insert_one({
            "_id": "test.c", "lastmodEpoch": self.epoch,
            "lastmod": datetime.datetime(2023, 11, 14), "timestamp": COLL_TS,
            "uuid": self.uuid, "key": self.key, "unique": False, "noBalance": False})
        field = list(self.key)[0]
        split = Int64(0) if self.key[field] == "hashed" else 0
        self.chunk_ids = [ObjectId(), ObjectId()]
        conf.chunks.insert_many([
            {"_id": self.chunk_ids[0], "uuid": self.uuid, "min": {field: MinKey()},
             "max": {field: split}, "shard": "shard0", "lastmod": Timestamp(1, 0),
             "history": [{"validAfter": COLL_TS, "shard": "shard0"}]},
            {"_id": self.chunk_ids[1], "uuid": self.uuid, "min": {field: split},
             "max": {field: MaxKey()}, "shard": "shard0" if shard0_owns_all else "shard1",
             "lastmod": Timestamp(1, 1),
             "history": [{"validAfter": COLL_TS,
                          "shard": "shard0" if shard0_owns_all else "shard1"}]},
        ])
        self.sc.test.c.insert_many([{"_id": i, "x": i} for i in range(-5, 20)])

    def sv(self, major, minor):
        return {"e": self.epoch, "t": COLL_TS, "v": Timestamp(major, minor)}

    def persist(self, min_, max_, pending=False, when="now", ns="test.c", coll_uuid=None,
                orphans=0):
        tid = _uuid()
        task = {"_id": tid, "nss": ns, "collectionUuid": coll_uuid or self.uuid,
                "donorShardId": "shard0", "range": {"min": min_, "max": max_},
                "whenToClean": when, "numOrphanDocs": Int64(orphans), "keyPattern": self.key}
        if pending:
            task["pending"] = True
        self.sc.admin.command("_shardsvrTestRangeDeletion", "persist", task=_task_arg(task))
        return tid

    def tasks(self):
        return list(self.sc.config.rangeDeletions.find())

    def task_gone(self, tid):
        return self.sc.config.rangeDeletions.find_one({"_id": tid}) is None

    def xs(self):
        return sorted(d["x"] for d in self.sc.test.c.find())


@pytest.fixture
def rd(shale_process):
    return RDCluster(shale_process)


def test_task_document_schema_and_index(rd):
    tid = rd.persist({"x": 100}, {"x": 200}, pending=True, when="delayed")
    doc = rd.sc.config.rangeDeletions.find_one({"_id": tid})
    assert doc == {"_id": tid, "nss": "test.c", "collectionUuid": rd.uuid,
                   "donorShardId": "shard0", "range": {"min": {"x": 100}, "max": {"x": 200}},
                   "pending": True, "whenToClean": "delayed", "numOrphanDocs": 0,
                   "keyPattern": {"x": 1}}
    idx = {i["name"]: i for i in rd.sc.config.rangeDeletions.list_indexes()}
    spec = idx["collectionUuid_1_range.min_1_range.max_1"]
    assert dict(spec["key"]) == {"collectionUuid": 1, "range.min": 1, "range.max": 1}
    assert spec["unique"] is True
    # Same id again: DuplicateKey; markReady of an unknown id: NoSuchKey.
    with pytest.raises(OperationFailure) as e:
        rd.sc.admin.command("_shardsvrTestRangeDeletion", "persist", task=_task_arg(doc))
    assert e.value.code == 11000
    with pytest.raises(OperationFailure) as e:
        rd.sc.admin.command("_shardsvrTestRangeDeletion", "markReady", id=_b(_uuid()))
    assert e.value.code == 4
    # A malformed task is refused with MongoDB's IDL errors.
    bad = dict(doc)
    del bad["whenToClean"]
    with pytest.raises(OperationFailure) as e:
        rd.sc.admin.command("_shardsvrTestRangeDeletion", "persist", task=_task_arg(bad))
    assert e.value.code == 40414
    # remove drops the task without touching its range; removing again is fine.
    rd.sc.admin.command("_shardsvrTestRangeDeletion", "remove", id=_b(tid))
    rd.sc.admin.command("_shardsvrTestRangeDeletion", "remove", id=_b(tid))
    assert rd.tasks() == []


def test_pending_waits_ready_deletes_only_orphans_of_the_range(rd):
    pending = rd.persist({"x": 5}, {"x": 10}, pending=True)
    # [-3, 5) straddles the chunk boundary: -3..-1 are owned by shard0 and must stay.
    ready = rd.persist({"x": -3}, {"x": 5})
    wait_until(lambda: rd.task_gone(ready), 20, "the ready task to finish")
    assert rd.xs() == list(range(-5, 0)) + list(range(5, 20))
    # The pending task was looked at and left alone.
    assert not rd.task_gone(pending)

    rd.sc.admin.command("_shardsvrTestRangeDeletion", "markReady", id=_b(pending))
    doc = rd.sc.config.rangeDeletions.find_one({"_id": pending})
    assert doc is None or "pending" not in doc
    wait_until(lambda: rd.task_gone(pending), 20, "the marked-ready task to finish")
    assert rd.xs() == list(range(-5, 0)) + list(range(10, 20))

    # The deletes went through the write path: oplogged, marked fromMigrate.
    ops = list(rd.sc.local.oplog.rs.find({"op": "d", "ns": "test.c"}))
    assert sorted(o["o"]["_id"] for o in ops) == list(range(0, 10))
    assert all(o.get("fromMigrate") is True for o in ops)
    stats = rd.sc.admin.command("serverStatus")["shardingStatistics"]
    assert stats["countDocsDeletedByRangeDeleter"] == 10
    assert stats["rangeDeleterTasks"] == 0 or rd.tasks() == []


def test_cursor_under_old_metadata_holds_the_deleter(shale_process):
    rd = RDCluster(shale_process, shard0_owns_all=True)
    db = rd.sc.test
    # A versioned query opened while shard0 owns [0, MaxKey) keeps that metadata.
    r = db.command("find", "c", filter={"x": {"$gte": 0}}, sort={"x": 1}, batchSize=2,
                   shardVersion=rd.sv(1, 1))
    cursor_id = r["cursor"]["id"]
    seen = [d["x"] for d in r["cursor"]["firstBatch"]]
    assert cursor_id != 0
    # The chunk moves to shard1 (as a migration commit would write it) and the shard
    # refreshes: the old metadata is now held by the cursor only.
    rd.cfgc.config.chunks.update_one(
        {"_id": rd.chunk_ids[1]},
        {"$set": {"shard": "shard1", "lastmod": Timestamp(2, 0)}})
    rd.cfgc.config.chunks.update_one({"_id": rd.chunk_ids[0]},
                                     {"$set": {"lastmod": Timestamp(2, 1)}})
    rd.sc.admin.command("_flushRoutingTableCacheUpdates", "test.c")
    tid = rd.persist({"x": 0}, {"x": MaxKey()})
    wait_until(lambda: "Waiting for ongoing queries" in rd.shard.read_log(), 20,
               "the deleter to wait for the cursor")
    assert not rd.task_gone(tid)
    assert rd.xs() == list(range(-5, 20))
    # The cursor still sees every document of the range it started with.
    while cursor_id != 0:
        r = db.command("getMore", cursor_id, collection="c", batchSize=4)
        cursor_id = r["cursor"]["id"]
        seen += [d["x"] for d in r["cursor"]["nextBatch"]]
        if cursor_id != 0:
            assert not rd.task_gone(tid)
    assert seen == list(range(0, 20))
    # Exhausted: the metadata is released and the range goes.
    wait_until(lambda: rd.task_gone(tid), 20, "the task to finish after the cursor")
    assert rd.xs() == list(range(-5, 0))
    assert "Finished waiting for ongoing queries" in rd.shard.read_log()


def test_killed_cursor_releases_the_range(shale_process):
    rd = RDCluster(shale_process, shard0_owns_all=True)
    db = rd.sc.test
    r = db.command("find", "c", filter={}, batchSize=1, shardVersion=rd.sv(1, 1))
    cursor_id = r["cursor"]["id"]
    rd.cfgc.config.chunks.update_one(
        {"_id": rd.chunk_ids[1]}, {"$set": {"shard": "shard1", "lastmod": Timestamp(2, 0)}})
    rd.sc.admin.command("_flushRoutingTableCacheUpdates", "test.c")
    tid = rd.persist({"x": 10}, {"x": MaxKey()})
    wait_until(lambda: "Waiting for ongoing queries" in rd.shard.read_log(), 20,
               "the deleter to wait for the cursor")
    db.command("killCursors", "c", cursors=[cursor_id])
    wait_until(lambda: rd.task_gone(tid), 20, "the task to finish after killCursors")
    assert rd.xs() == list(range(-5, 10))


def test_orphan_cleanup_delay_is_honoured(rd):
    rd.sc.admin.command("setParameter", 1, orphanCleanupDelaySecs=2)
    start = time.monotonic()
    tid = rd.persist({"x": 0}, {"x": 10}, when="delayed")
    now_task = rd.persist({"x": 10}, {"x": 12}, when="now")
    # A "now" task does not wait for the delay (nor for the delayed one).
    wait_until(lambda: rd.task_gone(now_task), 20, "the 'now' task")
    assert not rd.task_gone(tid) or time.monotonic() - start >= 2
    assert 0 in rd.xs() or time.monotonic() - start >= 2
    wait_until(lambda: rd.task_gone(tid), 20, "the delayed task")
    assert time.monotonic() - start >= 2
    assert rd.xs() == list(range(-5, 0)) + list(range(12, 20))


def test_tasks_resume_after_kill9(rd):
    rd.sc.admin.command("setParameter", 1, orphanCleanupDelaySecs=3600)
    ready = rd.persist({"x": 0}, {"x": 10}, when="delayed")
    pending = rd.persist({"x": 10}, {"x": 15}, pending=True)
    rd.sc.close()
    rd.shard.kill()
    rd.shard.start(extra=FAST)
    rd.sc = rd.shard.client(uuidRepresentation="standard")
    # The journaled tasks survived; the ready one resumes, the pending one waits.
    wait_until(lambda: rd.task_gone(ready), 20, "the resumed task")
    assert rd.xs() == list(range(-5, 0)) + list(range(10, 20))
    assert not rd.task_gone(pending)
    assert rd.sc.config.rangeDeletions.find_one({"_id": pending})["pending"] is True


def test_cleanup_orphaned(rd):
    rd.sc.admin.command("setParameter", 1, orphanCleanupDelaySecs=1)
    tid = rd.persist({"x": 0}, {"x": MaxKey()}, when="delayed")
    assert rd.sc.admin.command("cleanupOrphaned", "test.c")["ok"] == 1
    assert rd.task_gone(tid)
    assert rd.xs() == list(range(-5, 0))
    # Nothing to wait for: unknown and unsharded collections are fine.
    assert rd.sc.admin.command("cleanupOrphaned", "test.nothere")["ok"] == 1
    rd.sc.test.u.insert_one({"x": 1})
    assert rd.sc.admin.command("cleanupOrphaned", "test.u")["ok"] == 1
    with pytest.raises(OperationFailure) as e:
        rd.sc.admin.command("cleanupOrphaned", "nodot")
    assert e.value.code == 73  # InvalidNamespace
    with pytest.raises(OperationFailure):
        rd.sc.admin.command("cleanupOrphaned", 1)
    # A pending task keeps cleanupOrphaned waiting (until maxTimeMS here).
    rd.persist({"x": 0}, {"x": 5}, pending=True)
    with pytest.raises(OperationFailure) as e:
        rd.sc.admin.command("cleanupOrphaned", "test.c", maxTimeMS=300)
    assert e.value.code == 50  # MaxTimeMSExpired


def test_wait_overlapping(rd):
    tid = rd.persist({"x": 0}, {"x": 10}, pending=True)
    # A range that does not overlap returns at once; an overlapping one waits.
    rd.sc.admin.command("_shardsvrTestRangeDeletion", "waitOverlapping",
                        collectionUuid=_b(rd.uuid), min={"x": 10}, max={"x": 20})
    with pytest.raises(OperationFailure) as e:
        rd.sc.admin.command("_shardsvrTestRangeDeletion", "waitOverlapping",
                            collectionUuid=_b(rd.uuid), min={"x": 9}, max={"x": 20},
                            maxTimeMS=200)
    assert e.value.code == 50
    rd.sc.admin.command("_shardsvrTestRangeDeletion", "remove", id=_b(tid))
    rd.sc.admin.command("_shardsvrTestRangeDeletion", "waitOverlapping",
                        collectionUuid=_b(rd.uuid), min={"x": 9}, max={"x": 20})
    # remove did not delete the range.
    assert rd.xs() == list(range(-5, 20))


def test_hashed_shard_key(shale_process):
    rd = RDCluster(shale_process, key={"x": "hashed"})
    db = rd.sc.test
    owned = db.command("count", "c", shardVersion=rd.sv(1, 0))["n"]
    assert 0 < owned < 25
    tid = rd.persist({"x": Int64(0)}, {"x": MaxKey()})
    wait_until(lambda: rd.task_gone(tid), 20, "the hashed range")
    # Exactly the orphans went: what is left is what the shard owns.
    assert db.c.count_documents({}) == owned
    assert db.command("count", "c", shardVersion=rd.sv(1, 0))["n"] == owned


def test_dropped_collection_abandons_the_task(rd):
    other = _uuid()
    tid = rd.persist({"x": 0}, {"x": 10}, coll_uuid=other)
    # A task of a collection that no longer exists, without a keyPattern (optional).
    gone = _uuid()
    rd.sc.admin.command("_shardsvrTestRangeDeletion", "persist", task=_task_arg({
        "_id": gone, "nss": "test.gone", "collectionUuid": _uuid(), "donorShardId": "shard1",
        "range": {"min": {"x": 0}, "max": {"x": 1}}, "whenToClean": "now"}))
    wait_until(lambda: rd.task_gone(tid) and rd.task_gone(gone), 20, "the abandoned tasks")
    # Another incarnation of the collection: nothing of this one was deleted.
    assert rd.xs() == list(range(-5, 20))


def test_without_a_shard_key_index(rd):
    # The deleter scans the collection when no index serves the shard key.
    rd.sc.test.c.drop_index("x_1")
    tid = rd.persist({"x": -2}, {"x": 8})
    wait_until(lambda: rd.task_gone(tid), 20, "the task over a collection scan")
    assert rd.xs() == list(range(-5, 0)) + list(range(8, 20))


def test_suspend_range_deletion_fail_point(rd):
    rd.sc.admin.command("configureFailPoint", "suspendRangeDeletion", mode="alwaysOn")
    tid = rd.persist({"x": 0}, {"x": 10})
    # Held: cleanupOrphaned cannot see the range go within its time limit.
    with pytest.raises(OperationFailure) as e:
        rd.sc.admin.command("cleanupOrphaned", "test.c", maxTimeMS=500)
    assert e.value.code == 50
    assert not rd.task_gone(tid)
    assert rd.xs() == list(range(-5, 20))
    rd.sc.admin.command("configureFailPoint", "suspendRangeDeletion", mode="off")
    rd.sc.admin.command("cleanupOrphaned", "test.c")
    assert rd.task_gone(tid)
    assert rd.xs() == list(range(-5, 0)) + list(range(10, 20))


def test_clone_orphans_in_a_real_cluster(cluster):
    """Orphans as an aborted migration leaves them: shard1's documents of a presplit hashed
    collection copied onto shard0. Range deletion tasks for shard1's chunks, on shard0,
    remove exactly the copies; the router sees every document once throughout."""
    r = cluster.router_client(uuidRepresentation="standard")
    r.admin.command("enableSharding", "rdreal")
    r.admin.command("shardCollection", "rdreal.h", key={"x": "hashed"})
    r.rdreal.h.insert_many([{"_id": i, "x": i} for i in range(40)])
    s0 = cluster.shard_client(0, uuidRepresentation="standard")
    s1 = cluster.shard_client(1, uuidRepresentation="standard")
    mine = sorted(d["_id"] for d in s0.rdreal.h.find())
    theirs = list(s1.rdreal.h.find())
    assert mine and theirs
    s0.rdreal.h.insert_many(theirs)
    assert r.rdreal.h.count_documents({}) == 40  # the router's reads filter the copies

    conf = cluster.config_client(uuidRepresentation="standard").config
    coll = conf.collections.find_one({"_id": "rdreal.h"})
    tids = []
    for ch in conf.chunks.find({"uuid": coll["uuid"], "shard": "shard1"}):
        tid = _uuid()
        s0.admin.command("_shardsvrTestRangeDeletion", "persist", task=_task_arg({
            "_id": tid, "nss": "rdreal.h", "collectionUuid": coll["uuid"],
            "donorShardId": "shard1", "range": {"min": ch["min"], "max": ch["max"]},
            "whenToClean": "now", "numOrphanDocs": Int64(len(theirs)),
            "keyPattern": {"x": "hashed"}}))
        tids.append(tid)
    assert tids
    s0.admin.command("cleanupOrphaned", "rdreal.h")
    assert s0.config.rangeDeletions.count_documents({}) == 0
    assert sorted(d["_id"] for d in s0.rdreal.h.find()) == mine
    assert s1.rdreal.h.count_documents({}) == len(theirs)
    assert sorted(d["_id"] for d in r.rdreal.h.find()) == list(range(40))


def test_started_task_counts_orphans_and_resumes_without_delay_after_kill9(rd):
    rd.sc.admin.command("configureFailPoint", "hangAfterDoingDeletion", mode="alwaysOn")
    tid = rd.persist({"x": 0}, {"x": 10}, when="delayed", orphans=10)

    def first_batch_done():
        d = rd.sc.config.rangeDeletions.find_one({"_id": tid})
        return d.get("processing") is True and d["numOrphanDocs"] == 7
    # Batches of 3 (rangeDeleterBatchSize): the task is marked processing, "now", and its
    # orphan count goes down with each batch.
    wait_until(first_batch_done, 20, "the first batch")
    assert rd.sc.config.rangeDeletions.find_one({"_id": tid})["whenToClean"] == "now"
    assert rd.xs() == list(range(-5, 0)) + list(range(3, 20))
    rd.sc.close()
    rd.shard.kill()
    # Restarted with a long delay: a started task does not wait for it again.
    rd.shard.start(extra=FAST + ["--setParameter", "orphanCleanupDelaySecs=3600"])
    rd.sc = rd.shard.client(uuidRepresentation="standard")
    assert rd.sc.admin.command("getParameter", 1, orphanCleanupDelaySecs=1)[
        "orphanCleanupDelaySecs"] == 3600
    wait_until(lambda: rd.task_gone(tid), 20, "the resumed processing task")
    assert rd.xs() == list(range(-5, 0)) + list(range(10, 20))


def test_recipient_gives_up_on_orphans_still_waiting_for_deletion(cluster):
    """A chunk moved back to the shard it left, while that shard's deletion of the same range
    still waits out orphanCleanupDelaySecs: the recipient waits
    receiveChunkWaitForRangeDeleterTimeoutMS for it, then the migration fails with
    OperationFailed (MongoDB's "Data transfer error"), nothing lost; once the orphans are
    deleted, the move succeeds."""
    r = cluster.router_client(uuidRepresentation="standard")
    r.admin.command("enableSharding", "rdback")
    r.admin.command("shardCollection", "rdback.c", key={"_id": 1})
    r.rdback.c.insert_many([{"_id": i} for i in range(100)])
    r.admin.command("split", "rdback.c", middle={"_id": 50})
    conf = cluster.config_client(uuidRepresentation="standard").config
    home = conf.chunks.find_one({"min": {"_id": 50}})["shard"]
    away = "shard1" if home == "shard0" else "shard0"
    home_admin = cluster.shard_client(int(home[-1])).admin
    old = home_admin.command("getParameter", 1, orphanCleanupDelaySecs=1,
                             receiveChunkWaitForRangeDeleterTimeoutMS=1)
    home_admin.command("setParameter", 1, orphanCleanupDelaySecs=3600,
                       receiveChunkWaitForRangeDeleterTimeoutMS=500)
    try:
        r.admin.command("moveChunk", "rdback.c", find={"_id": 60}, to=away)
        with pytest.raises(OperationFailure) as e:
            r.admin.command("moveChunk", "rdback.c", find={"_id": 60}, to=home)
        assert e.value.code == 96
        assert "receiveChunkWaitForRangeDeleterTimeoutMS" in str(e.value)
        assert conf.chunks.find_one({"min": {"_id": 50}})["shard"] == away
        assert sorted(d["_id"] for d in r.rdback.c.find()) == list(range(100))
        # Let the deleter go: the orphans leave, and the same move then succeeds.
        home_admin.command("setParameter", 1, orphanCleanupDelaySecs=0)
        home_admin.command("cleanupOrphaned", "rdback.c")
        r.admin.command("moveChunk", "rdback.c", find={"_id": 60}, to=home)
        assert conf.chunks.find_one({"min": {"_id": 50}})["shard"] == home
        assert sorted(d["_id"] for d in r.rdback.c.find()) == list(range(100))
    finally:
        home_admin.command("setParameter", 1, orphanCleanupDelaySecs=old["orphanCleanupDelaySecs"],
                           receiveChunkWaitForRangeDeleterTimeoutMS=old[
                               "receiveChunkWaitForRangeDeleterTimeoutMS"])
