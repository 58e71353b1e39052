"""Snapshot reads outside transactions through the router (issue 14 item 4): the router picks
atClusterTime when absent and returns it, every targeted shard reads that snapshot, targeting
follows the chunk owners at that time (chunk history, kept by split, merge and migration), a
shard filters by its chunk ownership at that time, getMore stays on the snapshot,
StaleChunkHistory when history does not reach the time, SnapshotTooOld past the shards'
history window. docs/design/snapshot_reads.md."""

import time

import pymongo
import pytest
from bson import MaxKey, MinKey, Timestamp

from shale_fixtures import config_db, error_code, module_cluster, wait_until

INVALID_OPTIONS = 72
SNAPSHOT_TOO_OLD = 239
STALE_CHUNK_HISTORY = 250

SNAP = {"level": "snapshot"}


def snap_at(ts):
    return {"level": "snapshot", "atClusterTime": ts}


@pytest.fixture(scope="module")
def sc(request):
    with module_cluster(request, shards=2) as c:
        yield c


def write_time(db, **cmd):
    res = db.command(cmd)
    assert res["ok"] == 1
    return res["operationTime"]


def values(db, ts, **kw):
    """{_id: v} of a snapshot find at ts through the router (drains the cursor)."""
    r = db.command("find", "c", readConcern=snap_at(ts), batchSize=7, **kw)
    assert r["cursor"]["atClusterTime"] == ts
    out = {d["_id"]: d["v"] for d in r["cursor"]["firstBatch"]}
    cid = r["cursor"]["id"]
    while cid != 0:
        r = db.command("getMore", cid, collection="c")
        assert r["cursor"]["atClusterTime"] == ts
        out.update({d["_id"]: d["v"] for d in r["cursor"]["nextBatch"]})
        cid = r["cursor"]["id"]
    return out


def owner(sc, ns, x):
    cfg = config_db(sc)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    for ch in cfg.chunks.find({"uuid": uuid}):
        lo, hi = ch["min"]["x"], ch["max"]["x"]
        if (lo == MinKey() or lo <= x) and (hi == MaxKey() or x < hi):
            return ch["shard"], ch.get("history", [])
    raise AssertionError("no chunk for %r" % x)


def test_past_across_updates_migration_split_merge(sc):
    r = sc.router_client()
    r.admin.command("enableSharding", "snap", primaryShard="shard0")
    r.admin.command("shardCollection", "snap.c", key={"x": 1})
    db = r.snap
    t0 = write_time(db, insert="c", documents=[{"_id": i, "x": i, "v": 0} for i in range(100)])
    past = {i: 0 for i in range(100)}

    t1 = write_time(db, update="c", updates=[{"q": {}, "u": {"$set": {"v": 1}}, "multi": True}])
    r.admin.command("split", "snap.c", middle={"x": 50})
    r.admin.command("moveChunk", "snap.c", find={"x": 70}, to="shard1")
    shard, history = owner(sc, "snap.c", 70)
    assert shard == "shard1"
    # The moved chunk's history: the new owner in front, valid after the commit.
    assert [h["shard"] for h in history][:2] == ["shard1", "shard0"]
    assert history[0]["validAfter"] > t1
    t2 = write_time(db, update="c", updates=[{"q": {}, "u": {"$set": {"v": 2}}, "multi": True}])
    r.admin.command("split", "snap.c", middle={"x": 25})
    r.admin.command("mergeChunks", "snap.c", bounds=[{"x": MinKey()}, {"x": 50}])
    # The merged chunk keeps the newest validAfter of the chunks it merged (none moved).
    _, merged_history = owner(sc, "snap.c", 10)
    assert len(merged_history) == 1 and merged_history[0]["validAfter"] <= t0
    db.c.delete_many({"x": {"$gte": 90}})

    # t0: everything on shard0 then; the documents of [50, MaxKey) now live on shard1, and
    # shard0 answers for them from its history (they are orphans there now).
    assert values(db, t0) == past
    assert values(db, t1) == {i: 1 for i in range(100)}
    assert values(db, t2) == {i: 2 for i in range(100)}
    # Targeted: the owner at that time.
    assert values(db, t0, filter={"x": 70}) == {70: 0}
    assert values(db, t0, filter={"x": {"$gte": 60, "$lt": 63}}) == {60: 0, 61: 0, 62: 0}
    # Aggregate and distinct at the past time.
    a = db.command("aggregate", "c", pipeline=[{"$group": {"_id": "$v", "n": {"$sum": 1}}}],
                   cursor={}, readConcern=snap_at(t1))
    assert a["cursor"]["firstBatch"] == [{"_id": 1, "n": 100}]
    assert a["cursor"]["atClusterTime"] == t1
    d = db.command("distinct", "c", key="v", readConcern=snap_at(t0))
    assert d["values"] == [0] and d["atClusterTime"] == t0

    # No atClusterTime: the router picks its newest time, returns it, and the present shows.
    now = db.command("find", "c", readConcern=SNAP, batchSize=1000)
    picked = now["cursor"]["atClusterTime"]
    assert isinstance(picked, Timestamp) and picked >= t2
    assert {d["_id"]: d["v"] for d in now["cursor"]["firstBatch"]} == {i: 2 for i in range(90)}
    # ... and the same time read again gives the same answer.
    assert values(db, picked) == {i: 2 for i in range(90)}
    d = db.command("distinct", "c", key="v", readConcern=SNAP)
    assert d["values"] == [2] and "atClusterTime" in d


def test_get_more_keeps_the_snapshot_while_writers_change_it(sc):
    r = sc.router_client()
    r.admin.command("enableSharding", "snapgm", primaryShard="shard0")
    r.admin.command("shardCollection", "snapgm.c", key={"x": 1})
    r.admin.command("split", "snapgm.c", middle={"x": 500})
    r.admin.command("moveChunk", "snapgm.c", find={"x": 700}, to="shard1")
    db = r.snapgm
    db.c.insert_many([{"_id": i, "x": i, "v": 0} for i in range(1000)])
    first = db.command("find", "c", readConcern=SNAP, batchSize=10, sort={"x": 1})
    at = first["cursor"]["atClusterTime"]
    seen = [d["v"] for d in first["cursor"]["firstBatch"]]
    cid = first["cursor"]["id"]
    db.c.update_many({}, {"$set": {"v": 1}})
    db.c.insert_many([{"_id": 5000 + i, "x": 5000 + i, "v": 1} for i in range(20)])
    db.c.delete_many({"x": {"$lt": 100}})
    while cid != 0:
        res = db.command("getMore", cid, collection="c", batchSize=97)
        assert res["cursor"]["atClusterTime"] == at
        seen += [d["v"] for d in res["cursor"]["nextBatch"]]
        cid = res["cursor"]["id"]
    assert seen == [0] * 1000


def test_stale_chunk_history_before_the_collection_was_sharded(sc):
    r = sc.router_client()
    r.admin.command("enableSharding", "snaph", primaryShard="shard0")
    db = r.snaph
    db.c.create_index("x")
    before = write_time(db, insert="c", documents=[{"_id": i, "x": i, "v": 0} for i in range(10)])
    r.admin.command("shardCollection", "snaph.c", key={"x": 1})
    db.command("find", "c")  # the router learns the routing table
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("find", "c", readConcern=snap_at(before))
    assert e.value.code == STALE_CHUNK_HISTORY
    assert "Cannot find shardId the chunk belonged to at cluster time" in str(e.value)
    # A time after sharding works.
    t = write_time(db, update="c", updates=[{"q": {"x": 1}, "u": {"$set": {"v": 5}}}])
    assert values(db, t)[1] == 5


def test_refused_commands_through_the_router(sc):
    r = sc.router_client()
    db = r.snapref
    db.c.insert_one({"_id": 1, "x": 1})
    for cmd in [
        {"count": "c"},
        {"findAndModify": "c", "query": {}, "update": {"$set": {"a": 2}}},
        {"listCollections": 1},
        {"listIndexes": "c"},
        {"insert": "c", "documents": [{"_id": 5}]},
        {"aggregate": "c", "pipeline": [{"$out": "o"}], "cursor": {}},
    ]:
        cmd = dict(cmd, readConcern=SNAP)
        assert error_code(lambda: db.command(cmd)) == INVALID_OPTIONS, cmd
    assert list(db.c.find()) == [{"_id": 1, "x": 1}]


def test_snapshot_too_old_past_the_shards_window(sc):
    r = sc.router_client()
    db = r.snapold
    t0 = write_time(db, insert="c", documents=[{"_id": 1, "x": 1, "v": 0}])
    shards = [sc.shard_client(i) for i in range(2)]
    for s in shards:
        s.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=1)
    try:
        time.sleep(2.1)

        def too_old():
            db.c.update_one({"_id": 1}, {"$inc": {"v": 1}})
            try:
                db.command("find", "c", readConcern=snap_at(t0))
            except pymongo.errors.OperationFailure as e:
                assert e.code == SNAPSHOT_TOO_OLD, e
                return True
            return False
        wait_until(too_old, timeout=20, what="SnapshotTooOld through the router")
    finally:
        for s in shards:
            s.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=300)


def test_node_driver_snapshot_session_through_the_router(sc):
    """The Node.js driver's snapshot sessions (issue 14 item 7): the time the first read
    returns pins every later read of the session, across both shards."""
    import json
    import subprocess
    from test_node_driver import HERE, node_binary
    r = sc.router_client()
    r.admin.command("enableSharding", "snapnode", primaryShard="shard0")
    r.admin.command("shardCollection", "snapnode.c", key={"k": 1})
    r.admin.command("split", "snapnode.c", middle={"k": 100})
    r.admin.command("moveChunk", "snapnode.c", find={"k": 150}, to="shard1")
    p = subprocess.Popen([node_binary(), HERE + "/snapshot.js", sc.uri(), "snapnode"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        first = json.loads(p.stdout.readline() or "{}")
        assert first.get("t"), p.stderr.read() if p.poll() is not None else first
        # The writes that follow land after the session's time on both shards: the router's
        # requests carry its $clusterTime (docs/design/vector_clock.md).
        p.stdin.write("go\n")
        p.stdin.flush()
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, stderr
    res = json.loads(stdout.strip().splitlines()[-1])
    assert res["first"] == [0] * 10
    assert res["atClusterTime"] is not None
    assert res["later"] == [0] * 200
    assert res["agg"] == [{"_id": 0, "n": 200}]
    assert res["distinct"] == [0]
    assert res["now"] == [1] * 150


def test_after_cluster_time_bounds_the_routers_choice(sc):
    r = sc.router_client()
    db = r.snapafter
    t = write_time(db, insert="c", documents=[{"_id": 1, "x": 1}])
    res = db.command("find", "c", readConcern={"level": "snapshot", "afterClusterTime": t})
    assert res["cursor"]["atClusterTime"] >= t
    assert res["cursor"]["firstBatch"] == [{"_id": 1, "x": 1}]
    # A time ahead of every node: the router keeps it, the shard reaches it.
    ahead = Timestamp(t.time + 3, 0)
    res = db.command("find", "c", readConcern={"level": "snapshot", "afterClusterTime": ahead})
    assert res["cursor"]["atClusterTime"] == ahead
    assert res["cursor"]["firstBatch"] == [{"_id": 1, "x": 1}]
    res = db.command("distinct", "c", key="x", readConcern={"level": "snapshot",
                                                           "atClusterTime": ahead})
    assert res["values"] == [1] and res["atClusterTime"] == ahead
