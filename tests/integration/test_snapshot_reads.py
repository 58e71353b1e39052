"""readConcern {level: "snapshot"} outside transactions on a data node (a replica set of
one): find, aggregate and distinct read at atClusterTime (picked by the node when absent and
returned in the reply), getMore stays on the cursor's snapshot, history is kept for
minSnapshotHistoryWindowInSeconds (SnapshotTooOld past it), and the commands MongoDB refuses
snapshot for are refused with its code. docs/design/snapshot_reads.md."""

import time

import pymongo
from bson import Timestamp

from shale_fixtures import error_code, wait_until

INVALID_OPTIONS = 72
SNAPSHOT_TOO_OLD = 239
NOT_A_REPLICA_SET = 123

SNAP = {"level": "snapshot"}


def snap_at(ts):
    return {"level": "snapshot", "atClusterTime": ts}


def op_time(db, **cmd):
    """Run a write command and return its operationTime."""
    return db.command(cmd)["operationTime"]


def test_find_aggregate_distinct_read_the_past(rs_node):
    db = rs_node.client().test
    db.c.insert_many([{"_id": i, "v": 0} for i in range(5)])
    t0 = db.command("ping")["operationTime"]
    res = db.command("update", "c", updates=[{"q": {}, "u": {"$set": {"v": 1}}, "multi": True}])
    assert res["nModified"] == 5
    db.c.delete_one({"_id": 4})
    db.c.insert_one({"_id": 9, "v": 2})

    # find at t0 sees the documents as they were; the reply names the time.
    r = db.command("find", "c", sort={"_id": 1}, readConcern=snap_at(t0))
    assert r["cursor"]["atClusterTime"] == t0
    assert [(d["_id"], d["v"]) for d in r["cursor"]["firstBatch"]] == [(i, 0) for i in range(5)]
    # A point find by _id too (the IDHACK path).
    r = db.command("find", "c", filter={"_id": 4}, readConcern=snap_at(t0))
    assert r["cursor"]["firstBatch"] == [{"_id": 4, "v": 0}]

    r = db.command("aggregate", "c", pipeline=[{"$group": {"_id": "$v", "n": {"$sum": 1}}}],
                   cursor={}, readConcern=snap_at(t0))
    assert r["cursor"]["atClusterTime"] == t0
    assert r["cursor"]["firstBatch"] == [{"_id": 0, "n": 5}]

    r = db.command("distinct", "c", key="v", readConcern=snap_at(t0))
    assert r["values"] == [0]
    assert r["atClusterTime"] == t0

    # Without atClusterTime: the newest committed time, returned, and the present data.
    r = db.command("find", "c", sort={"_id": 1}, readConcern=SNAP)
    at = r["cursor"]["atClusterTime"]
    assert isinstance(at, Timestamp) and at >= t0
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [0, 1, 2, 3, 9]
    r = db.command("distinct", "c", key="v", readConcern=SNAP)
    assert sorted(r["values"]) == [1, 2] and "atClusterTime" in r


def test_get_more_stays_on_the_snapshot(rs_node):
    db = rs_node.client().test
    db.c.insert_many([{"_id": i, "v": 0} for i in range(300)])
    r = db.command("find", "c", sort={"_id": 1}, batchSize=10, readConcern=SNAP)
    at = r["cursor"]["atClusterTime"]
    seen = [d["v"] for d in r["cursor"]["firstBatch"]]
    cid = r["cursor"]["id"]
    # Writers change every document and add more while the cursor is open.
    db.c.update_many({}, {"$set": {"v": 1}})
    db.c.insert_many([{"_id": 1000 + i, "v": 1} for i in range(50)])
    while cid != 0:
        r = db.command("getMore", cid, collection="c", batchSize=50)
        assert r["cursor"]["atClusterTime"] == at
        seen += [d["v"] for d in r["cursor"]["nextBatch"]]
        cid = r["cursor"]["id"]
    assert seen == [0] * 300

    # An aggregate's cursor too.
    r = db.command("aggregate", "c", pipeline=[{"$match": {"v": 1}}], cursor={"batchSize": 5},
                   readConcern=SNAP)
    at = r["cursor"]["atClusterTime"]
    n = len(r["cursor"]["firstBatch"])
    cid = r["cursor"]["id"]
    db.c.delete_many({})
    while cid != 0:
        r = db.command("getMore", cid, collection="c")
        assert r["cursor"]["atClusterTime"] == at
        n += len(r["cursor"]["nextBatch"])
        cid = r["cursor"]["id"]
    assert n == 350


def test_snapshot_too_old_past_the_history_window(rs_node):
    client = rs_node.client()
    db = client.test
    db.c.insert_one({"_id": 1, "v": 0})
    t0 = db.command("ping")["operationTime"]
    db.c.update_one({"_id": 1}, {"$set": {"v": 1}})
    # Within the default window (300 s) the past is there.
    r = db.command("find", "c", readConcern=snap_at(t0))
    assert r["cursor"]["firstBatch"] == [{"_id": 1, "v": 0}]
    assert client.admin.command("getParameter", 1,
                                minSnapshotHistoryWindowInSeconds=1)[
        "minSnapshotHistoryWindowInSeconds"] == 300
    client.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=1)
    try:
        time.sleep(2.1)  # the window is measured in wall-clock seconds of the timestamps

        def too_old():
            # Writes move the stable timestamp, and the oldest one follows it.
            db.c.update_one({"_id": 1}, {"$inc": {"v": 1}})
            try:
                db.command("find", "c", readConcern=snap_at(t0))
            except pymongo.errors.OperationFailure as e:
                assert e.code == SNAPSHOT_TOO_OLD, e
                assert "is older than the oldest available timestamp" in str(e)
                return True
            return False
        wait_until(too_old, timeout=20, what="SnapshotTooOld")
        # A recent time still reads.
        t1 = db.command("ping")["operationTime"]
        r = db.command("find", "c", readConcern=snap_at(t1))
        assert r["cursor"]["firstBatch"][0]["_id"] == 1
    finally:
        client.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=300)


def test_at_cluster_time_ahead_waits_within_max_time(rs_node):
    db = rs_node.client().test
    db.c.insert_one({"_id": 1})
    now = db.command("ping")["operationTime"]
    ahead = Timestamp(now.time + 2, 0)
    # A time a little ahead of the node is reached (the node's clock moves to it).
    r = db.command("find", "c", readConcern=snap_at(ahead))
    assert r["cursor"]["atClusterTime"] == ahead
    assert r["cursor"]["firstBatch"] == [{"_id": 1}]
    # Later writes land after it.
    t = db.command("insert", "c", documents=[{"_id": 2}])["operationTime"]
    assert t > ahead


def test_refused_commands_and_options(rs_node):
    db = rs_node.client().test
    db.c.insert_one({"_id": 1, "a": 1})
    for cmd in [
        {"count": "c"},
        {"findAndModify": "c", "query": {}, "update": {"$set": {"a": 2}}},
        {"listCollections": 1},
        {"listIndexes": "c"},
        {"insert": "c", "documents": [{"_id": 5}]},
        {"update": "c", "updates": [{"q": {}, "u": {"$set": {"a": 3}}}]},
        {"delete": "c", "deletes": [{"q": {}, "limit": 1}]},
        {"dropIndexes": "c", "index": "a_1"},
        {"aggregate": "c", "pipeline": [{"$out": "o"}], "cursor": {}},
        {"aggregate": "c", "pipeline": [{"$merge": {"into": "m"}}], "cursor": {}},
        {"find": "capped", "tailable": True},
    ]:
        cmd = dict(cmd, readConcern=SNAP)
        assert error_code(lambda: db.command(cmd)) == INVALID_OPTIONS, cmd
    assert error_code(lambda: db.client.admin.command(
        {"listDatabases": 1, "readConcern": SNAP})) == INVALID_OPTIONS
    # Nothing was written by the refused writes.
    assert list(db.c.find()) == [{"_id": 1, "a": 1}]
    now = db.command("ping")["operationTime"]
    # atClusterTime only with snapshot, not with afterClusterTime, never null.
    for rc in [{"level": "local", "atClusterTime": now},
               {"level": "snapshot", "atClusterTime": now, "afterClusterTime": now},
               {"level": "snapshot", "atClusterTime": Timestamp(0, 0)}]:
        assert error_code(lambda: db.command("find", "c", readConcern=rc)) == INVALID_OPTIONS


def test_standalone_refuses_snapshot(node):
    db = node.client().test
    db.c.insert_one({"_id": 1})
    assert error_code(lambda: db.command("find", "c", readConcern=SNAP)) == NOT_A_REPLICA_SET


def test_index_built_after_the_snapshot_time_is_not_used(rs_node):
    db = rs_node.client().test
    db.c.insert_many([{"_id": i, "a": i % 10} for i in range(100)])
    t0 = db.command("ping")["operationTime"]
    db.c.create_index("a")
    db.c.insert_one({"_id": 100, "a": 3})
    # At t0 the index had no keys: the read must scan the collection, and finds all 10.
    r = db.command("find", "c", filter={"a": 3}, readConcern=snap_at(t0))
    assert sorted(d["_id"] for d in r["cursor"]["firstBatch"]) == list(range(3, 100, 10))
    r = db.command("aggregate", "c", pipeline=[{"$match": {"a": 3}}, {"$count": "n"}],
                   cursor={}, readConcern=snap_at(t0))
    assert r["cursor"]["firstBatch"] == [{"n": 10}]
    # Now the index is used and sees the new document too.
    r = db.command("find", "c", filter={"a": 3}, readConcern=SNAP)
    assert len(r["cursor"]["firstBatch"]) == 11
    plan = db.command("explain", {"find": "c", "filter": {"a": 3}})["queryPlanner"]
    assert "IXSCAN" in str(plan["winningPlan"])


def _window(client):
    ws = client.admin.command("serverStatus")["wiredTiger"]["snapshot-window-settings"]
    return ws["current available snapshots window size in seconds"]


def test_history_window_shrinks_under_cache_pressure_and_grows_back(shale_process):
    """This WiredTiger keeps the history window's versions in its cache: a write burst larger
    than the cache's dirty share would otherwise have eviction spill and re-read the same pages
    until the window passed (minutes on a 256 MB cache). Under pressure the window in force
    shrinks (serverStatus shows it, reads older than it get SnapshotTooOld); afterwards it
    grows back to the setting. docs/design/snapshot_reads.md "The history window"."""
    node = shale_process(["node", "--replSet", "rs0"], name="rsnode", start=False)
    node.start(extra=["--setParameter", "minSnapshotHistoryWindowInSeconds=20"])
    client = node.client()
    db = client.test
    status = client.admin.command("serverStatus")["wiredTiger"]
    assert status["cache"]["maximum bytes configured"] == 256 * 1024 * 1024
    assert status["snapshot-window-settings"][
        "max target available snapshots window size in seconds"] == 20
    assert _window(client) == 20
    db.c.insert_one({"_id": "first"})
    t0 = db.command("ping")["operationTime"]
    assert db.command("find", "c", readConcern=snap_at(t0))["cursor"]["firstBatch"]

    state = {"next": 0}

    def shrunk():
        # 20k documents of ~1 KB per call: tens of MB dirtied within the window.
        start = state["next"]
        state["next"] += 20000
        db.big.insert_many([{"_id": i, "pad": "x" * 1000} for i in range(start, start + 20000)],
                           ordered=False)
        return _window(client) < 20
    wait_until(shrunk, timeout=120, what="the history window to shrink under cache pressure")

    def too_old():
        db.c.insert_one({})
        try:
            db.command("find", "c", readConcern=snap_at(t0))
        except pymongo.errors.OperationFailure as e:
            assert e.code == SNAPSHOT_TOO_OLD, e
            return True
        return False
    wait_until(too_old, timeout=60, what="SnapshotTooOld for a time behind the shrunk window")
    # Without pressure the window grows back to the setting.
    # (1 s every 2 s once eviction is idle: tens of seconds from the floor.)
    wait_until(lambda: _window(client) == 20, timeout=90,
               what="the history window to grow back")
    # A fresh write's time: the node was idle while the window grew, and an idle node keeps
    # only the window behind the clock, not its last write.
    db.c.insert_one({})
    t1 = db.command("ping")["operationTime"]
    assert db.command("find", "c", readConcern=snap_at(t1))["cursor"]["firstBatch"]
    assert db.big.count_documents({}) == state["next"]


def test_engine_config_string_and_eviction_readings(shale_process):
    """--wiredTigerEngineConfigString (MongoDB's flag) goes to wiredtiger_open after Shale's
    own settings, so it overrides them (here the fixture's 256 MB cache); serverStatus reports
    what clients pay when eviction falls behind and how much history is pinned, under
    WiredTiger's names. A setting WiredTiger refuses stops the node at start-up."""
    node = shale_process(["node", "--replSet", "rs0"], name="rsnode", start=False)
    node.start(extra=["--wiredTigerEngineConfigString", "cache_size=300M,eviction_dirty_target=3"])
    client = node.client()
    client.test.c.insert_one({"_id": 1})
    wt = client.admin.command("serverStatus")["wiredTiger"]
    assert wt["cache"]["maximum bytes configured"] == 300 * 1024 * 1024
    assert wt["cache"]["pages evicted by application threads"] >= 0
    for name in ("application thread time evicting (usecs)",
                 "application thread time waiting for cache (usecs)"):
        assert wt["thread-yield"][name] >= 0
    # The history window (300 s) behind a node that started a moment ago: under 300 s once
    # the oldest timestamp is first set (before, WiredTiger counts from timestamp 0).
    def pinned_seconds():
        t = client.admin.command("serverStatus")["wiredTiger"]["transaction"]
        return t["transaction range of timestamps currently pinned"] >> 32
    wait_until(lambda: 0 <= pinned_seconds() <= 300, what="the oldest timestamp to be set")
    assert wt["transaction"]["transaction range of IDs currently pinned"] >= 0
    node.stop()

    bad = shale_process(["node"], name="badcfg", start=False)
    bad.start(extra=["--wiredTigerEngineConfigString", "eviction_trigger=notanumber"],
              wait=False)
    assert bad.proc.wait(timeout=60) != 0
