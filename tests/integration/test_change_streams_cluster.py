"""Change streams through the router (docs/design/change_streams.md "Through a router"):
the stream opened on every shard and merged by resume token -- events of a sharded
collection from both shards in cluster-time order, idle shards not holding events back,
unsharded collections, database and cluster streams, resume across the merge, a chunk
migration during the stream adding no events and losing none, and resuming after the
router is restarted."""

import threading
import time

import pymongo
import pytest

from shale_fixtures import module_cluster


@pytest.fixture(scope="module")
def c(request):
    with module_cluster(request, shards=2,
                        shard_extra=["--setParameter", "orphanCleanupDelaySecs=0"]) as cl:
        yield cl


def _next(stream, timeout_s=15):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        ev = stream.try_next()
        if ev is not None:
            return ev
    raise AssertionError("no change event within %ss" % timeout_s)


def _sharded(r, db, coll):
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r.admin.command("shardCollection", "%s.%s" % (db, coll), key={"x": 1})
    r.admin.command("split", "%s.%s" % (db, coll), middle={"x": 0})
    r.admin.command("moveChunk", "%s.%s" % (db, coll), find={"x": 0}, to="shard1")
    return r[db][coll]


def test_sharded_collection_merged_in_order(c):
    r = c.router_client()
    coll = _sharded(r, "csc1", "s")
    with coll.watch(max_await_time_ms=300) as s:
        t0 = time.time()
        coll.insert_one({"_id": 1, "x": -5})   # shard0
        first = _next(s)
        # The other shard is idle: the event is not held back by it for long.
        assert time.time() - t0 < 3
        assert first["operationType"] == "insert" and first["documentKey"] == {"x": -5, "_id": 1}
        for i in range(20):
            coll.insert_one({"_id": 100 + i, "x": (i if i % 2 else -i - 1)})
        coll.update_one({"x": 3}, {"$set": {"y": 1}})
        coll.delete_one({"x": -1})
        evs = [_next(s) for _ in range(22)]
        assert [e["documentKey"]["_id"] for e in evs[:20]] == [100 + i for i in range(20)]
        times = [e["clusterTime"] for e in evs]
        assert times == sorted(times)
        assert evs[20]["operationType"] == "update"
        assert evs[20]["updateDescription"]["updatedFields"] == {"y": 1}
        assert evs[21]["operationType"] == "delete"
        # As MongoDB: a delete's entry holds the shard key, so its documentKey has it too.
        assert evs[21]["documentKey"] == {"x": -1, "_id": 100}
        tokens = [e["_id"]["_data"] for e in evs]
        assert tokens == sorted(tokens)
    # Resume from the middle: the rest, in order, from both shards.
    with coll.watch(resume_after=evs[9]["_id"], max_await_time_ms=300) as s:
        rest = [_next(s) for _ in range(12)]
        assert [e["_id"] for e in rest] == [e["_id"] for e in evs[10:]]


def test_unsharded_database_and_cluster_streams(c):
    r = c.router_client()
    r.admin.command("enableSharding", "csc2", primaryShard="shard1")
    with r.csc2.u.watch(max_await_time_ms=300) as cs, r.csc2.watch(max_await_time_ms=300) as ds, \
            r.watch(max_await_time_ms=300) as all_s:
        r.csc2.u.insert_one({"_id": 1})
        r.csc2.v.insert_one({"_id": 2})
        r.csc2.u.update_one({"_id": 1}, {"$set": {"a": 1}})
        ev = _next(cs)
        assert ev["operationType"] == "insert" and ev["ns"] == {"db": "csc2", "coll": "u"}
        assert _next(cs)["operationType"] == "update"
        assert [(e["operationType"], e["ns"]["coll"]) for e in (_next(ds) for _ in range(3))] == [
            ("insert", "u"), ("insert", "v"), ("update", "u")]
        got = [_next(all_s) for _ in range(3)]
        assert [e["ns"]["coll"] for e in got] == ["u", "v", "u"]
        r.csc2.u.drop()
        assert _next(cs)["operationType"] == "drop"
        assert _next(cs)["operationType"] == "invalidate"


def test_migration_adds_no_events_and_loses_none(c):
    r = c.router_client()
    coll = _sharded(r, "csc3", "m")
    coll.insert_many([{"_id": i, "x": i} for i in range(-50, 50)])
    stop = threading.Event()
    written = []

    def writer():
        i = 1000
        w = c.router_client()
        while not stop.is_set():
            x = (i % 200) - 100
            w.csc3.m.insert_one({"_id": i, "x": x})
            written.append(i)
            i += 1

    with coll.watch(max_await_time_ms=300) as s:
        t = threading.Thread(target=writer)
        t.start()
        from shale_fixtures import wait_until

        def more_writes(k=20):
            n0 = len(written)
            wait_until(lambda: len(written) >= n0 + k, timeout=30, what="more writes")
        try:
            more_writes()
            r.admin.command("moveChunk", "csc3.m", find={"x": 10}, to="shard0")
            more_writes()
            r.admin.command("moveChunk", "csc3.m", find={"x": 10}, to="shard1")
            more_writes()
        finally:
            stop.set()
            t.join()
        seen = []
        deadline = time.time() + 20
        while len(seen) < len(written) and time.time() < deadline:
            ev = s.try_next()
            if ev is not None:
                seen.append(ev)
        assert all(e["operationType"] == "insert" for e in seen)
        assert [e["documentKey"]["_id"] for e in seen] == written
        assert s.try_next() is None


def test_resume_after_router_restart(c):
    r = c.router_client()
    r.admin.command("enableSharding", "csc4", primaryShard="shard0")
    coll = r.csc4.k
    with coll.watch(max_await_time_ms=300) as s:
        coll.insert_one({"_id": 1})
        tok = _next(s)["_id"]
        assert _next_or_none(s) is None
        pbrt = s.resume_token
        # kill -9 the router under the open stream: pymongo resumes on the restarted one.
        c.router.kill()
        c.router.start()
        r2 = c.router_client()
        r2.csc4.k.insert_one({"_id": 2})
        r2.csc4.k.insert_one({"_id": 3})
        assert [_next(s)["documentKey"]["_id"] for _ in range(2)] == [2, 3]
    r2 = c.router_client()
    with r2.csc4.k.watch(resume_after=tok, max_await_time_ms=300) as s:
        assert [_next(s)["documentKey"]["_id"] for _ in range(2)] == [2, 3]
    # A high-water-mark token resumes after everything before it.
    with r2.csc4.k.watch(resume_after=pbrt, max_await_time_ms=300) as s:
        assert _next(s)["documentKey"]["_id"] == 2


def _next_or_none(stream):
    return stream.try_next()


def test_order_with_concurrent_writers_on_both_shards(c):
    r = c.router_client()
    coll = _sharded(r, "csc6", "o")
    n_per = 60

    def writer(k):
        w = c.router_client().csc6.o
        for i in range(n_per):
            w.insert_one({"_id": "%d-%d" % (k, i), "x": (i + 1) * (1 if k % 2 else -1), "k": k,
                          "i": i})

    with coll.watch(max_await_time_ms=300) as s:
        ts = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        evs = [_next(s) for _ in range(4 * n_per)]
    times = [e["clusterTime"] for e in evs]
    assert times == sorted(times)
    for k in range(4):
        mine = [e["fullDocument"]["i"] for e in evs if e["fullDocument"]["k"] == k]
        assert mine == list(range(n_per))
    tokens = [e["_id"]["_data"] for e in evs]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_start_after_invalidate_through_router(c):
    r = c.router_client()
    coll = _sharded(r, "csc7", "i")
    coll.insert_one({"_id": 1, "x": -1})
    with coll.watch(max_await_time_ms=300) as s:
        coll.drop()
        assert _next(s)["operationType"] == "drop"
        inv = _next(s)
        assert inv["operationType"] == "invalidate"
        assert not s.alive
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        r.csc7.i.watch(resume_after=inv["_id"]).try_next()
    assert e.value.code == 260
    with r.csc7.i.watch(start_after=inv["_id"], max_await_time_ms=300) as s:
        r.csc7.i.insert_one({"_id": 2, "x": 1})
        ev = _next(s)
        assert ev["operationType"] == "insert" and ev["documentKey"]["_id"] == 2


def test_node_driver_watch(c):
    import json
    import os
    import subprocess
    from test_node_driver import HERE, node_binary
    c.router_client().admin.command("enableSharding", "csnode", primaryShard="shard1")
    out = subprocess.run([node_binary(), os.path.join(HERE, "change_streams.js"), c.uri()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["types"] == ["insert", "update", "delete"]
    assert r["updated"] == {"a": 2}
    assert r["resumed"] == "update"
    assert r["preImage"] == {"_id": 1, "v": 1}


def test_update_lookup_across_a_migration(c):
    r = c.router_client()
    coll = _sharded(r, "csc5", "l")
    coll.insert_one({"_id": 1, "x": 10, "n": 0})
    with coll.watch(full_document="updateLookup", max_await_time_ms=300) as s:
        coll.update_one({"x": 10}, {"$inc": {"n": 1}})
        # The chunk moves before the event is read, and the donor's copy goes away.
        r.admin.command("moveChunk", "csc5.l", find={"x": 10}, to="shard0")
        from shale_fixtures import wait_until
        wait_until(lambda: c.shard_client(1).csc5.l.count_documents({}) == 0, timeout=30,
                   what="the donor's range deletion")
        ev = _next(s)
        assert ev["operationType"] == "update"
        assert ev["fullDocument"] == {"_id": 1, "x": 10, "n": 1}
        assert list(ev).index("fullDocument") < list(ev).index("ns")
        coll.delete_one({"x": 10})
        coll.insert_one({"_id": 2, "x": 11})
        coll.update_one({"x": 11}, {"$set": {"y": 1}})
        coll.delete_one({"x": 11})
        assert [_next(s)["operationType"] for _ in range(2)] == ["delete", "insert"]
        assert _next(s)["fullDocument"] is None
    # Follow-on stages see the looked-up document (they run after the lookup).
    with coll.watch([{"$match": {"operationType": "update", "fullDocument.keep": True}},
                     {"$project": {"fullDocument.pad": 0}}],
                    full_document="updateLookup", max_await_time_ms=300) as s:
        coll.insert_many([{"_id": 10, "x": -10, "keep": False}, {"_id": 11, "x": 20, "keep": True,
                                                                  "pad": 1}])
        coll.update_one({"x": -10}, {"$set": {"n": 1}})
        coll.update_one({"x": 20}, {"$set": {"n": 1}})
        ev = _next(s)
        assert ev["fullDocument"] == {"_id": 11, "x": 20, "keep": True, "n": 1}
        assert s.try_next() is None
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        coll.watch([{"$group": {"_id": None}}], full_document="updateLookup").try_next()
    assert e.value.code == 20


def _get_more_until(db, coll, cid, n):
    """Raw getMores until 'n' events arrived: the batches (each a list) and their
    postBatchResumeTokens."""
    batches, tokens = [], []
    for _ in range(100 if n > 0 else 0):
        cur = db.command({"getMore": cid, "collection": coll, "maxTimeMS": 300})["cursor"]
        if cur["nextBatch"]:
            batches.append(cur["nextBatch"])
            tokens.append(cur["postBatchResumeToken"])
        if sum(len(b) for b in batches) >= n:
            break
    return batches, tokens


def test_split_large_event_with_update_lookup(c):
    """$changeStreamSplitLargeEvent after updateLookup: the router looks the document up,
    then splits the event; batches stay within 16 MB (a fragment waits for the next batch and
    the postBatchResumeToken stays at the last event sent); resuming from a fragment gives
    the rest. Without the stage the event is BSONObjectTooLarge."""
    r = c.router_client()
    coll = _sharded(r, "csc10", "big")
    db = r.csc10
    coll.insert_one({"_id": 1, "x": 10, "a": "a" * (5 << 20)})
    spec = {"fullDocument": "updateLookup"}
    opened = db.command({"aggregate": "big", "cursor": {}, "pipeline": [
        {"$changeStream": spec}, {"$changeStreamSplitLargeEvent": {}}]})["cursor"]
    plain = db.command({"aggregate": "big", "cursor": {}, "pipeline": [
        {"$changeStream": spec}]})["cursor"]["id"]
    coll.update_one({"x": 10}, {"$set": {"b": "b" * (8 << 20)}})  # 8 MB + the 13 MB lookup
    coll.insert_one({"_id": 2, "x": -5})
    assert opened["firstBatch"] == []
    batches, tokens = _get_more_until(db, "big", opened["id"], 3)
    evs = [e for b in batches for e in b]
    assert [e.get("splitEvent") for e in evs] == [{"fragment": 1, "of": 2},
                                                   {"fragment": 2, "of": 2}, None]
    assert len(batches[0]) == 1 and tokens[0] == evs[0]["_id"]  # the second waited
    merged = {}
    for f in evs[:2]:
        merged.update({k: v for k, v in f.items() if k not in ("_id", "splitEvent")})
    assert merged["operationType"] == "update"
    assert merged["fullDocument"]["b"] == "b" * (8 << 20) and len(merged["fullDocument"]) == 4
    assert list(merged["updateDescription"]["updatedFields"]) == ["b"]
    assert evs[2]["operationType"] == "insert" and evs[2]["documentKey"] == {"x": -5, "_id": 2}
    tok = [e["_id"]["_data"] for e in evs]
    assert tok == sorted(tok)
    # Resuming from the first fragment gives the second, then what follows.
    cur = db.command({"aggregate": "big", "cursor": {}, "pipeline": [
        {"$changeStream": dict(spec, resumeAfter=evs[0]["_id"])},
        {"$changeStreamSplitLargeEvent": {}}]})["cursor"]
    rest = cur["firstBatch"] + [e for b in _get_more_until(db, "big", cur["id"],
                                                           2 - len(cur["firstBatch"]))[0]
                                for e in b]
    assert [e["_id"] for e in rest[:2]] == [evs[1]["_id"], evs[2]["_id"]]
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        _get_more_until(db, "big", plain, 1)
    assert e.value.code == 10334
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command({"aggregate": "big", "cursor": {}, "pipeline": [
            {"$changeStream": spec}, {"$changeStreamSplitLargeEvent": {}}, {"$match": {}}]})
    assert e.value.code == 7182802


def test_pre_images_through_router(c):
    r = c.router_client()
    admin = r.admin
    admin.command("setClusterParameter",
                  {"changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": 3600}}})
    got = admin.command("getClusterParameter", "changeStreamOptions")["clusterParameters"]
    assert got[0]["preAndPostImages"] == {"expireAfterSeconds": 3600}
    for sh in c.shards:
        got = sh.client().admin.command("getClusterParameter", "changeStreamOptions")
        assert got["clusterParameters"][0]["preAndPostImages"] == {"expireAfterSeconds": 3600}
    coll = _sharded(r, "csc9", "p")
    r.csc9.command("collMod", "p", changeStreamPreAndPostImages={"enabled": True})
    coll.insert_many([{"_id": 1, "x": -1, "v": 0}, {"_id": 2, "x": 1, "v": 0}])
    cid = r.csc9.command({"aggregate": "p", "cursor": {}, "pipeline": [
        {"$changeStream": {"fullDocumentBeforeChange": "required"}}]})["cursor"]["id"]
    coll.update_one({"x": -1}, {"$inc": {"v": 1}})
    coll.update_one({"x": 1}, {"$inc": {"v": 1}})
    coll.delete_one({"x": -1})
    evs = []
    for _ in range(50):
        evs += r.csc9.command({"getMore": cid, "collection": "p",
                               "maxTimeMS": 300})["cursor"]["nextBatch"]
        if len(evs) >= 3:
            break
    assert [e["fullDocumentBeforeChange"] for e in evs] == [
        {"_id": 1, "x": -1, "v": 0}, {"_id": 2, "x": 1, "v": 0}, {"_id": 1, "x": -1, "v": 1}]


def test_new_shard_joins_an_open_stream(c):
    import os
    from shale_fixtures import ShaleProcess
    r = c.router_client()
    coll = _sharded(r, "csc8", "n")
    p = ShaleProcess(["node", "--shardsvr", "--replSet", "shardNew"],
                     dbpath=os.path.join(c.base, "shardNew"), name="shardNew")
    try:
        with coll.watch(max_await_time_ms=300) as s:
            coll.insert_one({"_id": 1, "x": -1})
            assert _next(s)["documentKey"]["_id"] == 1
            p.start(extra=c.shard_extra)
            r.admin.command("addShard", "shardNew/" + p.host, name="shardNew")
            r.admin.command("split", "csc8.n", middle={"x": 100})
            r.admin.command("moveChunk", "csc8.n", find={"x": 100}, to="shardNew")
            # At once, no waiting: the router learns of the shard from the config server's
            # topology stream, whose high-water mark holds back every event after the
            # addShard until the new shard's stream is open, so its write comes in order.
            coll.insert_one({"_id": 2, "x": 150})   # on the new shard
            coll.insert_one({"_id": 3, "x": -2})
            evs = [_next(s) for _ in range(2)]
            assert [e["documentKey"]["_id"] for e in evs] == [2, 3]
            assert p.client().csc8.n.find_one({"_id": 2}) is not None
            assert "change stream opened on a new shard" in c.router.read_log()
    finally:
        r.admin.command("moveChunk", "csc8.n", find={"x": 100}, to="shard1")
        try:
            # Removed for good: later streams open on every shard the registry holds.
            from shale_fixtures import wait_until
            wait_until(lambda: r.admin.command("removeShard", "shardNew")["state"] ==
                       "completed", 30, "shardNew removed")
        except (pymongo.errors.PyMongoError, TimeoutError):
            pass
        p.stop()



def test_removed_shard_leaves_an_open_stream(c):
    """The config server's topology stream reports a shard's removal: the router closes its
    cursor at that point of the merge, so the stream goes on after the shard is gone."""
    import os
    from shale_fixtures import ShaleProcess, wait_until
    r = c.router_client()
    p = ShaleProcess(["node", "--shardsvr", "--replSet", "shardGone"],
                     dbpath=os.path.join(c.base, "shardGone"), name="shardGone")
    p.start(extra=c.shard_extra)
    try:
        db = r.csc10
        db.c.insert_one({"_id": 0})  # its primary shard is an old one
        r.admin.command("addShard", "shardGone/" + p.host, name="shardGone")
        with db.c.watch(max_await_time_ms=300) as s:
            db.c.insert_one({"_id": 1})
            assert _next(s)["documentKey"] == {"_id": 1}
            wait_until(lambda: r.admin.command("removeShard", "shardGone")["state"] ==
                       "completed", 30, "shardGone removed")
            p.stop()
            db.c.insert_one({"_id": 2})
            assert _next(s)["documentKey"] == {"_id": 2}
        assert "change stream closed on a removed shard" in c.router.read_log()
    finally:
        p.stop()
        p.cleanup()


def test_idle_shard_is_nudged_not_waited_for(c):
    """The asynchronous merge: events written on one shard while the other is idle come out
    one by one, each released once the idle shard's mark passed it -- which the router gets
    by a no-op write there (appendOplogNote) that ends its waiting getMore."""
    r = c.router_client()
    coll = _sharded(r, "csc11", "i")
    s1 = c.shard_client(1).local["oplog.rs"]
    before = s1.count_documents({"op": "n", "o.msg": "change stream merge"})
    with coll.watch(max_await_time_ms=2000) as s:
        for i in range(5):
            coll.insert_one({"_id": i, "x": -1 - i})   # shard0 only
            assert _next(s)["documentKey"]["_id"] == i
    assert s1.count_documents({"op": "n", "o.msg": "change stream merge"}) > before


def test_sharding_ddl_expanded_events(c):
    """With showExpandedEvents, shardCollection and refineCollectionShardKey are reported
    once (by the primary shard), with MongoDB's operationDescription; without it, not at all."""
    r = c.router_client()
    r.admin.command("enableSharding", "csc31", primaryShard="shard1")
    db = r.csc31
    db.k.insert_one({"_id": 0, "x": 1, "y": 1})
    db.k.create_index([("x", 1), ("y", 1)])
    def open_stream(**spec):
        cur = db.command({"aggregate": 1, "cursor": {},
                          "pipeline": [{"$changeStream": spec}]})["cursor"]
        assert cur["firstBatch"] == []
        return cur["id"]
    ex, plain = open_stream(showExpandedEvents=True), open_stream()
    r.admin.command("shardCollection", "csc31.k", key={"x": 1})
    r.admin.command("refineCollectionShardKey", "csc31.k", key={"x": 1, "y": 1})
    db.k.insert_one({"_id": 1, "x": 2, "y": 2})
    evs = [e for b in _get_more_until(db, "$cmd.aggregate", ex, 3)[0] for e in b]
    uuid = r.config.collections.find_one({"_id": "csc31.k"})["uuid"]
    assert [e["operationType"] for e in evs] == ["shardCollection", "refineCollectionShardKey",
                                                 "insert"]
    assert evs[0]["ns"] == {"db": "csc31", "coll": "k"}
    assert evs[0]["collectionUUID"] == uuid
    assert evs[0]["operationDescription"] == {"shardKey": {"x": 1}, "unique": False}
    assert evs[1]["operationDescription"] == {"shardKey": {"x": 1, "y": 1},
                                              "oldShardKey": {"x": 1}}
    assert list(evs[0])[:4] == ["_id", "operationType", "clusterTime", "wallTime"]
    got = [e for b in _get_more_until(db, "$cmd.aggregate", plain, 1)[0] for e in b]
    assert [e["operationType"] for e in got] == ["insert"]


def test_stale_router_stream(c):
    """A router whose routing table is stale (a chunk moved through another router) opens a
    stream that sees both shards' events, and its updateLookup finds the moved document."""
    r = c.router_client()
    coll = _sharded(r, "csc32", "st")
    coll.insert_many([{"_id": 1, "x": -3}, {"_id": 2, "x": 3}])
    r2 = c.add_router().client()
    assert r2.csc32.st.count_documents({}) == 2  # r2 caches the routing now
    r.admin.command("moveChunk", "csc32.st", find={"x": 3}, to="shard0")
    with r2.csc32.st.watch(full_document="updateLookup", max_await_time_ms=300) as s:
        coll.update_one({"x": 3}, {"$set": {"v": 1}})
        coll.update_one({"x": -3}, {"$set": {"v": 2}})
        evs = [_next(s) for _ in range(2)]
    assert [e["fullDocument"] for e in evs] == [{"_id": 2, "x": 3, "v": 1},
                                                {"_id": 1, "x": -3, "v": 2}]
