"""Change streams on a data node (a replica set of one): pymongo's watch() on a collection,
a database and the deployment; every event type with MongoDB's fields; resume tokens in
MongoDB's format, postBatchResumeToken in every batch; resumeAfter / startAfter /
startAtOperationTime; fullDocument modes; follow-on stages and refused ones; the errors
MongoDB gives (docs/design/change_streams.md)."""

import threading

import pymongo
import pytest
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

from shale_fixtures import ShaleProcess, cleanup_later


@pytest.fixture(scope="module")
def rs(request):
    p = ShaleProcess(["node", "--replSet", "rs0"], name="csnode")
    p.start()
    failed_before = request.session.testsfailed
    yield p
    failed = request.session.testsfailed > failed_before
    cleanup_later([p], lambda i, q: "test_change_streams-csnode" if failed else None)


@pytest.fixture
def client(rs):
    c = rs.client()
    yield c
    c.close()


def _next(stream, timeout_s=10):
    """The next event, waiting for it (try_next returns None after each empty getMore)."""
    import time
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        ev = stream.try_next()
        if ev is not None:
            return ev
    raise AssertionError("no change event within %ss" % timeout_s)


def test_standalone_refuses(node):
    db = node.client().test
    with pytest.raises(OperationFailure) as e:
        db.c.watch().try_next()
    assert e.value.code == 40573


def test_collection_events(client):
    db = client.cs1
    db.c.drop()
    db.create_collection("c")
    with db.c.watch(max_await_time_ms=200) as s:
        db.c.insert_one({"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1, "y": 2}})
        db.c.update_one({"_id": 1}, {"$set": {"a": 2, "sub.x": 5}, "$unset": {"sub.y": 1},
                                     "$pop": {"arr": 1}})
        db.c.replace_one({"_id": 1}, {"b": 1})
        db.c.delete_one({"_id": 1})
        db.other.insert_one({"_id": 9})  # another collection: not reported
        db.c.drop()
        ins = _next(s)
        assert ins["operationType"] == "insert"
        assert set(ins) >= {"_id", "clusterTime", "wallTime", "fullDocument", "ns", "documentKey"}
        assert ins["fullDocument"] == {"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1, "y": 2}}
        assert ins["ns"] == {"db": "cs1", "coll": "c"}
        assert ins["documentKey"] == {"_id": 1}
        assert isinstance(ins["clusterTime"], Timestamp)
        assert isinstance(ins["_id"]["_data"], str) and ins["_id"]["_data"].startswith("82")
        upd = _next(s)
        assert upd["operationType"] == "update"
        assert "fullDocument" not in upd
        assert upd["updateDescription"] == {
            "updatedFields": {"a": 2, "sub.x": 5},
            "removedFields": ["sub.y"],
            "truncatedArrays": [{"field": "arr", "newSize": 2}]}
        rep = _next(s)
        assert rep["operationType"] == "replace"
        assert rep["fullDocument"] == {"_id": 1, "b": 1}
        dele = _next(s)
        assert dele["operationType"] == "delete"
        assert dele["documentKey"] == {"_id": 1}
        drop = _next(s)
        assert drop["operationType"] == "drop"
        assert drop["ns"] == {"db": "cs1", "coll": "c"}
        inv = _next(s)
        assert inv["operationType"] == "invalidate"
        assert inv["clusterTime"] == drop["clusterTime"]
        assert ins["clusterTime"] < upd["clusterTime"] < rep["clusterTime"]
        assert ins["_id"]["_data"] < upd["_id"]["_data"] < drop["_id"]["_data"] \
            < inv["_id"]["_data"]
        assert not s.alive


def test_database_and_cluster_streams(client):
    db = client.cs2
    client.drop_database("cs2")
    db.a.insert_one({"_id": 0})
    with db.watch(max_await_time_ms=200) as dbs, \
            client.watch(max_await_time_ms=200) as cls:
        db.a.insert_one({"_id": 1})
        db.b.insert_one({"_id": 2})
        client.cs2other.x.insert_one({"_id": 3})
        db.a.rename("a2")
        client.drop_database("cs2")
        evs = [_next(dbs) for _ in range(4)]
        assert [(e["operationType"], e["ns"].get("coll")) for e in evs] == [
            ("insert", "a"), ("insert", "b"), ("rename", "a"), ("drop", "a2")] or \
            [(e["operationType"], e["ns"].get("coll")) for e in evs] == [
            ("insert", "a"), ("insert", "b"), ("rename", "a"), ("drop", "b")]
        assert evs[2]["to"] == {"db": "cs2", "coll": "a2"}
        rest = []
        while True:
            e = _next(dbs)
            rest.append(e["operationType"])
            if e["operationType"] == "invalidate":
                break
        assert rest[-2:] == ["dropDatabase", "invalidate"]
        cl = [_next(cls) for _ in range(3)]
        assert [e["ns"] for e in cl] == [{"db": "cs2", "coll": "a"}, {"db": "cs2", "coll": "b"},
                                         {"db": "cs2other", "coll": "x"}]


def test_resume_after_start_after_and_operation_time(client):
    db = client.cs3
    db.c.drop()
    t0 = db.command("ping")["operationTime"] if "operationTime" in db.command("ping") else None
    with db.c.watch(max_await_time_ms=200) as s:
        for i in range(5):
            db.c.insert_one({"_id": i})
        evs = [_next(s) for _ in range(5)]
    tok = evs[1]["_id"]
    with db.c.watch(resume_after=tok, max_await_time_ms=200) as s:
        assert [_next(s)["documentKey"]["_id"] for _ in range(3)] == [2, 3, 4]
    with db.c.watch(start_after=tok, max_await_time_ms=200) as s:
        assert _next(s)["documentKey"]["_id"] == 2
    with db.c.watch(start_at_operation_time=evs[3]["clusterTime"], max_await_time_ms=200) as s:
        assert [_next(s)["documentKey"]["_id"] for _ in range(2)] == [3, 4]
    # The postBatchResumeToken of an empty batch resumes after everything seen.
    with db.c.watch(max_await_time_ms=100) as s:
        assert s.try_next() is None
        pbrt = s.resume_token
        assert pbrt is not None
        db.c.insert_one({"_id": 10})
        assert _next(s)["documentKey"]["_id"] == 10
    with db.c.watch(resume_after=pbrt, max_await_time_ms=200) as s:
        assert _next(s)["documentKey"]["_id"] == 10
    assert t0 is None or t0 <= evs[0]["clusterTime"]


def test_invalidate_tokens(client):
    db = client.cs4
    db.c.insert_one({"_id": 1})
    with db.c.watch(max_await_time_ms=200) as s:
        db.c.drop()
        assert _next(s)["operationType"] == "drop"
        inv = _next(s)
    with pytest.raises(OperationFailure) as e:
        db.c.watch(resume_after=inv["_id"]).try_next()
    assert e.value.code == 260
    with db.c.watch(start_after=inv["_id"], max_await_time_ms=200) as s:
        db.c.insert_one({"_id": 2})
        ev = _next(s)
        assert ev["operationType"] == "insert" and ev["documentKey"] == {"_id": 2}


def test_full_document_modes(client):
    db = client.cs5
    db.c.drop()
    # whenAvailable / required: the pre-image with the update's $v:2 diff applied, so the
    # collection keeps pre-images (MongoDB's post-images need them too).
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    db.c.insert_one({"_id": 1, "n": 0})
    with db.c.watch(full_document="updateLookup", max_await_time_ms=200) as s, \
            db.c.watch(full_document="whenAvailable", max_await_time_ms=200) as w:
        db.c.update_one({"_id": 1}, {"$inc": {"n": 1}})
        db.c.update_one({"_id": 1}, {"$inc": {"n": 1}})
        first = _next(s)
        # updateLookup reads the current document: both updates are in.
        assert first["fullDocument"] == {"_id": 1, "n": 2}
        # whenAvailable gives the post-image of the update itself.
        assert _next(w)["fullDocument"] == {"_id": 1, "n": 1}
        assert _next(w)["fullDocument"] == {"_id": 1, "n": 2}
        db.c.delete_one({"_id": 1})
        db.c.insert_one({"_id": 2})
        db.c.update_one({"_id": 2}, {"$set": {"x": 1}})
        db.c.delete_one({"_id": 2})
        _next(s)  # the second update
        _next(s)  # delete
        _next(s)  # insert
        assert _next(s)["fullDocument"] is None  # looked up after the delete
    with pytest.raises(OperationFailure) as e:
        db.c.watch(full_document="bogus").try_next()
    assert e.value.code == 2
    # Without pre-images there is no post-image: null for whenAvailable, 47 for required.
    db.plain.drop()
    db.plain.insert_one({"_id": 1, "n": 0})
    with db.plain.watch(full_document="whenAvailable", max_await_time_ms=200) as w, \
            db.plain.watch(full_document="required", max_await_time_ms=200) as r:
        db.plain.update_one({"_id": 1}, {"$inc": {"n": 1}})
        ev = _next(w)
        assert ev["operationType"] == "update" and ev["fullDocument"] is None
        with pytest.raises(OperationFailure) as e:
            _next(r)
        assert e.value.code == 47


def test_follow_on_stages_and_refusals(client):
    db = client.cs6
    db.c.drop()
    with db.c.watch([{"$match": {"operationType": "insert", "fullDocument.keep": True}},
                     {"$project": {"fullDocument.secret": 0}},
                     {"$addFields": {"seen": True}}], max_await_time_ms=200) as s:
        db.c.insert_many([{"_id": 1, "keep": False}, {"_id": 2, "keep": True, "secret": 1}])
        ev = _next(s)
        assert ev["fullDocument"] == {"_id": 2, "keep": True} and ev["seen"] is True
    for stage, code in (({"$group": {"_id": None}}, 20), ({"$sort": {"a": 1}}, 20),
                        ({"$changeStream": {}}, 40602)):
        with pytest.raises(OperationFailure) as e:
            db.c.watch([stage]).try_next()
        assert e.value.code == code
    with pytest.raises(OperationFailure) as e:
        db.command({"aggregate": "c", "pipeline": [{"$match": {}}, {"$changeStream": {}}],
                    "cursor": {}})
    assert e.value.code == 40602
    with pytest.raises(OperationFailure) as e:
        db.command({"aggregate": "c", "pipeline": [{"$changeStream": {"bogus": 1}}],
                    "cursor": {}})
    assert e.value.code == 40415
    # Modifying _id makes the stream unresumable: ChangeStreamFatalError.
    with db.c.watch([{"$project": {"_id": 0}}], max_await_time_ms=200) as s:
        db.c.insert_one({"_id": 3})
        with pytest.raises(OperationFailure) as e:
            _next(s)
        assert e.value.code == 280
    with pytest.raises(OperationFailure) as e:
        client.admin.watch().try_next()
    assert e.value.code == 73


def test_raw_reply_and_batches(client):
    db = client.cs7
    db.c.drop()
    r = db.command({"aggregate": "c", "pipeline": [{"$changeStream": {}}], "cursor": {}})
    cur = r["cursor"]
    assert cur["firstBatch"] == [] and cur["id"] != 0 and cur["ns"] == "cs7.c"
    pbrt0 = cur["postBatchResumeToken"]["_data"]
    db.c.insert_many([{"_id": i} for i in range(5)])
    r = db.command({"getMore": cur["id"], "collection": "c", "batchSize": 2})
    nb = r["cursor"]["nextBatch"]
    assert [e["documentKey"]["_id"] for e in nb] == [0, 1]
    # A full batch: the token of its last event.
    assert r["cursor"]["postBatchResumeToken"] == nb[-1]["_id"]
    r = db.command({"getMore": cur["id"], "collection": "c", "maxTimeMS": 100})
    nb = r["cursor"]["nextBatch"]
    assert [e["documentKey"]["_id"] for e in nb] == [2, 3, 4]
    # The end of the oplog: a high-water mark past the last event.
    assert r["cursor"]["postBatchResumeToken"]["_data"] > nb[-1]["_id"]["_data"] > pbrt0
    r = db.command({"getMore": cur["id"], "collection": "c", "maxTimeMS": 50})
    assert r["cursor"]["nextBatch"] == [] and r["cursor"]["id"] == cur["id"]
    db.command({"killCursors": "c", "cursors": [cur["id"]]})


def test_await_wakes_on_write(client):
    db = client.cs8
    db.c.drop()
    with db.c.watch(max_await_time_ms=5000) as s:
        t = threading.Timer(0.3, lambda: db.c.insert_one({"_id": 1}))
        t.start()
        ev = s.next()
        t.join()
        assert ev["documentKey"] == {"_id": 1}


def test_history_lost(client):
    db = client.cs9
    with pytest.raises(OperationFailure) as e:
        db.c.watch(start_at_operation_time=Timestamp(1, 1)).try_next()
    assert e.value.code == 286


def test_transaction_events(client):
    db = client.cs10
    db.c.drop()
    db.create_collection("c")
    db.c.insert_one({"_id": 0})
    with db.c.watch(max_await_time_ms=200) as s:
        with client.start_session() as sess:
            with sess.start_transaction():
                db.c.insert_one({"_id": 1}, session=sess)
                db.c.insert_one({"_id": 2}, session=sess)
                db.c.delete_one({"_id": 0}, session=sess)
                db.c.update_one({"_id": 1}, {"$set": {"a": 1}}, session=sess)
                db.c.replace_one({"_id": 2}, {"b": 1}, session=sess)
            lsid = sess.session_id
        evs = [_next(s) for _ in range(5)]
        assert [e["operationType"] for e in evs] == [
            "insert", "insert", "delete", "update", "replace"]
        assert evs[3]["updateDescription"] == {"updatedFields": {"a": 1}, "removedFields": [],
                                               "truncatedArrays": []}
        assert "fullDocument" not in evs[3] and evs[4]["fullDocument"] == {"_id": 2, "b": 1}
        evs = evs[:3]
        assert len({e["clusterTime"] for e in evs}) == 1
        assert all(e["lsid"] == evs[0]["lsid"] and "id" in e["lsid"] for e in evs)
        assert evs[0]["lsid"]["id"].bytes == bytes(lsid["id"])
        assert len({e["txnNumber"] for e in evs}) == 1
        tokens = [e["_id"]["_data"] for e in evs]
        assert tokens == sorted(tokens) and len(set(tokens)) == 3
    # Resume in the middle of the transaction's events.
    with db.c.watch(resume_after=evs[0]["_id"], max_await_time_ms=200) as s:
        assert [_next(s)["operationType"] for _ in range(2)] == ["insert", "delete"]


def test_expanded_events(client):
    db = client.cs11
    db.c.drop()
    r = db.command({"aggregate": 1, "pipeline": [{"$changeStream": {"showExpandedEvents": True}}],
                    "cursor": {}})
    db.create_collection("c")
    db.c.create_index("a")
    r = db.command({"getMore": r["cursor"]["id"], "collection": "$cmd.aggregate",
                    "maxTimeMS": 500})
    evs = r["cursor"]["nextBatch"]
    assert [e["operationType"] for e in evs] == ["create", "createIndexes"]
    assert evs[0]["ns"] == {"db": "cs11", "coll": "c"} and "collectionUUID" in evs[0]


def test_periodic_noop_writer(shale_process):
    p = shale_process(["node", "--replSet", "rs0", "--setParameter", "periodicNoopIntervalSecs=1"],
                      name="noop")
    cl = p.client()
    oplog = cl.local["oplog.rs"]
    from shale_fixtures import wait_until
    wait_until(lambda: oplog.find_one({"op": "n", "o.msg": "periodic noop"}) is not None,
               timeout=10, what="a periodic no-op entry")
    # An idle stream's high-water mark moves with them.
    with cl.test.c.watch(max_await_time_ms=100) as s:
        s.try_next()
        first = s.resume_token["_data"]
        wait_until(lambda: s.try_next() is None and s.resume_token["_data"] > first, timeout=10,
                   what="the postBatchResumeToken to advance")


def test_history_lost_after_oplog_truncation(shale_process):
    from shale_fixtures import wait_until
    p = shale_process(["node", "--replSet", "rs0", "--oplogSize", "1",
                       "--setParameter", "syncdelay=1",
                       "--setParameter", "expiredChangeStreamPreImageRemovalJobSleepSecs=1"],
                      name="cstrunc")
    cl = p.client()
    db = cl.test
    db.c.insert_one({"_id": "first"})
    # A pre-image lives as long as its oplog entry (expireAfterSeconds "off").
    db.create_collection("p", changeStreamPreAndPostImages={"enabled": True})
    db.p.insert_one({"_id": 1})
    db.p.update_one({"_id": 1}, {"$set": {"v": 1}})
    assert cl.config["system.preimages"].count_documents({}) == 1
    r = db.command({"aggregate": "c", "pipeline": [{"$changeStream": {}}], "cursor": {}})
    with db.c.watch(max_await_time_ms=100) as s:
        db.c.insert_one({"_id": 0})
        tok = _next(s)["_id"]
    pad = "x" * 4000
    for batch in range(10):
        db.c.insert_many([{"_id": batch * 100 + i + 1, "pad": pad} for i in range(100)])
    oplog = cl.local["oplog.rs"]
    wait_until(lambda: oplog.find_one({"o._id": 0, "ns": "test.c"}) is None, timeout=30,
               what="oplog truncation past the token")
    # A stream that fell behind the truncation, and a resume from before it.
    with pytest.raises(OperationFailure) as e:
        db.command({"getMore": r["cursor"]["id"], "collection": "c"})
    assert e.value.code == 286
    assert "NonResumableChangeStreamError" in (e.value.details or {}).get("errorLabels", [])
    with pytest.raises(OperationFailure) as e:
        db.c.watch(resume_after=tok).try_next()
    assert e.value.code == 286
    wait_until(lambda: cl.config["system.preimages"].count_documents({}) == 0, timeout=10,
               what="the pre-image to go with its oplog entry")


def _raw_stream(db, coll, **spec):
    r = db.command({"aggregate": coll, "pipeline": [{"$changeStream": spec}], "cursor": {}})
    return r["cursor"]["id"]


def _raw_next(db, coll, cid, n):
    got = []
    for _ in range(50):
        r = db.command({"getMore": cid, "collection": coll, "maxTimeMS": 200})
        got += r["cursor"]["nextBatch"]
        if len(got) >= n:
            break
    return got


def test_pre_images(client):
    db = client.cs12
    db.drop_collection("p")
    db.drop_collection("q")
    db.create_collection("p", changeStreamPreAndPostImages={"enabled": True})
    opts = db.command("listCollections", filter={"name": "p"})["cursor"]["firstBatch"][0]
    assert opts["options"]["changeStreamPreAndPostImages"] == {"enabled": True}
    db.p.insert_one({"_id": 1, "v": 1})
    db.q.insert_one({"_id": 1, "v": 1})
    cid = _raw_stream(db, "p", fullDocumentBeforeChange="required")
    db.p.update_one({"_id": 1}, {"$set": {"v": 2}})
    db.p.replace_one({"_id": 1}, {"w": 3})
    db.p.delete_one({"_id": 1})
    evs = _raw_next(db, "p", cid, 3)
    assert [e["operationType"] for e in evs] == ["update", "replace", "delete"]
    assert [e["fullDocumentBeforeChange"] for e in evs] == [
        {"_id": 1, "v": 1}, {"_id": 1, "v": 2}, {"_id": 1, "w": 3}]
    # Kept as MongoDB keeps them: config.system.preimages, not in the oplog entry.
    from bson.binary import Binary
    uuid = Binary(opts["info"]["uuid"].bytes, 4)
    recs = list(client.config["system.preimages"].find({"_id.nsUUID": uuid}).sort("_id.ts", 1))
    assert [r["preImage"] for r in recs] == [e["fullDocumentBeforeChange"] for e in evs]
    assert [r["_id"]["ts"] for r in recs] == [e["clusterTime"] for e in evs]
    assert all(r["_id"]["applyOpsIndex"] == 0 and "operationTime" in r for r in recs)
    assert client.local["oplog.rs"].count_documents({"ui": uuid, "preImage": {"$exists": 1}}) == 0
    # A collection without the option: whenAvailable gives null, required fails.
    cid = _raw_stream(db, "q", fullDocumentBeforeChange="whenAvailable")
    db.q.update_one({"_id": 1}, {"$set": {"v": 2}})
    assert _raw_next(db, "q", cid, 1)[0]["fullDocumentBeforeChange"] is None
    cid = _raw_stream(db, "q", fullDocumentBeforeChange="required")
    db.q.update_one({"_id": 1}, {"$set": {"v": 3}})
    with pytest.raises(OperationFailure) as e:
        _raw_next(db, "q", cid, 1)
    assert e.value.code == 47
    # collMod turns it on.
    db.command("collMod", "q", changeStreamPreAndPostImages={"enabled": True})
    cid = _raw_stream(db, "q", fullDocumentBeforeChange="required")
    db.q.delete_one({"_id": 1})
    assert _raw_next(db, "q", cid, 1)[0]["fullDocumentBeforeChange"] == {"_id": 1, "v": 3}
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "q", changeStreamPreAndPostImages={"on": True})
    assert e.value.code == 40415


def test_pre_images_expire(shale_process):
    from shale_fixtures import wait_until
    p = shale_process(["node", "--replSet", "rs0", "--setParameter",
                       "expiredChangeStreamPreImageRemovalJobSleepSecs=1"], name="cspre")
    cl = p.client()
    admin = cl.admin
    got = admin.command("getClusterParameter", "changeStreamOptions")["clusterParameters"]
    assert got[0]["_id"] == "changeStreamOptions"
    assert got[0]["preAndPostImages"] == {"expireAfterSeconds": "off"}
    for bad, code in [({"preAndPostImages": {"expireAfterSeconds": -1}}, 2),
                      ({"preAndPostImages": {"other": 1}}, 40415)]:
        with pytest.raises(OperationFailure) as e:
            admin.command("setClusterParameter", {"changeStreamOptions": bad})
        assert e.value.code == code
    with pytest.raises(OperationFailure) as e:
        admin.command("setClusterParameter", {"noSuchParameter": {}})
    assert e.value.code == 4
    db = cl.test
    db.create_collection("p", changeStreamPreAndPostImages={"enabled": True})
    db.p.insert_one({"_id": 1, "v": 0})
    with cl.start_session() as sess:
        db.p.update_one({"_id": 1}, {"$inc": {"v": 1}}, session=sess)
        t_update = sess.operation_time
    pre = cl.config["system.preimages"]
    assert pre.count_documents({}) == 1
    # "off": they live as long as the oplog holds their entry.
    import time
    time.sleep(1.5)  # a remover pass (every second here) keeps it
    assert pre.count_documents({}) == 1
    admin.command("setClusterParameter",
                  {"changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": 1}}})
    got = admin.command("getClusterParameter", "changeStreamOptions")["clusterParameters"]
    assert got[0]["preAndPostImages"] == {"expireAfterSeconds": 1}
    assert got[0]["clusterParameterTime"].time > 0
    wait_until(lambda: pre.count_documents({}) == 0, timeout=10, what="the pre-image to expire")
    # The event is still in the oplog, its pre-image expired: whenAvailable gives null.
    r = db.command({"aggregate": "p", "cursor": {}, "pipeline": [{"$changeStream": {
        "startAtOperationTime": t_update, "fullDocumentBeforeChange": "whenAvailable"}}]})
    ev = (r["cursor"]["firstBatch"] or _raw_next(db, "p", r["cursor"]["id"], 1))[0]
    assert ev["clusterTime"] == t_update and ev["fullDocumentBeforeChange"] is None


def test_split_large_event(client):
    db = client.cs13
    db.drop_collection("big")
    db.create_collection("big", changeStreamPreAndPostImages={"enabled": True})
    db.big.insert_one({"_id": 1, "a": "x" * (9 << 20)})
    spec = {"fullDocument": "required", "fullDocumentBeforeChange": "required"}
    plain = _raw_stream(db, "big", **spec)
    r = db.command({"aggregate": "big", "cursor": {}, "pipeline": [
        {"$changeStream": spec}, {"$changeStreamSplitLargeEvent": {}}]})
    split = r["cursor"]["id"]
    db.big.replace_one({"_id": 1}, {"b": "y" * (9 << 20)})   # an 18 MB event
    # Without the stage: BSONObjectTooLarge, as MongoDB.
    with pytest.raises(OperationFailure) as e:
        _raw_next(db, "big", plain, 1)
    assert e.value.code == 10334
    frags = _raw_next(db, "big", split, 2)
    assert [f["splitEvent"] for f in frags] == [{"fragment": 1, "of": 2}, {"fragment": 2, "of": 2}]
    assert list(frags[0])[:2] == ["_id", "splitEvent"]
    assert frags[0]["operationType"] == "replace" and frags[0]["fullDocument"]["b"][:1] == "y"
    assert frags[1]["fullDocumentBeforeChange"]["a"][:1] == "x"
    tokens = [f["_id"]["_data"] for f in frags]
    assert tokens == sorted(tokens) and len(set(tokens)) == 2
    # Resuming from the first fragment gives the second.
    r = db.command({"aggregate": "big", "cursor": {}, "pipeline": [
        {"$changeStream": dict(spec, resumeAfter=frags[0]["_id"])},
        {"$changeStreamSplitLargeEvent": {}}]})
    rest = r["cursor"]["firstBatch"] or _raw_next(db, "big", r["cursor"]["id"], 1)
    assert rest[0]["_id"] == frags[1]["_id"] and rest[0]["splitEvent"]["fragment"] == 2
    # Only as the last stage.
    with pytest.raises(OperationFailure) as e:
        db.command({"aggregate": "big", "cursor": {}, "pipeline": [
            {"$changeStream": {}}, {"$changeStreamSplitLargeEvent": {}}, {"$match": {}}]})
    assert e.value.code == 7182802


def _last_update_entry(client, ns):
    return client.local.oplog.rs.find_one({"ns": ns, "op": "u"}, sort=[("ts", -1)])


def test_v2_update_entries_and_their_events(client):
    """An update by operators is written as MongoDB's $v:2 diff ({$v: 2, diff}, o2 the
    documentKey), a replacement as the document; the event's updateDescription comes from the
    diff, with disambiguatedPaths under showExpandedEvents (MongoDB 7.0)."""
    db = client.csv2
    db.c.drop()
    db.c.insert_one({"_id": 1, "a": 1, "sub": {"x": 1, "y": 2}, "arr": [1, 2, 3],
                     "o": {"0": {"1": "n"}}})
    r = db.command({"aggregate": "c", "cursor": {},
                    "pipeline": [{"$changeStream": {"showExpandedEvents": True}}]})
    db.c.update_one({"_id": 1}, {"$set": {"sub.x": 5, "n": 1}, "$unset": {"sub.y": 1},
                                 "$pop": {"arr": 1}})
    e = _last_update_entry(client, "csv2.c")
    assert e["o"] == {"$v": 2, "diff": {"i": {"n": 1},
                                        "ssub": {"d": {"y": False}, "u": {"x": 5}},
                                        "sarr": {"a": True, "l": 2}}}
    assert list(e["o"]) == ["$v", "diff"] and e["o2"] == {"_id": 1}
    db.c.update_one({"_id": 1}, {"$set": {"o.0.1": "u", "arr.1": {"k.j": 1}}})
    # A pipeline update is an update too; a replacement is written and reported whole.
    db.c.update_one({"_id": 1}, [{"$set": {"p": {"$add": ["$a", 1]}}}])
    db.c.replace_one({"_id": 1}, {"r": 1})
    assert _last_update_entry(client, "csv2.c")["o"] == {"_id": 1, "r": 1}
    evs = []
    while len(evs) < 4:
        r = db.command({"getMore": r["cursor"]["id"], "collection": "c", "maxTimeMS": 500})
        evs += r["cursor"]["nextBatch"]
    assert [ev["operationType"] for ev in evs] == ["update"] * 3 + ["replace"]
    assert evs[0]["updateDescription"] == {
        "updatedFields": {"n": 1, "sub.x": 5}, "removedFields": ["sub.y"],
        "truncatedArrays": [{"field": "arr", "newSize": 2}], "disambiguatedPaths": {}}
    assert evs[1]["updateDescription"]["updatedFields"] == {"o.0.1": "u", "arr.1": {"k.j": 1}}
    assert evs[1]["updateDescription"]["disambiguatedPaths"] == {"o.0.1": ["o", "0", "1"]}
    assert evs[2]["updateDescription"]["updatedFields"] == {"p": 2}
    db.command({"killCursors": "c", "cursors": [r["cursor"]["id"]]})
    # Without showExpandedEvents there is no disambiguatedPaths.
    with db.c.watch(max_await_time_ms=200) as s:
        db.c.update_one({"_id": 1}, {"$set": {"q": 1}})
        assert _next(s)["updateDescription"] == {"updatedFields": {"q": 1}, "removedFields": [],
                                                 "truncatedArrays": []}
    # applyOps takes the $v:2 form as MongoDB's does.
    client.admin.command("applyOps", [{"op": "u", "ns": "csv2.c", "o2": {"_id": 1},
                                       "o": {"$v": 2, "diff": {"u": {"r": 2}, "i": {"s": 1}}}}])
    assert db.c.find_one({"_id": 1}) == {"_id": 1, "r": 2, "q": 1, "s": 1}


def test_v2_updates_survive_kill_and_recovery():
    """Recovery replays $v:2 entries (applies each diff to the document it had): the documents
    after kill -9 are the ones acknowledged with j:true."""
    p = ShaleProcess(["node", "--replSet", "rsv2"], name="csv2")
    p.start()
    try:
        c = p.client()
        coll = c.test.get_collection(
            "k", write_concern=pymongo.WriteConcern(j=True))
        coll.insert_many([{"_id": i, "n": 0, "sub": {"list": [i]}} for i in range(20)])
        for r in range(5):
            for i in range(20):
                coll.update_one({"_id": i}, {"$inc": {"n": 1}, "$push": {"sub.list": r},
                                             "$set": {"r%d" % r: True}})
        want = list(coll.find({}, sort=[("_id", 1)]))
        c.close()
        p.kill()
        p.start()
        c = p.client()
        assert list(c.test.k.find({}, sort=[("_id", 1)])) == want
        assert want[3] == {"_id": 3, "n": 5, "sub": {"list": [3, 0, 1, 2, 3, 4]}, "r0": True,
                           "r1": True, "r2": True, "r3": True, "r4": True}
        c.close()
    finally:
        cleanup_later([p], lambda i, q: None)


def test_pre_images_of_a_transactions_ops(rs, client):
    """A transaction's updates and deletes on a collection with changeStreamPreAndPostImages
    keep their pre-images (keyed by the commit's time and the op's index): the events have
    fullDocumentBeforeChange, and the updates' post-images."""
    db = client.cstxnpre
    db.c.drop()
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    db.c.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    cid = _raw_stream(db, "c", fullDocument="required", fullDocumentBeforeChange="required")
    with client.start_session() as sess:
        with sess.start_transaction():
            db.c.update_one({"_id": 1}, {"$set": {"v": 10}}, session=sess)
            db.c.delete_one({"_id": 2}, session=sess)
            db.c.update_one({"_id": 1}, {"$inc": {"v": 1}}, session=sess)
    evs = _raw_next(db, "c", cid, 3)
    db.command({"killCursors": "c", "cursors": [cid]})
    assert [e["operationType"] for e in evs] == ["update", "delete", "update"]
    assert [e["fullDocumentBeforeChange"] for e in evs] == [
        {"_id": 1, "v": 1}, {"_id": 2, "v": 2}, {"_id": 1, "v": 10}]
    assert evs[0]["fullDocument"] == {"_id": 1, "v": 10}
    assert evs[2]["fullDocument"] == {"_id": 1, "v": 11}
    assert all("lsid" in e and e["clusterTime"] == evs[0]["clusterTime"] for e in evs)
    ids = [r["_id"] for r in client.config["system.preimages"].find(
        {"_id.ts": evs[0]["clusterTime"]}, sort=[("_id.applyOpsIndex", 1)])]
    assert [i["applyOpsIndex"] for i in ids] == [0, 1, 2]
